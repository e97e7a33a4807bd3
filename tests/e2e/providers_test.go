package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper"
	"github.com/capn-dev/capn/services/cluster-planner"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/health-watcher"
	"github.com/capn-dev/capn/services/machine-manager"
	"github.com/capn-dev/capn/tests/internal/harness"
)

const small = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %NAME%
spec:
  kubernetesVersion: v1.33.4
  hibernated: %HIBERNATED%
  controlPlane:
    provider: %CP%
    replicas: 1
  workerPools:
  - name: md-0
    provider: sim
    replicas: 2
`

func smallCluster(name, cp string, hibernated bool) string {
	h := "false"
	if hibernated {
		h = "true"
	}
	return strings.NewReplacer("%NAME%", name, "%CP%", cp, "%HIBERNATED%", h).Replace(small)
}

// waitCondition waits until the cluster's status has the condition with
// that status and reason, and returns it.
func (w *world) waitCondition(name, typ, status, reason string, timeout time.Duration) *capnv1.Condition {
	w.t.Helper()
	var got *capnv1.Condition
	natstest.WaitFor(w.t, timeout, name+" "+typ+"="+status+" "+reason, func() bool {
		for _, c := range w.ClusterStatus(name).GetConditions() {
			if c.GetType() == typ && c.GetStatus() == status && c.GetReason() == reason {
				got = c
				return true
			}
		}
		return false
	})
	return got
}

// announce writes provider.<name> as a provider would, with compare-and-set.
func (w *world) announce(name string, at time.Time, caps ...string) {
	w.t.Helper()
	b := store.NewBucket(w.Observed, func() *capnv1.ProviderAnnouncement { return new(capnv1.ProviderAnnouncement) })
	a := &capnv1.ProviderAnnouncement{Name: name, Version: "test", Capabilities: caps, Time: timestamppb.New(at), Instance: "e2e"}
	if _, _, err := b.Mutate(context.Background(), sdk.AnnouncementKey(name), func(*capnv1.ProviderAnnouncement, bool) (*capnv1.ProviderAnnouncement, error) {
		return a, nil
	}); err != nil {
		w.t.Fatal(err)
	}
}

// A cluster applied before its provider runs stays Pending, with
// ProvidersReady=False naming the provider and no machine; starting the
// provider lets it go Ready by itself.
func TestClusterWaitsForItsProvider(t *testing.T) {
	w := newWorld(t)
	for _, s := range []string{clusterplanner.Name, machinemanager.Name, bootstrapper.Name, healthwatcher.Name} {
		w.Start(s)
	}
	w.Apply(smallCluster("early", "sim", false))
	c := w.waitCondition("early", plan.ConditionProvidersReady, "False", plan.ReasonProviderNotRunning, 20*time.Second)
	if !strings.Contains(c.GetMessage(), "provider sim (pools control-plane, md-0) is not running") ||
		!strings.Contains(c.GetMessage(), "start the sim provider service") {
		t.Errorf("message %q", c.GetMessage())
	}
	if p := w.ClusterStatus("early").GetPhase(); p != capnv1.ClusterPending.Wire() {
		t.Errorf("phase %s, want Pending", p)
	}
	// The planner has planned (the status is written before any action of
	// the same plan). A spec change it has no action for (the health
	// policy) makes it plan again: once that plan's status is written, the
	// first plan's actions have landed (one key is never planned twice at
	// once). Then check there is no machine.
	seen := w.ClusterStatus("early").GetObservedGeneration()
	w.MutateCluster("early", func(c *capnv1.Cluster) {
		if c.Spec.Health == nil {
			c.Spec.Health = &capnv1.HealthPolicy{}
		}
		c.Spec.Health.MaxInFlight++
	})
	natstest.WaitFor(t, 10*time.Second, "the planner planned the changed spec", func() bool {
		return w.ClusterStatus("early").GetObservedGeneration() > seen
	})
	if ks := harness.Keys(t, w.Desired, "machine.early."); len(ks) != 0 {
		t.Fatalf("machines created for a cluster whose provider does not run: %v", ks)
	}

	w.Start("provider-sim")
	w.WaitReady("early", 60*time.Second)
	c = w.waitCondition("early", plan.ConditionProvidersReady, "True", plan.ReasonProvidersRunning, 5*time.Second)
	if !strings.Contains(c.GetMessage(), "sim (control-plane, md-0)") {
		t.Errorf("message %q", c.GetMessage())
	}

	// A provider that stops cleanly withdraws its announcement: the Ready
	// cluster says so and keeps its machines.
	before := harness.Keys(t, w.Desired, "machine.early.")
	w.Stop("provider-sim")
	w.waitCondition("early", plan.ConditionProvidersReady, "False", plan.ReasonProviderNotRunning, 20*time.Second)
	if p := w.ClusterStatus("early").GetPhase(); p != capnv1.ClusterReady.Wire() {
		t.Errorf("phase %s after the provider stopped, want Ready (its machines still run)", p)
	}
	if after := harness.Keys(t, w.Desired, "machine.early."); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("machines %v, want %v kept", after, before)
	}
}

// Announcements written by hand: a stale one counts as not running until it
// is refreshed, one that goes stale without a write is noticed, and a
// provider without stop-start refuses a hibernated cluster.
func TestPlannerReadsAnnouncements(t *testing.T) {
	w := newWorld(t)
	for _, s := range []string{clusterplanner.Name, machinemanager.Name, bootstrapper.Name, healthwatcher.Name, "provider-sim"} {
		w.Start(s)
	}
	// "crashed" last announced a minute ago.
	w.announce("crashed", time.Now().Add(-time.Minute), sdk.CapabilityStopStart)
	w.Apply(smallCluster("stale", "crashed", false))
	c := w.waitCondition("stale", plan.ConditionProvidersReady, "False", plan.ReasonProviderNotRunning, 20*time.Second)
	if !strings.Contains(c.GetMessage(), "provider crashed (pool control-plane)") || !strings.Contains(c.GetMessage(), "is more than 30s old") {
		t.Errorf("message %q", c.GetMessage())
	}
	if ks := harness.Keys(t, w.Desired, "machine.stale."); len(ks) != 0 {
		t.Fatalf("machines %v", ks)
	}
	// It comes back, about to go stale again: the refresh wakes the
	// planner, which creates the first control-plane machine; then the
	// announcement goes stale with no write, and the planner notices.
	w.announce("crashed", time.Now().Add(-plan.ProviderStale+2*time.Second), sdk.CapabilityStopStart)
	natstest.WaitFor(t, 10*time.Second, "a control-plane machine for stale", func() bool {
		return len(harness.Keys(t, w.Desired, "machine.stale.")) == 1
	})
	w.waitCondition("stale", plan.ConditionProvidersReady, "False", plan.ReasonProviderNotRunning, 10*time.Second)
	if ks := harness.Keys(t, w.Desired, "machine.stale."); len(ks) != 1 {
		t.Errorf("machines %v, want the first control-plane machine kept and nothing more", ks)
	}
	if p := w.ClusterStatus("stale").GetPhase(); p != capnv1.ClusterProvisioning.Wire() {
		t.Errorf("phase %s, want Provisioning (not Failed, not Pending: a machine exists)", p)
	}

	// "bare" runs but cannot stop: a hibernated cluster on it is refused.
	w.announce("bare", time.Now().Add(time.Hour), sdk.CapabilityReboot) // far ahead: stays fresh for the test
	w.Apply(smallCluster("sleepy", "bare", true))
	c = w.waitCondition("sleepy", plan.ConditionProvidersReady, "False", plan.ReasonProviderLacksCapability, 20*time.Second)
	if !strings.Contains(c.GetMessage(), "provider bare (pool control-plane) does not announce stop-start") {
		t.Errorf("message %q", c.GetMessage())
	}
	if p := w.ClusterStatus("sleepy").GetPhase(); p != capnv1.ClusterPending.Wire() {
		t.Errorf("phase %s, want Pending", p)
	}
	// It gains the capability (a new version): the cluster is planned again.
	w.announce("bare", time.Now().Add(time.Hour), sdk.CapabilityReboot, sdk.CapabilityStopStart)
	w.waitCondition("sleepy", plan.ConditionProvidersReady, "True", plan.ReasonProvidersRunning, 10*time.Second)
}
