package plan_test

import (
	"fmt"
	"testing"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

const cpPool = manifest.ControlPlanePool

func TestFirstControlPlaneMachineAlone(t *testing.T) {
	h := plantest.New(cluster(3, 2))
	h.BootSteps = func(string) int { return 3 }
	r, err := h.Step()
	if err != nil {
		t.Fatal(err)
	}
	creates := of[plan.CreateMachine](r)
	if len(creates) != 1 || !creates[0].Machine.Spec.FirstControlPlane || creates[0].Machine.Spec.Role != plan.RoleControlPlane {
		t.Fatalf("first plan: %v", r.Actions)
	}
	first := creates[0].Machine
	if first.Metadata.Name != "demo-control-plane-"+plantest.DesiredHash(h.Cluster, cpPool)[:5]+"-0" {
		t.Errorf("first machine named %s", first.Metadata.Name)
	}
	// Nothing more until it runs.
	for range 2 {
		r, _ = h.Step()
		if n := len(of[plan.CreateMachine](r)); n != 0 {
			t.Fatalf("created %d machines while the first control-plane machine boots", n)
		}
		if r.Status.ControlPlaneInitialized {
			t.Fatal("initialized before the first machine ran")
		}
	}
	// It runs: the second control-plane machine and the workers start.
	r, _ = h.Step()
	var cp, workers int
	for _, c := range of[plan.CreateMachine](r) {
		if c.Machine.Spec.Pool == cpPool {
			cp++
			if c.Machine.Spec.FirstControlPlane {
				t.Error("a second first_control_plane machine")
			}
		} else {
			workers++
		}
	}
	if cp != 1 || workers != 2 || !r.Status.ControlPlaneInitialized {
		t.Fatalf("after the first ran: %d control-plane and %d worker creates, initialized %t", cp, workers, r.Status.ControlPlaneInitialized)
	}
}

func TestFailedFirstControlPlaneIsReplaced(t *testing.T) {
	h := plantest.New(cluster(1))
	failed := false
	h.FailBoot = func(string) bool {
		if failed {
			return false
		}
		failed = true
		return true
	}
	converge(t, h, nil)
	var deleted, firsts int
	for _, rec := range h.History {
		deleted += len(of[plan.DeleteMachine](rec.Result))
		for _, c := range of[plan.CreateMachine](rec.Result) {
			if c.Machine.Spec.FirstControlPlane {
				firsts++
			}
		}
	}
	if deleted != 1 || firsts != 2 {
		t.Errorf("%d deletes and %d first machines, want the failed one deleted and made again", deleted, firsts)
	}
	// The failed machine's record was still being removed when its
	// replacement was planned, so the replacement took the next ordinal.
	if names := h.Names(cpPool); len(names) != 1 || names[0] != "demo-control-plane-"+h.DesiredHash(cpPool)[:5]+"-1" || !h.Machines[names[0]].Spec.FirstControlPlane {
		t.Errorf("control plane %v", names)
	}
}

func TestControlPlaneRollout(t *testing.T) {
	tests := []struct {
		name     string
		replicas int32
		surge    int32
		maxTotal int // never more control-plane machine records
		minAvail int // never fewer available once ready
	}{
		{"one machine, surge 1", 1, 1, 2, 1},
		{"three machines, surge 1", 3, 1, 4, 3},
		{"three machines, surge 0", 3, 0, 3, 2},
		{"five machines, surge 0", 5, 0, 5, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cluster(tt.replicas, 2)
			c.Spec.ControlPlane.MaxSurge = &tt.surge
			h := started(t, c)
			h.Update(func(s *capnv1.ClusterSpec) {
				s.KubernetesVersion = "v1.34.0"
				s.WorkerPools[0].Version = "v1.34.0"
			})
			check := func(rec plantest.Record) error {
				cp := rec.After[cpPool]
				if cp.Total > tt.maxTotal {
					return fmt.Errorf("%d control-plane machines, at most %d", cp.Total, tt.maxTotal)
				}
				if cp.Available < tt.minAvail {
					return fmt.Errorf("%d control-plane machines available, at least %d", cp.Available, tt.minAvail)
				}
				cpChanges := 0
				for _, a := range rec.Result.Actions {
					switch a := a.(type) {
					case plan.CreateMachine:
						if a.Machine.Spec.Pool == cpPool {
							cpChanges++
						} else if rec.Before[cpPool].OutdatedAll > 0 {
							return fmt.Errorf("worker %s created while the control plane rolls", a.Machine.Metadata.Name)
						}
					case plan.DeleteMachine:
						if poolOf(h, a.Name) == cpPool {
							cpChanges++
						} else if rec.Before[cpPool].OutdatedAll > 0 {
							return fmt.Errorf("worker %s deleted while the control plane rolls", a.Name)
						}
					}
				}
				if cpChanges > 1 {
					return fmt.Errorf("%d control-plane changes in one plan", cpChanges)
				}
				return nil
			}
			converge(t, h, check)
			for _, name := range h.Names(cpPool) {
				if v := h.Machines[name].Spec.Version; v != "v1.34.0" {
					t.Errorf("%s still at %s", name, v)
				}
			}
		})
	}
}

func TestControlPlaneScaleDownOneAtATimeOldestFirst(t *testing.T) {
	h := started(t, cluster(1))
	h.Update(func(s *capnv1.ClusterSpec) { s.ControlPlane.Replicas = 5 })
	converge(t, h, nil)
	oldest := h.Names(cpPool)[:2] // ordinals 0 and 1 were made first
	h.Update(func(s *capnv1.ClusterSpec) { s.ControlPlane.Replicas = 3 })
	var deleted []string
	converge(t, h, func(rec plantest.Record) error {
		ds := of[plan.DeleteMachine](rec.Result)
		if len(ds) > 1 {
			return fmt.Errorf("%d control-plane deletes in one plan", len(ds))
		}
		for _, d := range ds {
			deleted = append(deleted, d.Name)
		}
		return nil
	})
	if fmt.Sprint(deleted) != fmt.Sprint(oldest) {
		t.Errorf("deleted %v, want the oldest %v", deleted, oldest)
	}
}

func TestControlPlaneWaitsForUnavailableMachine(t *testing.T) {
	h := started(t, cluster(3))
	names := h.Names(cpPool)
	h.Observed[names[1]].Conditions = []*capnv1.Condition{{Type: plan.ConditionNodeHealthy, Status: "False"}}
	h.Update(func(s *capnv1.ClusterSpec) { s.KubernetesVersion = "v1.33.5" })
	for range 5 {
		r, err := h.Step()
		if err != nil {
			t.Fatal(err)
		}
		if len(of[plan.CreateMachine](r))+len(of[plan.DeleteMachine](r)) > 0 {
			t.Fatalf("control plane changed with an unhealthy member: %v", r.Actions)
		}
		if c := condition(r.Status, plan.ConditionControlPlaneReady); c.Status != "False" || c.Reason != "RollingOut" {
			t.Errorf("ControlPlaneReady %v", c)
		}
	}
	h.Observed[names[1]].Conditions = nil
	converge(t, h, nil)
}
