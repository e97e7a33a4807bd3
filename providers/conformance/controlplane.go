package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// ControlPlane is one control-plane implementation (a cluster's
// spec.controlPlane.type) under the control-plane section of the suite:
// RunControlPlane drives one cluster of it through a capn deployment as a
// user does — capn apply, capn kubeconfig, capn describe, capn delete —
// and reads its observed record controlplane.<cluster>.
type ControlPlane struct {
	// Type is spec.controlPlane.type: machines, hosted or external.
	Type string
	// Providers are those whose infrastructure records the cluster may
	// hold (infra.<p>.<cluster>.…): they must be gone after the delete.
	Providers []string
	// Setup runs, until the test ends, what the implementation needs
	// beside the deployment RunControlPlane started (e.Capn): its own
	// service, a provider, an external cluster. It may set
	// e.ObservedVersion and e.Kubeconfig.
	Setup func(t *testing.T, e *ControlPlaneEnv)
	// Manifest is the cluster the section applies: its name, Kubernetes
	// version and control-plane replicas, and no worker pool.
	Manifest func(name, version string, replicas int32) string
	// Leftovers lists what the implementation still holds for cluster —
	// processes, directories, objects it made in an external cluster; last
	// is the cluster's record before the delete. After the delete there
	// must be none.
	Leftovers func(t *testing.T, e *ControlPlaneEnv, cluster string, last *capnv1.ControlPlaneRecord) []string
}

// ControlPlaneFeatures are what the implementation supports.
type ControlPlaneFeatures struct {
	// Scale: a change of spec.controlPlane.replicas 1 → ScaleTo → 1 is
	// made, the record's replicas and readyReplicas follow. Unset: the
	// change must be refused by capn apply with an error naming
	// spec.controlPlane.replicas (nothing changes), or reported in a
	// record's condition that is not True and names the replicas, the
	// control plane still serving; it is then undone.
	Scale bool
	// ScaleTo is the replicas the Scale check asks for (0: 3).
	ScaleTo int32
	// Upgrade: a change of spec.kubernetesVersion from the oldest version
	// of CAPN_KUBE_BIN to the newest is made: the record's version and the
	// API server's follow. Unset: the version is observed, not set
	// (external): the record must report the server's own,
	// ControlPlaneEnv.ObservedVersion.
	Upgrade bool
	// Timeout bounds each wait for the control plane (0: 6 minutes).
	Timeout time.Duration
}

// ControlPlaneEnv is the section's world: an embedded nats-server with
// capn's topology, a capn deployment on it and the Kubernetes binaries.
type ControlPlaneEnv struct {
	*sdktest.Env
	// NATSURL is the server's client URL.
	NATSURL string
	// Capn is the deployment (core services, gateway, CLI).
	Capn *Capn
	// Clusters reads the deployment's KV.
	Clusters *Clusters
	// Bins are the Kubernetes binaries, oldest version first; KubeBin is
	// their colon-separated list (a provider's or controlplane-hosted's
	// --kube-bin).
	Bins    []KubeBinDir
	KubeBin string
	// ObservedVersion is set by Setup of an implementation that observes
	// its version rather than sets it (external): what its API server
	// runs.
	ObservedVersion string
	// Kubeconfig is set by Setup of an implementation for which capn hands
	// out no kubeconfig (external: capn's CA did not sign its API server):
	// the file a user reaches the API server with. Empty: capn kubeconfig.
	Kubeconfig string
}

// ControlPlaneChecks are the section's checks, in the order they run on
// one cluster.
var ControlPlaneChecks = []string{"Initialise", "EndpointReachable", "Scale", "Upgrade", "DeleteLeavesNothing"}

