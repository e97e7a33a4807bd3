package plan_test

import (
	"fmt"
	"testing"

	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

func TestDeleteOrder(t *testing.T) {
	h := started(t, cluster(3, 2, 2))
	h.DeleteSteps = func(string) int { return 3 }
	h.Delete()
	var steps []string
	converge(t, h, func(rec plantest.Record) error {
		workers := 0
		for pool, c := range rec.Before {
			if pool != cpPool {
				workers += c.Total
			}
		}
		for _, a := range rec.Result.Actions {
			step := fmt.Sprintf("%T", a)
			if d, ok := a.(plan.DeleteMachine); ok {
				step = "delete " + poolOf(h, d.Name)
				if poolOf(h, d.Name) != cpPool {
					step = "delete worker"
				}
				if poolOf(h, d.Name) == cpPool && workers > 0 {
					return fmt.Errorf("control-plane machine %s deleted while %d workers exist", d.Name, workers)
				}
			}
			if len(steps) == 0 || steps[len(steps)-1] != step {
				steps = append(steps, step)
			}
		}
		if rec.Result.Status.GetPhaseValue() != capnv1.ClusterDeleting {
			return fmt.Errorf("phase %s while deleting", rec.Result.Status.Phase)
		}
		return nil
	})
	want := "[plan.UpdateMachine delete worker plan.RemoveMachine delete control-plane plan.RemoveMachine plan.DeleteClusterInfra plan.DeletePKI plan.DeleteCluster]"
	if fmt.Sprint(steps) != want {
		t.Errorf("steps %v\nwant  %s", steps, want)
	}
}

func TestDeleteWaitsForEachStep(t *testing.T) {
	h := started(t, cluster(1, 1))
	h.Delete()
	h.DeleteSteps = func(string) int { return 100 } // machines never finish deleting
	for range 5 {
		r, err := h.Step()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(of[plan.DeleteClusterInfra](r)) + len(of[plan.DeleteCluster](r)); n > 0 {
			t.Fatalf("tore down the cluster while machines exist: %v", r.Actions)
		}
		c := condition(r.Status, plan.ConditionDeleting)
		if c == nil || c.Reason != "DeletingWorkers" || c.Message != "deleting 1 worker machine" {
			t.Errorf("Deleting condition %v", c)
		}
	}
	if cp := h.Counts()[cpPool]; cp.Active != 1 {
		t.Errorf("control plane touched while a worker is still deleting: %+v", cp)
	}
}

func TestDeleteWithoutMachines(t *testing.T) {
	h := plantest.New(cluster(1))
	h.Infra.Exists = true
	h.Delete()
	r := h.Plan()
	if len(r.Actions) != 1 || len(of[plan.DeleteClusterInfra](r)) != 1 {
		t.Fatalf("actions %v", r.Actions)
	}
	h.Infra.Exists = false
	if r := h.Plan(); len(of[plan.DeletePKI](r)) != 1 {
		t.Fatalf("actions %v", r.Actions)
	}
	h.PKI = false
	if r := h.Plan(); len(of[plan.DeleteCluster](r)) != 1 {
		t.Fatalf("actions %v", r.Actions)
	}
}

func TestPausedStopsEverything(t *testing.T) {
	h := started(t, cluster(1, 2))
	h.Cluster.Spec.Paused = true
	h.Delete()
	h.Cluster.Spec.WorkerPools[0].Replicas = 5
	r := h.Plan()
	if len(r.Actions) != 0 {
		t.Fatalf("paused cluster planned %v", r.Actions)
	}
	if r.Status.GetPhaseValue() != capnv1.ClusterPaused {
		t.Errorf("phase %s", r.Status.Phase)
	}
	if c := condition(r.Status, plan.ConditionPaused); c.Status != "True" || c.Reason != "Paused" {
		t.Errorf("Paused condition %v", c)
	}
	if r.RequeueAfter != 0 {
		t.Errorf("a paused cluster needs no requeue, got %v", r.RequeueAfter)
	}
	// The deletion waits, and the status says so rather than "deleting 2
	// worker machines" as if it were under way.
	want := "the cluster is paused: its deletion waits until it is unpaused (next: deleting 2 worker machines)"
	if c := condition(r.Status, plan.ConditionDeleting); c.Reason != "DeletionPaused" || c.Message != want {
		t.Errorf("Deleting condition %v, want DeletionPaused: %s", c, want)
	}
	if r.PhaseMessage != want {
		t.Errorf("phase message %q, want %q", r.PhaseMessage, want)
	}
}

// TestDeleteExcludesDrain: a cluster being deleted has nothing to
// reschedule pods onto, so every machine, a worker already being deleted
// by a scale-down included, is marked capn.dev/exclude-node-draining
// (in place, before any deletion of this plan) and is not drained.
func TestDeleteExcludesDrain(t *testing.T) {
	h := started(t, cluster(1, 2))
	h.DeleteSteps = func(string) int { return 3 }
	h.Update(func(s *capnv1.ClusterSpec) { s.WorkerPools[0].Replicas = 1 })
	if _, err := h.Step(); err != nil { // scale-down: one worker deleting
		t.Fatal(err)
	}
	h.Delete()
	r, err := h.Step()
	if err != nil {
		t.Fatal(err)
	}
	marked := map[string]bool{}
	firstDelete := len(r.Actions)
	for i, a := range r.Actions {
		switch a := a.(type) {
		case plan.UpdateMachine:
			if i > firstDelete {
				t.Errorf("update %s after a delete: the mark must come first", a.Machine.Metadata.Name)
			}
			if _, ok := a.Machine.GetMetadata().GetAnnotations()[annotations.ExcludeNodeDraining]; ok {
				marked[a.Machine.Metadata.Name] = true
			}
		case plan.DeleteMachine:
			firstDelete = min(firstDelete, i)
		}
	}
	for name, m := range h.Machines {
		if !marked[name] {
			t.Errorf("machine %s (deleting: %v) not marked %s", name, m.GetMetadata().GetDeletionTimestamp() != nil, annotations.ExcludeNodeDraining)
		}
		if _, ok := m.GetMetadata().GetAnnotations()[annotations.ExcludeNodeDraining]; !ok {
			t.Errorf("machine %s record lacks the mark", name)
		}
	}
	if len(marked) != 3 {
		t.Errorf("marked %v, want the 3 machines", marked)
	}
	// Marked once: the next plan does not mark again.
	r, _ = h.Step()
	if ups := of[plan.UpdateMachine](r); len(ups) != 0 {
		t.Errorf("marked again: %v", ups)
	}
}

// A deletion with the Orphan policy (capn move) lets go of every machine
// at once, with the policy on each, drains nothing, asks the provider to
// orphan the cluster's infrastructure instead of deleting it, and goes on
// while the cluster is paused.
func TestOrphanDeletion(t *testing.T) {
	h := started(t, cluster(3, 2, 2))
	h.Cluster.Spec.Paused = true
	h.Delete()
	h.Cluster.Metadata.DeletionPolicy = capnv1.DeletionOrphan
	var steps []string
	first := true
	converge(t, h, func(rec plantest.Record) error {
		r := rec.Result
		if first {
			first = false
			if d := of[plan.DeleteMachine](r); len(d) != 7 {
				return fmt.Errorf("first plan let go of %d machines, want all 7 at once: %v", len(d), r.Actions)
			}
			if c := condition(r.Status, plan.ConditionDeleting); c == nil || c.Reason != plan.ReasonOrphaningMachines {
				return fmt.Errorf("Deleting condition %v", c)
			}
		}
		for _, a := range r.Actions {
			step := fmt.Sprintf("%T", a)
			switch a := a.(type) {
			case plan.DeleteMachine:
				if !a.Orphan {
					return fmt.Errorf("machine %s deleted without the Orphan policy", a.Name)
				}
			case plan.UpdateMachine:
				return fmt.Errorf("an orphaning deletion rewrote machine %s (%s)", a.Machine.GetMetadata().GetName(), a.Reason)
			case plan.DeleteClusterInfra:
				if !a.Orphan {
					return fmt.Errorf("the cluster infrastructure deleted, not orphaned")
				}
			}
			if len(steps) == 0 || steps[len(steps)-1] != step {
				steps = append(steps, step)
			}
		}
		if r.Status.GetPhaseValue() != capnv1.ClusterDeleting {
			return fmt.Errorf("phase %s while orphaning", r.Status.Phase)
		}
		return nil
	})
	want := "[plan.DeleteMachine plan.RemoveMachine plan.DeleteClusterInfra plan.DeletePKI plan.DeleteCluster]"
	if fmt.Sprint(steps) != want {
		t.Errorf("steps %v\nwant  %s", steps, want)
	}
	if !h.ClusterDeleted {
		t.Error("the cluster record was not removed")
	}
}

// Paused, a plain deletion waits; only the Orphan policy goes on.
func TestPausedDeletionWaits(t *testing.T) {
	h := started(t, cluster(1, 1))
	h.Cluster.Spec.Paused = true
	h.Delete()
	r := h.Plan()
	if len(r.Actions) != 0 || r.Status.GetPhaseValue() != capnv1.ClusterPaused {
		t.Fatalf("a paused deletion planned %v (phase %s)", r.Actions, r.Status.GetPhase())
	}
	if c := condition(r.Status, plan.ConditionDeleting); c == nil || c.Reason != plan.ReasonDeletionPaused {
		t.Errorf("Deleting condition %v", c)
	}
}
