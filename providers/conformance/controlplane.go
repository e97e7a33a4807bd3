package conformance

import (
	"errors"
	"fmt"
	"path/filepath"
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