// RunControlPlane runs the control-plane section against cp: one capn
// deployment and one cluster of one control-plane replica, no workers,
// taken through the checks of ControlPlaneChecks as subtests; a failed
// check skips the ones after it (they build on it). Without the
// Kubernetes binaries ($CAPN_KUBE_BIN) it is skipped, or failed under
// CAPN_REQUIRE_KUBE=1; with -short it is skipped.
func RunControlPlane(t *testing.T, cp ControlPlane, f ControlPlaneFeatures) {
	if err := cp.validate(); err != nil {
		t.Fatal(err)
	}
	bins := KubeBins(t, "")
	if testing.Short() {
		t.Skip("runs a capn deployment and a real control plane; skipped with -short")
	}
	if f.ScaleTo == 0 {
		f.ScaleTo = 3
	}
	if f.Timeout == 0 {
		f.Timeout = 6 * time.Minute
	}
	begin := time.Now()
	env := sdktest.New(t)
	e := &ControlPlaneEnv{Env: env, NATSURL: env.Server.URL(), Bins: bins, KubeBin: JoinKubeBins(bins)}
	e.Capn = StartCapn(t, e.NATSURL)
	e.Clusters = NewClusters(t, env.JS)
	cp.Setup(t, e)
	newest := bins[len(bins)-1]
	r := &cpRun{cp: cp, f: f, e: e, name: uniqueName("cp"), version: bins[0].Version, replicas: 1,
		k: &KubeCluster{T: t, Capn: e.Capn, Clusters: e.Clusters, Bin: newest.Dir, Version: newest.Version}}
	r.k.Name = r.name
	t.Logf("control plane %s: deployment up in %.1fs; cluster %s at %s, Kubernetes %v", cp.Type, time.Since(begin).Seconds(), r.name, r.version, e.KubeBin)

	runs := map[string]func(*testing.T){
		"Initialise": r.initialise, "EndpointReachable": r.endpointReachable, "Scale": r.scale,
		"Upgrade": r.upgrade, "DeleteLeavesNothing": r.deleteLeavesNothing,
	}
	var figures []string
	failed := ""
	for _, name := range ControlPlaneChecks {
		start := time.Now()
		ok := t.Run(name, func(t *testing.T) {
			if failed != "" {
				t.Skipf("%s failed: this check builds on it", failed)
			}
			r.bind(t)
			defer r.bind(nil)
			runs[name](t)
		})
		if !ok && failed == "" {
			failed = name
		}
		figures = append(figures, fmt.Sprintf("%s %.1fs", name, time.Since(start).Seconds()))
	}
	t.Logf("FIGURES: control plane %s (1 replica, no workers): %s; total %.1fs", cp.Type, strings.Join(figures, ", "), time.Since(begin).Seconds())
}

func (cp ControlPlane) validate() error {
	var errs []error
	if cp.Type == "" {
		errs = append(errs, errors.New("conformance.ControlPlane: Type is required (machines, hosted or external)"))
	}
	if cp.Setup == nil {
		errs = append(errs, errors.New("conformance.ControlPlane: Setup is required (it starts the implementation)"))
	}
	if cp.Manifest == nil {
		errs = append(errs, errors.New("conformance.ControlPlane: Manifest is required"))
	}
	if cp.Leftovers == nil {
		errs = append(errs, errors.New("conformance.ControlPlane: Leftovers is required (what the implementation holds for a cluster)"))
	}
	return errors.Join(errs...)
}

// cpRun is the section's one cluster and what the checks know of it.
type cpRun struct {
	cp   ControlPlane
	f    ControlPlaneFeatures
	e    *ControlPlaneEnv
	k    *KubeCluster
	name string
	// version and replicas are the spec's as last applied.
	version  string
	replicas int32

	parent struct {
		t     *testing.T
		capn  *Capn
		clust *Clusters
	}
}

// bind points the deployment's helpers at the subtest t (their Fatal must
// run on its goroutine); nil puts the parent's back.
func (r *cpRun) bind(t *testing.T) {
	if r.parent.t == nil {
		r.parent.t, r.parent.capn, r.parent.clust = r.k.T, r.e.Capn, r.e.Clusters
	}
	if t == nil {
		r.k.T, r.e.Capn, r.e.Clusters = r.parent.t, r.parent.capn, r.parent.clust
		r.k.Capn, r.k.Clusters = r.e.Capn, r.e.Clusters
		return
	}
	c, cl := *r.parent.capn, *r.parent.clust
	c.t, cl.t = t, t
	r.k.T, r.e.Capn, r.e.Clusters = t, &c, &cl
	r.k.Capn, r.k.Clusters = &c, &cl
}

