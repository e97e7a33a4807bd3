package plan_test

import (
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

func TestRollingUpdateBounds(t *testing.T) {
	tests := []struct {
		name          string
		replicas      int32
		surge, unav   string
		maxTotal      int
		minAvailable  int
		maxNewAtOnce  int // creates in one plan
		changeVersion bool
	}{
		{"default surge 1 unavailable 0", 3, "1", "0", 4, 3, 1, true},
		{"surge 0 unavailable 1", 3, "0", "1", 3, 2, 1, false},
		{"surge 2 unavailable 1", 5, "2", "1", 7, 4, 2, true},
		{"percentages round surge up and unavailable down", 3, "50%", "50%", 5, 2, 2, false},
		{"surge 0 unavailable 10% of 3 is 0: treated as 1", 3, "0", "10%", 3, 2, 1, false},
		{"all at once", 4, "100%", "100%", 8, 0, 4, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cluster(1, tt.replicas)
			c.Spec.WorkerPools[0].Strategy = &capnv1.RolloutStrategy{Type: manifest.StrategyRollingUpdate, MaxSurge: tt.surge, MaxUnavailable: tt.unav}
			h := started(t, c)
			h.Update(func(s *capnv1.ClusterSpec) {
				if tt.changeVersion {
					s.KubernetesVersion = "v1.33.5"
					s.WorkerPools[0].Version = "v1.33.5"
				} else {
					s.WorkerPools[0].Template = &capnv1.MachineTemplate{Parameters: map[string]string{"size": "xl"}}
				}
			})
			sawSurge := false
			converge(t, h, func(rec plantest.Record) error {
				p := rec.After["md-0"]
				if p.Total > tt.maxTotal {
					return fmt.Errorf("%d machines, at most %d", p.Total, tt.maxTotal)
				}
				if p.Available < tt.minAvailable {
					return fmt.Errorf("%d available, at least %d", p.Available, tt.minAvailable)
				}
				n := 0
				for _, c := range of[plan.CreateMachine](rec.Result) {
					if c.Machine.Spec.Pool == "md-0" {
						n++
					}
				}
				if n > tt.maxNewAtOnce {
					return fmt.Errorf("%d creates in one plan, at most %d", n, tt.maxNewAtOnce)
				}
				sawSurge = sawSurge || p.Total == tt.maxTotal
				return nil
			})
			if !sawSurge {
				t.Errorf("the rollout never used its full surge of %d machines", tt.maxTotal)
			}
			for _, name := range h.Names("md-0") {
				if h.Machines[name].Spec.TemplateHash != h.DesiredHash("md-0") {
					t.Errorf("%s is outdated after the rollout", name)
				}
			}
		})
	}
}

func TestPoolsWaitForControlPlaneRollout(t *testing.T) {
	h := started(t, cluster(3, 2))
	h.Update(func(s *capnv1.ClusterSpec) {
		s.KubernetesVersion = "v1.34.0"
		s.WorkerPools[0].Version = "v1.34.0"
	})
	cpDoneAt, firstWorkerChange := -1, -1
	converge(t, h, func(rec plantest.Record) error {
		if cpDoneAt < 0 && rec.Before[cpPool].OutdatedAll == 0 {
			cpDoneAt = rec.Step
		}
		for _, a := range rec.Result.Actions {
			switch a := a.(type) {
			case plan.CreateMachine:
				if a.Machine.Spec.Pool != cpPool && firstWorkerChange < 0 {
					firstWorkerChange = rec.Step
				}
			case plan.DeleteMachine:
				if poolOf(h, a.Name) != cpPool && firstWorkerChange < 0 {
					firstWorkerChange = rec.Step
				}
			}
		}
		return nil
	})
	if firstWorkerChange < cpDoneAt || cpDoneAt < 0 {
		t.Errorf("workers changed at step %d, the control plane finished at step %d", firstWorkerChange, cpDoneAt)
	}
}

