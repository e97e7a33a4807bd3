package plan_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
)

func TestLabelsAndTaintsPropagateInPlace(t *testing.T) {
	h := started(t, cluster(1, 3))
	before := h.Names("md-0")
	h.Update(func(s *capnv1.ClusterSpec) {
		s.WorkerPools[0].Labels = map[string]string{"tier": "web"}
		s.WorkerPools[0].Taints = []*capnv1.Taint{{Key: "dedicated", Value: "web", Effect: manifest.TaintNoSchedule}}
	})
	r, _ := h.Step()
	ups := of[plan.UpdateMachine](r)
	if len(ups) != 3 || len(r.Actions) != 3 {
		t.Fatalf("actions %v, want 3 updates only", r.Actions)
	}
	for _, u := range ups {
		if u.Machine.Spec.Labels["tier"] != "web" || len(u.Machine.Spec.Taints) != 1 || u.Machine.Metadata.Generation != 2 {
			t.Errorf("update %v", u.Machine)
		}
	}
	converge(t, h, nil)
	if after := h.Names("md-0"); len(after) != 3 || after[0] != before[0] || after[2] != before[2] {
		t.Errorf("machines replaced: %v → %v", before, after)
	}

	// A changed value and a removal are in place too: the health-watcher
	// removes from the Nodes what the machines no longer carry.
	h.Update(func(s *capnv1.ClusterSpec) {
		s.WorkerPools[0].Labels = map[string]string{"tier": "db"}
		s.WorkerPools[0].Taints = nil
	})
	r, _ = h.Step()
	ups = of[plan.UpdateMachine](r)
	if len(ups) != 3 || len(r.Actions) != 3 {
		t.Fatalf("actions %v, want 3 updates only", r.Actions)
	}
	for _, u := range ups {
		if len(u.Machine.Spec.Labels) != 1 || u.Machine.Spec.Labels["tier"] != "db" || len(u.Machine.Spec.Taints) != 0 || u.Machine.Metadata.Generation != 3 {
			t.Errorf("update %v", u.Machine)
		}
	}
	converge(t, h, nil)
	if after := h.Names("md-0"); !slices.Equal(after, before) {
		t.Errorf("machines replaced: %v → %v", before, after)
	}
}

func TestHibernate(t *testing.T) {
	h := started(t, cluster(1, 2))
	h.Update(func(s *capnv1.ClusterSpec) {
		s.Hibernated = true
		s.WorkerPools[0].Replicas = 4 // frozen while hibernated
	})
	r, _ := h.Step()
	if ups := of[plan.UpdateMachine](r); len(ups) != 3 || len(r.Actions) != 3 || !ups[0].Machine.Spec.Stopped {
		t.Fatalf("actions %v, want 3 stop updates only", r.Actions)
	}
	// Hibernated only once every machine is stopped: until then the phase
	// says the machines are stopping.
	if r.Status.GetPhaseValue() != capnv1.ClusterHibernating || r.RequeueAfter != plan.ProgressResync {
		t.Errorf("phase %s, requeue %v while machines stop", r.Status.Phase, r.RequeueAfter)
	}
	if c := condition(r.Status, plan.ConditionHibernated); c.Status != "False" || c.Message != "0 of 3 machines stopped" {
		t.Errorf("Hibernated %v", c)
	}
	if want := "hibernating: stopping 3 machines, keeping their disks"; r.PhaseMessage != want {
		t.Errorf("phase message %q, want %q", r.PhaseMessage, want)
	}
	r, _ = h.Step()
	if len(r.Actions) != 0 || r.RequeueAfter != 0 {
		t.Errorf("hibernated: actions %v, requeue %v", r.Actions, r.RequeueAfter)
	}
	if c := condition(r.Status, plan.ConditionHibernated); c.Status != "True" || r.Status.GetPhaseValue() != capnv1.ClusterHibernated {
		t.Errorf("phase %s, Hibernated %v", r.Status.Phase, c)
	}
	// The Hibernated event says what happened, not the Ready condition's
	// "control plane: 0 of 1 updated, …".
	if want := "hibernated: 3 machines stopped, their disks kept; capn wake demo starts them"; r.PhaseMessage != want {
		t.Errorf("phase message %q, want %q", r.PhaseMessage, want)
	}
	h.Update(func(s *capnv1.ClusterSpec) { s.Hibernated = false })
	r, _ = h.Step()
	if ups := of[plan.UpdateMachine](r); len(ups) != 3 || ups[0].Machine.Spec.Stopped || ups[0].Reason != "wake from hibernation" {
		t.Fatalf("wake: %v", r.Actions)
	}
	// Waking, not ScalingUp: the same machines start again.
	if r.Status.GetPhaseValue() != capnv1.ClusterWaking || r.PhaseMessage != "waking: starting 3 stopped machines" {
		t.Errorf("wake: phase %s (%q), want Waking", r.Status.Phase, r.PhaseMessage)
	}
	converge(t, h, nil)
	if n := len(h.Names("md-0")); n != 4 {
		t.Errorf("pool has %d machines after waking, want 4", n)
	}
}