// wantVersion is the version the record and the API server must report.
func (r *cpRun) wantVersion() string {
	if r.e.ObservedVersion != "" {
		return r.e.ObservedVersion
	}
	return r.version
}

// manifestFile writes the cluster at version with replicas and returns
// the file's path.
func (r *cpRun) manifestFile(version string, replicas int32) string {
	path := filepath.Join(r.e.Capn.Home, r.name+".yaml")
	r.k.Write(path, r.cp.Manifest(r.name, version, replicas))
	return path
}

// apply applies the cluster at version with replicas (capn apply) and
// returns the desired cluster's revision after it.
func (r *cpRun) apply(version string, replicas int32) uint64 {
	r.k.T.Helper()
	r.e.Capn.CLI("apply", "-f", r.manifestFile(version, replicas))
	r.version, r.replicas = version, replicas
	return r.e.Clusters.Revision(r.name)
}

// waitRecord polls the record until check passes and returns it.
func (r *cpRun) waitRecord(t *testing.T, what string, check func(rec *capnv1.ControlPlaneRecord) error) *capnv1.ControlPlaneRecord {
	t.Helper()
	var rec *capnv1.ControlPlaneRecord
	Poll(t, "controlplane."+r.name+": "+what, r.f.Timeout, func() error {
		rec = r.e.Clusters.ControlPlane(r.name)
		if rec == nil {
			return errors.New("no record")
		}
		if err := check(rec); err != nil {
			return fmt.Errorf("%w (record: %s)", err, describeRecord(rec))
		}
		return nil
	})
	return rec
}

// settled: the record is the implementation's, initialized, Ready, with
// an endpoint, replicas API servers all ready at the wanted version, and
// answers revision rev of the desired cluster or a later one.
func (r *cpRun) settled(replicas int32, rev uint64) func(*capnv1.ControlPlaneRecord) error {
	return func(rec *capnv1.ControlPlaneRecord) error {
		var p []string
		if rec.GetImplementation() != r.cp.Type {
			p = append(p, fmt.Sprintf("implementation %q, want %q", rec.GetImplementation(), r.cp.Type))
		}
		if !rec.GetInitialized() {
			p = append(p, "not initialized")
		}
		if ep := rec.GetEndpoint(); ep.GetHost() == "" || ep.GetPort() == 0 {
			p = append(p, "no endpoint")
		}
		if c := condition(rec, "Ready"); c.GetStatusValue() != capnv1.ConditionTrue {
			p = append(p, fmt.Sprintf("Ready %q", c.GetStatus()))
		}
		if rec.GetReplicas() != replicas || rec.GetReadyReplicas() != replicas {
			p = append(p, fmt.Sprintf("replicas %d/%d ready, want %d/%d", rec.GetReadyReplicas(), rec.GetReplicas(), replicas, replicas))
		}
		if rec.GetVersion() != r.wantVersion() {
			p = append(p, fmt.Sprintf("version %q, want %s", rec.GetVersion(), r.wantVersion()))
		}
		if uint64(rec.GetObservedGeneration()) < rev {
			p = append(p, fmt.Sprintf("observedGeneration %d, want the desired revision %d", rec.GetObservedGeneration(), rev))
		}
		if len(p) > 0 {
			return errors.New(strings.Join(p, "; "))
		}
		return nil
	}
}