func TestOnDeleteReplacesOnlyDeletedMachines(t *testing.T) {
	c := cluster(1, 3)
	c.Spec.WorkerPools[0].Strategy = &capnv1.RolloutStrategy{Type: manifest.StrategyOnDelete}
	h := started(t, c)
	h.Update(func(s *capnv1.ClusterSpec) {
		s.WorkerPools[0].Template = &capnv1.MachineTemplate{Parameters: map[string]string{"size": "xl"}}
	})
	for range 10 {
		r, err := h.Step()
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Actions) != 0 {
			t.Fatalf("OnDelete acted on its own: %v", r.Actions)
		}
		if r.Status.GetPhaseValue() != capnv1.ClusterUpgrading {
			t.Errorf("phase %s, want Upgrading while outdated machines remain", r.Status.Phase)
		}
	}
	// The user deletes one machine: it is replaced by one of the new template.
	victim := h.Names("md-0")[1]
	h.Machines[victim].Metadata.DeletionTimestamp = timestamppb.New(h.Now)
	r, _ := h.Step()
	creates := of[plan.CreateMachine](r)
	if len(creates) != 1 || creates[0].Machine.Spec.TemplateHash != h.DesiredHash("md-0") {
		t.Fatalf("after a user deletion: %v", r.Actions)
	}
	for range 10 {
		if _, err := h.Step(); err != nil {
			t.Fatal(err)
		}
	}
	c2 := h.Counts()["md-0"]
	if c2.Total != 3 || c2.Outdated != 2 || c2.Available != 3 {
		t.Errorf("pool %+v, want 3 machines of which 2 outdated", c2)
	}
}

func TestFailedWorkerIsReplaced(t *testing.T) {
	c := cluster(1, 3)
	c.Spec.WorkerPools[0].Strategy.MaxSurge, c.Spec.WorkerPools[0].Strategy.MaxUnavailable = "0", "1"
	h := started(t, c)
	name := h.Names("md-0")[0]
	h.SetPhase(name, capnv1.MachineFailed)
	r, _ := h.Step()
	ds := of[plan.DeleteMachine](r)
	if len(ds) != 1 || ds[0].Name != name {
		t.Fatalf("failed machine not deleted: %v", r.Actions)
	}
	if len(of[plan.CreateMachine](r)) != 0 {
		t.Fatal("maxSurge 0: the replacement must wait until the failed machine is gone")
	}
	converge(t, h, nil)
	if c := h.Counts()["md-0"]; c.Total != 3 || c.Available != 3 {
		t.Errorf("pool %+v", c)
	}
}

func TestRemovedPoolIsDeleted(t *testing.T) {
	h := started(t, cluster(1, 2, 1))
	gone := h.Names("md-1")
	h.Update(func(s *capnv1.ClusterSpec) { s.WorkerPools = s.WorkerPools[:1] })
	r, _ := h.Step()
	ds := of[plan.DeleteMachine](r)
	if len(ds) != len(gone) || ds[0].Name != gone[0] {
		t.Fatalf("deletes %v, want %v", ds, gone)
	}
	converge(t, h, nil)
	if len(h.Names("md-1")) != 0 || len(h.Names("md-0")) != 2 {
		t.Errorf("machines: md-0 %v, md-1 %v", h.Names("md-0"), h.Names("md-1"))
	}
}

// TestScaleThreeFiveOne is the scenario: a pool of 3 scaled to 5,
// then to 1, with machines marked for deletion going first.
func TestScaleThreeFiveOne(t *testing.T) {
	h := started(t, cluster(3, 3))
	h.Update(func(s *capnv1.ClusterSpec) { s.WorkerPools[0].Replicas = 5 })
	r, _ := h.Step()
	if n := len(of[plan.CreateMachine](r)); n != 2 {
		t.Fatalf("scale up 3 → 5 created %d machines at once, want 2", n)
	}
	if r.Status.GetPhaseValue() != capnv1.ClusterScalingUp {
		t.Errorf("phase %s, want ScalingUp", r.Status.Phase)
	}
	if p := r.Status.WorkerPools[0]; p.Desired != 5 || p.Replicas != 3 || p.Available != 3 {
		t.Errorf("pool status %v: it describes what was observed before the plan", p)
	}
	converge(t, h, nil)

	marked := h.Names("md-0")[4]
	h.Annotate(marked, plan.AnnotationDeleteMachine, "")
	h.Update(func(s *capnv1.ClusterSpec) { s.WorkerPools[0].Replicas = 1 })
	r, _ = h.Step()
	ds := of[plan.DeleteMachine](r)
	if len(ds) != 4 {
		t.Fatalf("scale down 5 → 1 deleted %d machines at once, want 4", len(ds))
	}
	if !slices.ContainsFunc(ds, func(d plan.DeleteMachine) bool { return d.Name == marked }) {
		t.Errorf("the machine marked for deletion was kept")
	}
	if r.Status.GetPhaseValue() != capnv1.ClusterScalingDown {
		t.Errorf("phase %s, want ScalingDown", r.Status.Phase)
	}
	converge(t, h, nil)
	if n := len(h.Names("md-0")); n != 1 {
		t.Errorf("%d machines left", n)
	}
}
