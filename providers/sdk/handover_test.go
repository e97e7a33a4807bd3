package sdk_test

import (
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// A restore or a move hands a provider machines by record: those it has
// (by provider id) are recorded from what it says, never created; those
// it has not, or has under another id, are recorded Deleted with why.
func TestAdoptMachine(t *testing.T) {
	env := sdktest.New(t)
	f := newFake()
	env.Run(sdk.NewService(f, fastOptions()))
	f.outOfBand(func(ms map[string]*capnv1.InfraMachine) {
		ms["c1/m1"] = &capnv1.InfraMachine{Cluster: "c1", Machine: "m1", State: sdk.StateRunning.Wire(), ProviderId: "fake://c1/m1"}
		ms["c1/m3"] = &capnv1.InfraMachine{Cluster: "c1", Machine: "m3", State: sdk.StateRunning.Wire(), ProviderId: "fake://other/m3"}
	})
	adopt := func(id, m, pid string) {
		env.Send("fake", sdk.KindMachine, "adopt", id, &capnv1.AdoptMachine{Cluster: "c1", Machine: m,
			Record: &capnv1.InfraMachine{Provider: "elsewhere", Cluster: "c1", Machine: m, ProviderId: pid, State: sdk.StateRunning.Wire()}})
	}
	adopt("adopt-1", "m1", "fake://c1/m1")
	adopt("adopt-1b", "m1", "fake://c1/m1") // again: a no-op
	adopt("adopt-2", "m2", "fake://c1/m2")
	adopt("adopt-3", "m3", "fake://c1/m3")
	env.WaitDrained()

	m1 := env.WaitState("fake", "c1", "m1", sdk.StateRunning)
	if m1.GetProvider() != "fake" || m1.GetProviderId() != "fake://c1/m1" || m1.GetUpdated() == nil {
		t.Errorf("m1 adopted as %v", m1)
	}
	if m2 := env.WaitState("fake", "c1", "m2", sdk.StateDeleted); m2.GetMessage() != sdk.MessageAdoptNotFound || m2.GetProviderId() != "fake://c1/m2" {
		t.Errorf("m2, which the provider does not have: %v", m2)
	}
	if m3 := env.WaitState("fake", "c1", "m3", sdk.StateDeleted); m3.GetMessage() != sdk.MessageAdoptOther+" (fake://other/m3)" {
		t.Errorf("m3, another machine of that name: %v", m3)
	}
	for _, m := range []string{"m1", "m2", "m3"} {
		if n := f.createCalls("c1", m); n != 0 {
			t.Errorf("%s: CreateMachine called %d times by an adopt", m, n)
		}
	}
	// No drift once adopted: the record is what the provider has (before
	// the adopt, the machine may have been reported as an orphan).
	passes := env.Counter(sdk.MetricDriftPasses)
	natstest.WaitFor(t, 10*time.Second, "two drift passes", func() bool { return env.Counter(sdk.MetricDriftPasses) >= passes+2 })
	if d, ok := env.LastDrift("c1", "m1"); ok && d.GetKind() != sdk.DriftOrphan {
		t.Errorf("drift %s reported for an adopted machine: %s", d.GetKind(), d.GetMessage())
	}
	if m, _ := env.Machine("fake", "c1", "m1"); m.GetStateValue() != sdk.StateRunning {
		t.Errorf("m1 after the drift passes: %v", m)
	}

	// An adopt that names no provider id is refused, nothing written.
	env.Send("fake", sdk.KindMachine, "adopt", "adopt-4", &capnv1.AdoptMachine{Cluster: "c1", Machine: "m4", Record: &capnv1.InfraMachine{}})
	env.WaitDrained()
	if m, ok := env.Machine("fake", "c1", "m4"); ok {
		t.Errorf("an adopt without a provider id wrote %v", m)
	}
}

// Orphaning lets go of a machine and a cluster's infrastructure without
// touching them: the records go, the provider still has both, and the
// drift check reports the machine as an orphan without deleting it.
func TestOrphanLeavesTheInfrastructure(t *testing.T) {
	env := sdktest.New(t)
	f := newFake()
	env.Run(sdk.NewService(f, fastOptions()))
	env.Send("fake", sdk.KindCluster, "ensure", "ensure-1", &capnv1.EnsureClusterInfra{Cluster: "c1"})
	env.Send("fake", sdk.KindMachine, "create", "create-1", create("c1", "m1"))
	env.WaitState("fake", "c1", "m1", sdk.StateRunning)
	natstest.WaitFor(t, 10*time.Second, "the cluster record", func() bool { _, ok := env.Cluster("fake", "c1"); return ok })

	env.Send("fake", sdk.KindMachine, "orphan", "orphan-1", &capnv1.DeleteMachine{Cluster: "c1", Machine: "m1"})
	env.Send("fake", sdk.KindCluster, "orphan", "orphan-c1", &capnv1.DeleteClusterInfra{Cluster: "c1"})
	env.WaitNoMachine("fake", "c1", "m1")
	natstest.WaitFor(t, 10*time.Second, "the cluster record removed", func() bool { _, ok := env.Cluster("fake", "c1"); return !ok })
	if d := env.WaitDrift("c1", "m1", sdk.DriftOrphan); d.GetMessage() == "" {
		t.Errorf("orphan drift report without a message: %v", d)
	}
	if _, err := f.Describe(t.Context(), "c1", "m1"); err != nil {
		t.Errorf("the orphaned machine is gone from the provider: %v", err)
	}
	f.mu.Lock()
	_, clusterKept := f.clusters["c1"]
	f.mu.Unlock()
	if !clusterKept {
		t.Error("the orphaned cluster's infrastructure is gone from the provider")
	}
	if m, ok := env.Machine("fake", "c1", "m1"); ok {
		t.Errorf("the drift check wrote the orphan back: %v", m)
	}

	// And adopting it again takes it back.
	env.Send("fake", sdk.KindCluster, "adopt", "adopt-c1", &capnv1.AdoptClusterInfra{Cluster: "c1",
		Record: &capnv1.InfraCluster{Ready: true, ControlPlaneEndpoint: &capnv1.Endpoint{Host: "127.0.0.1", Port: 6443}}})
	env.Send("fake", sdk.KindMachine, "adopt", "adopt-m1", &capnv1.AdoptMachine{Cluster: "c1", Machine: "m1",
		Record: &capnv1.InfraMachine{ProviderId: "fake://c1/m1", State: sdk.StateRunning.Wire()}})
	env.WaitState("fake", "c1", "m1", sdk.StateRunning)
	natstest.WaitFor(t, 10*time.Second, "the cluster adopted", func() bool {
		c, ok := env.Cluster("fake", "c1")
		return ok && c.GetProvider() == "fake" && c.GetControlPlaneEndpoint().GetPort() == 6443
	})
}