// initialise: capn apply → the cluster Ready; the record initialized,
// Ready, with an endpoint, one ready replica at the version, answering
// exactly the desired revision; capn describe names the implementation,
// the endpoint and the record's Ready condition.
func (r *cpRun) initialise(t *testing.T) {
	applied := time.Now()
	rev := r.apply(r.version, 1)
	r.e.Clusters.WaitReady(r.name, r.f.Timeout)
	ready := time.Since(applied)
	rec := r.waitRecord(t, "initialized and Ready", r.settled(1, rev))
	if got := uint64(rec.GetObservedGeneration()); got != rev {
		t.Errorf("observedGeneration %d, want the desired cluster's revision %d", got, rev)
	}
	t.Logf("%s control plane: cluster Ready %.1fs after capn apply; record %s", r.cp.Type, ready.Seconds(), describeRecord(rec))
	r.describe(t, rec)
}

// describe: capn describe shows the implementation with the record's
// endpoint, version and replicas, and the record's conditions.
func (r *cpRun) describe(t *testing.T, rec *capnv1.ControlPlaneRecord) string {
	t.Helper()
	out := r.e.Capn.CLI("describe", "cluster", r.name)
	ep := rec.GetEndpoint()
	line := fmt.Sprintf("%s (endpoint %s", r.cp.Type, net.JoinHostPort(ep.GetHost(), strconv.Itoa(int(ep.GetPort()))))
	var cpLine string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "Control plane:") {
			cpLine = l
		}
	}
	if !strings.Contains(cpLine, line) || !strings.Contains(cpLine, rec.GetVersion()) {
		t.Errorf("capn describe: Control plane line %q, want %q… with %s\n%s", cpLine, line, rec.GetVersion(), out)
	}
	_, section, ok := strings.Cut(out, "Control plane ("+r.cp.Type+"):")
	if !ok {
		t.Errorf("capn describe has no section \"Control plane (%s):\" with the record's conditions\n%s", r.cp.Type, out)
		return out
	}
	for _, c := range rec.GetConditions() {
		found := false
		for _, l := range strings.Split(section, "\n") {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == c.GetType() && f[1] == c.GetStatus() && f[2] == c.GetReason() {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("capn describe does not list the record's condition %s=%s (%s)\n%s", c.GetType(), c.GetStatus(), c.GetReason(), out)
		}
	}
	return out
}