// TestNodeTimeoutsPropagateInPlace: nodeDrainTimeout and
// nodeDeletionTimeout are copied to every machine in place — not part of
// the template hash, so changing them rolls nothing — and reach a machine
// that is already being deleted (a drain stuck on a PodDisruptionBudget
// is ended by setting nodeDrainTimeout, as in Cluster API).
func TestNodeTimeoutsPropagateInPlace(t *testing.T) {
	h := started(t, cluster(1, 3))
	before := h.Names("md-0")
	hash := h.DesiredHash("md-0")
	h.Update(func(s *capnv1.ClusterSpec) {
		s.WorkerPools[0].NodeDrainTimeout = durationpb.New(5 * time.Minute)
		s.ControlPlane.NodeDeletionTimeout = durationpb.New(time.Minute)
	})
	if h.DesiredHash("md-0") != hash {
		t.Fatal("nodeDrainTimeout changed the pool's template hash: it would roll the machines")
	}
	r, _ := h.Step()
	ups := of[plan.UpdateMachine](r)
	if len(ups) != 4 || len(r.Actions) != 4 {
		t.Fatalf("actions %v, want 4 updates only", r.Actions)
	}
	for _, u := range ups {
		s := u.Machine.Spec
		if s.Pool == "md-0" && (s.NodeDrainTimeout.AsDuration() != 5*time.Minute || s.NodeDeletionTimeout != nil) ||
			s.Pool != "md-0" && (s.NodeDeletionTimeout.AsDuration() != time.Minute || s.NodeDrainTimeout != nil) {
			t.Errorf("update of %s: drain %v, deletion %v", u.Machine.Metadata.Name, s.NodeDrainTimeout, s.NodeDeletionTimeout)
		}
		if u.Reason != "propagate node drain and deletion timeouts" {
			t.Errorf("reason %q", u.Reason)
		}
	}
	converge(t, h, nil)
	if after := h.Names("md-0"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("machines replaced: %v → %v", before, after)
	}
	// A scale-down's machine, deleting, still gets a changed timeout; a
	// new machine is created with the pool's.
	h.DeleteSteps = func(string) int { return 100 }
	h.Update(func(s *capnv1.ClusterSpec) { s.WorkerPools[0].Replicas = 2 })
	if _, err := h.Step(); err != nil {
		t.Fatal(err)
	}
	h.Update(func(s *capnv1.ClusterSpec) { s.WorkerPools[0].NodeDrainTimeout = durationpb.New(time.Second) })
	r, _ = h.Step()
	deleting := 0
	for _, u := range of[plan.UpdateMachine](r) {
		if u.Machine.GetMetadata().GetDeletionTimestamp() != nil {
			deleting++
		}
	}
	if deleting != 1 {
		t.Errorf("updates %v: want the deleting machine's timeout updated too", r.Actions)
	}
	for _, name := range h.Names("md-0") {
		if d := h.Machines[name].GetSpec().GetNodeDrainTimeout().AsDuration(); d != time.Second {
			t.Errorf("%s: drain timeout %v, want 1s", name, d)
		}
	}
}
