package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

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
// external, the one the user registered, capn kubeconfig saying it has
// none) names the record's endpoint, and
// kubectl with it reaches an API server there that is ready and runs the
// record's version, which is the spec's (or the observed one).
func (r *cpRun) endpointReachable(t *testing.T) {
	rec := r.e.Clusters.ControlPlane(r.name)
	if r.e.Kubeconfig == "" {
		r.k.FetchKubeconfig()
	} else {
		// capn makes none: capn kubeconfig must say so, not "not yet".
		stdout, stderr, err := r.e.Capn.TryCLI("kubeconfig", r.name)
		if msg := strings.ToLower(stdout + stderr); err == nil || strings.Contains(msg, "not yet available") || !strings.Contains(msg, "kubeconfig") {
			t.Errorf("capn kubeconfig of a cluster capn hands out no kubeconfig for: %v, want a refusal that says so:\n%s%s", err, stdout, stderr)
		}
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