// endpointReachable: the kubeconfig capn hands out (capn kubeconfig; for
// external, the one the user registered) names the record's endpoint, and
// kubectl with it reaches an API server there that is ready and runs the
// record's version, which is the spec's (or the observed one).
func (r *cpRun) endpointReachable(t *testing.T) {
	rec := r.e.Clusters.ControlPlane(r.name)
	if r.e.Kubeconfig == "" {
		r.k.FetchKubeconfig()
	} else {
		r.k.Kubeconfig = r.e.Kubeconfig
	}
	server, err := r.k.Kubectl("config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
	ep := rec.GetEndpoint()
	want := "https://" + net.JoinHostPort(ep.GetHost(), strconv.Itoa(int(ep.GetPort())))
	if err != nil || strings.TrimSpace(server) != want {
		t.Fatalf("the kubeconfig's server %q (%v), want the record's endpoint %s", server, err, want)
	}
	if rec.GetVersion() != r.wantVersion() {
		t.Errorf("record version %q, want %s", rec.GetVersion(), r.wantVersion())
	}
	r.serverVersion(t, r.wantVersion())
	Poll(t, "kubectl get --raw /readyz", time.Minute, func() error {
		out, err := r.k.Kubectl("get", "--raw", "/readyz")
		if err == nil && strings.TrimSpace(out) != "ok" {
			err = fmt.Errorf("/readyz: %s", out)
		}
		return err
	})
	t.Logf("kubectl through %s: /readyz ok, server %s", want, r.wantVersion())
}

// serverVersion polls kubectl version until the server reports version.
func (r *cpRun) serverVersion(t *testing.T, version string) {
	t.Helper()
	Poll(t, "kubectl version: server "+version, 2*time.Minute, func() error {
		out, err := r.k.Kubectl("version", "-o", "json")
		if err != nil {
			return err
		}
		var v struct {
			ServerVersion struct{ GitVersion string } `json:"serverVersion"`
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			return fmt.Errorf("kubectl version -o json: %v: %s", err, out)
		}
		if v.ServerVersion.GitVersion != version {
			return fmt.Errorf("server %q, want %s", v.ServerVersion.GitVersion, version)
		}
		return nil
	})
}

// scale: with Features.Scale, replicas 1 → ScaleTo → 1, the record (and
// the cluster) following each; without, the change refused or reported.
func (r *cpRun) scale(t *testing.T) {
	if !r.f.Scale {
		r.scaleRefused(t)
		return
	}
	for _, n := range []int32{r.f.ScaleTo, 1} {
		s := time.Now()
		from := r.replicas
		rev := r.apply(r.version, n)
		rec := r.waitRecord(t, fmt.Sprintf("%d replicas ready", n), r.settled(n, rev))
		r.e.Clusters.WaitReady(r.name, r.f.Timeout)
		r.serverVersion(t, r.wantVersion())
		t.Logf("replicas %d → %d: record and cluster Ready in %.1fs (%s)", from, n, time.Since(s).Seconds(), describeRecord(rec))
	}
}

// scaleRefused: a control plane that does not scale says so — capn apply
// refuses replicas ScaleTo naming spec.controlPlane.replicas and changes
// nothing, or accepts it and the record reports it in a condition that is
// not True and names the replicas asked for, while it keeps serving its
// one replica; replicas 1 again then brings the record back to Ready.
func (r *cpRun) scaleRefused(t *testing.T) {
	before := r.e.Clusters.Revision(r.name)
	stdout, stderr, err := r.e.Capn.TryCLI("apply", "-f", r.manifestFile(r.version, r.f.ScaleTo))
	if err != nil {
		if !strings.Contains(stdout+stderr, "spec.controlPlane.replicas") {
			t.Errorf("capn apply of replicas %d refused without naming spec.controlPlane.replicas:\n%s%s", r.f.ScaleTo, stdout, stderr)
		}
		if after := r.e.Clusters.Revision(r.name); after != before {
			t.Errorf("the refused apply changed the desired cluster: revision %d → %d", before, after)
		}
		if rec := r.e.Clusters.ControlPlane(r.name); rec.GetReplicas() != 1 || rec.GetReadyReplicas() != 1 {
			t.Errorf("after the refused apply the record says %s", describeRecord(rec))
		}
		t.Logf("replicas %d refused at the edge: %s", r.f.ScaleTo, lineWith(stdout+stderr, "spec.controlPlane.replicas"))
		return
	}
	s := time.Now()
	var reported *capnv1.Condition
	want := strconv.Itoa(int(r.f.ScaleTo))
	rec := r.waitRecord(t, fmt.Sprintf("a condition that refuses replicas %d", r.f.ScaleTo), func(rec *capnv1.ControlPlaneRecord) error {
		for _, c := range rec.GetConditions() {
			if c.GetStatusValue() != capnv1.ConditionTrue && c.GetReason() != "" && strings.Contains(c.GetMessage(), "replicas") && strings.Contains(c.GetMessage(), want) {
				reported = c
				return nil
			}
		}
		return errors.New("no condition (not True) names the replicas asked for")
	})
	if rec.GetReplicas() != 1 || rec.GetReadyReplicas() != 1 {
		t.Errorf("the refused change moved the record's replicas: %s", describeRecord(rec))
	}
	r.serverVersion(t, r.wantVersion()) // it still serves
	if out := r.describe(t, rec); !strings.Contains(out, reported.GetReason()) {
		t.Errorf("capn describe does not show %s", reported.GetReason())
	}
	t.Logf("replicas %d reported in %.1fs: %s=%s %s: %s", r.f.ScaleTo, time.Since(s).Seconds(), reported.GetType(), reported.GetStatus(), reported.GetReason(), reported.GetMessage())
	s = time.Now()
	rev := r.apply(r.version, 1)
	rec = r.waitRecord(t, "Ready again with replicas 1", r.settled(1, rev))
	r.e.Clusters.WaitReady(r.name, r.f.Timeout)
	t.Logf("replicas 1 again: Ready in %.1fs (%s)", time.Since(s).Seconds(), describeRecord(rec))
}

// upgrade: with Features.Upgrade, the spec's version from the oldest built
// to the newest — the record and the API server follow; without, the
// record reports the version the server runs (ObservedVersion), whatever
// the spec says.
func (r *cpRun) upgrade(t *testing.T) {
	if !r.f.Upgrade {
		if r.e.ObservedVersion == "" {
			t.Fatal("an implementation without Upgrade observes its version: its Setup must set ControlPlaneEnv.ObservedVersion")
		}
		rec := r.e.Clusters.ControlPlane(r.name)
		if rec.GetVersion() != r.e.ObservedVersion {
			t.Errorf("record version %q, want the version the API server runs, %s", rec.GetVersion(), r.e.ObservedVersion)
		}
		r.serverVersion(t, r.e.ObservedVersion)
		t.Logf("the version is observed: spec %s, the API server runs %s, the record says %s", r.version, r.e.ObservedVersion, rec.GetVersion())
		return
	}
	bins := r.e.Bins
	if len(bins) < 2 {
		if os.Getenv("CAPN_REQUIRE_KUBE") == "1" {
			t.Fatalf("CAPN_REQUIRE_KUBE=1 but only Kubernetes %s is built: make kube builds every KUBE_VERSIONS", bins[0].Version)
		}
		t.Skipf("only Kubernetes %s is built: no upgrade (make kube builds every KUBE_VERSIONS)", bins[0].Version)
	}
	from, to := r.version, bins[len(bins)-1].Version
	s := time.Now()
	rev := r.apply(to, r.replicas)
	rec := r.waitRecord(t, "at "+to, r.settled(r.replicas, rev))
	r.e.Clusters.WaitReady(r.name, r.f.Timeout)
	r.serverVersion(t, to)
	t.Logf("upgrade %s → %s: record, cluster and API server in %.1fs (%s)", from, to, time.Since(s).Seconds(), describeRecord(rec))
}

// deleteLeavesNothing: capn delete --wait → no key of the cluster (record
// included) and nothing the implementation held (Leftovers).
func (r *cpRun) deleteLeavesNothing(t *testing.T) {
	last := r.e.Clusters.ControlPlane(r.name)
	s := time.Now()
	r.e.Capn.CLI("delete", "cluster", r.name, "--wait", "--timeout", "4m")
	r.e.Clusters.WaitGone(r.name, r.cp.Providers, 3*time.Minute)
	gone := time.Since(s)
	Poll(t, "nothing of the control plane left", 2*time.Minute, func() error {
		if left := r.cp.Leftovers(t, r.e, r.name, last); len(left) > 0 {
			return fmt.Errorf("left:\n%s", strings.Join(left, "\n"))
		}
		return nil
	})
	t.Logf("deleted: no key %.1fs after capn delete, nothing left %.1fs after", gone.Seconds(), time.Since(s).Seconds())
}

func condition(rec *capnv1.ControlPlaneRecord, typ string) *capnv1.Condition {
	for _, c := range rec.GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

// describeRecord is the record in one line, for logs and failures.
func describeRecord(rec *capnv1.ControlPlaneRecord) string {
	if rec == nil {
		return "none"
	}
	var conds []string
	for _, c := range rec.GetConditions() {
		conds = append(conds, fmt.Sprintf("%s=%s(%s)", c.GetType(), c.GetStatus(), c.GetReason()))
	}
	return fmt.Sprintf("%s initialized=%v endpoint %s:%d %s %d/%d ready, observedGeneration %d, %s", rec.GetImplementation(), rec.GetInitialized(),
		rec.GetEndpoint().GetHost(), rec.GetEndpoint().GetPort(), rec.GetVersion(), rec.GetReadyReplicas(), rec.GetReplicas(), rec.GetObservedGeneration(), strings.Join(conds, " "))
}

// lineWith is the first line of s that contains sub, trimmed.
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
