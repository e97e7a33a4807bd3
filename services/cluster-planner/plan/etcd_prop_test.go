package plan_test

import (
	"fmt"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

// Control-plane changes on real etcd: every control-plane machine is an
// etcd member, and its deletion (drain, Node deleted, its agent leaves
// etcd, then the infrastructure goes) takes as long as the member takes to
// leave. The planner must change the membership one member at a time,
// as KubeadmControlPlane does: a deletion only when no other control-plane
// machine is deleting and every one is Running and healthy; never two
// control-plane machines on their way out; never fewer available members
// than a quorum of the members that remain.

// etcdMembers models the etcd membership of the control plane from the
// harness: a machine is a member from the time it runs until its deletion
// completes (Deleted); a healthy member is an available machine.
type etcdMembers struct{ members, healthy, leaving int }

func membership(h *plantest.Harness) etcdMembers {
	var e etcdMembers
	for _, name := range h.Names(manifest.ControlPlanePool) {
		m, st := h.Machines[name], h.Observed[name]
		switch st.GetPhaseValue() {
		case capnv1.MachineRunning:
			e.members++
			if m.GetMetadata().GetDeletionTimestamp() != nil {
				e.leaving++
			} else if !nodeUnhealthy(st) {
				e.healthy++
			}
		case capnv1.MachineDeleting:
			e.members++
			e.leaving++
		}
	}
	return e
}

func nodeUnhealthy(st *capnv1.MachineStatus) bool {
	for _, c := range st.GetConditions() {
		if c.GetType() == plan.ConditionNodeHealthy && c.GetStatus() == capnv1.ConditionFalse.Wire() {
			return true
		}
	}
	return false
}

// checkEtcdStep asserts the one-member-at-a-time rules of one plan.
func checkEtcdStep(h *plantest.Harness, rec plantest.Record) error {
	before := rec.Before[manifest.ControlPlanePool]
	deletes := 0
	for _, a := range rec.Result.Actions {
		d, ok := a.(plan.DeleteMachine)
		if !ok || poolOf(h, d.Name) != manifest.ControlPlanePool {
			continue
		}
		deletes++
		if before.Total != before.Active {
			return fmt.Errorf("control-plane machine %s deleted while another is still deleting (%+v)", d.Name, before)
		}
		if before.Available != before.Active {
			return fmt.Errorf("control-plane machine %s deleted while %d of %d are not available", d.Name, before.Active-before.Available, before.Active)
		}
	}
	if deletes > 1 {
		return fmt.Errorf("%d control-plane deletions in one plan", deletes)
	}
	e := membership(h)
	if e.leaving > 1 {
		return fmt.Errorf("%d etcd members leaving at once", e.leaving)
	}
	if remaining := e.members - e.leaving; e.leaving > 0 && e.healthy < remaining/2+1 {
		return fmt.Errorf("a member leaves while %d of the %d that remain are healthy: no quorum", e.healthy, remaining)
	}
	if after := rec.After[manifest.ControlPlanePool]; after.Total > int(h.Cluster.Spec.ControlPlane.Replicas)+int(h.Cluster.Spec.ControlPlane.GetMaxSurge()) && before.Total <= after.Total-1 {
		return fmt.Errorf("control plane surged to %d machines, replicas %d + maxSurge %d", after.Total, h.Cluster.Spec.ControlPlane.Replicas, h.Cluster.Spec.ControlPlane.GetMaxSurge())
	}
	return nil
}

// TestPropertyControlPlaneOneMemberAtATime scales and rolls a control
// plane at random (1, 3, 5 replicas, each way; version and template
// changes with maxSurge 0 or 1) with deletions that take up to 6 steps (an
// etcd member that takes its time to leave) and checks checkEtcdStep on
// every plan, and that it converges.
func TestPropertyControlPlaneOneMemberAtATime(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		replicas := int32(rapid.SampledFrom([]int{1, 3, 5}).Draw(t, "replicas"))
		c := cluster(replicas, 1)
		c.Spec.ControlPlane.MaxSurge = genCPSurge(t, replicas)
		h := plantest.New(c)
		boot := rapid.IntRange(1, 4).Draw(t, "bootSteps")
		del := rapid.IntRange(1, 6).Draw(t, "deleteSteps")
		h.BootSteps = func(string) int { return boot }
		h.DeleteSteps = func(string) int { return del }
		check := func(rec plantest.Record) error { return checkEtcdStep(h, rec) }
		if _, err := h.Run(400, check); err != nil {
			t.Fatal(err)
		}
		for round := range rapid.IntRange(1, 3).Draw(t, "rounds") {
			h.Update(func(s *capnv1.ClusterSpec) {
				s.ControlPlane.Replicas = int32(rapid.SampledFrom([]int{1, 3, 5}).Draw(t, "to"))
				s.ControlPlane.MaxSurge = genCPSurge(t, s.ControlPlane.Replicas)
				if rapid.Bool().Draw(t, "upgrade") {
					v, _ := manifest.ParseVersion(s.KubernetesVersion)
					v.Minor, v.Patch = v.Minor+1, 0
					s.KubernetesVersion = v.String()
					s.WorkerPools[0].Version = s.KubernetesVersion
				}
				if rapid.Bool().Draw(t, "template") {
					s.ControlPlane.Template = &capnv1.MachineTemplate{Parameters: map[string]string{"round": strconv.Itoa(round)}}
				}
			})
			if _, err := h.Run(400, check); err != nil {
				t.Fatalf("round %d (control plane %d): %v", round, h.Cluster.Spec.ControlPlane.Replicas, err)
			}
			if cp := h.Counts()[manifest.ControlPlanePool]; cp.Total != int(h.Cluster.Spec.ControlPlane.Replicas) || cp.Outdated != 0 {
				t.Fatalf("round %d: control plane converged to %+v", round, cp)
			}
		}
	})
}

// TestControlPlaneScaleDownWaitsForEachMember: 3 → 1 and 5 → 3 with
// deletions that take 5 steps (the member leaving etcd): the machines go
// one after the other, each deletion planned only after the previous
// machine is Deleted.
func TestControlPlaneScaleDownWaitsForEachMember(t *testing.T) {
	for _, tt := range []struct{ from, to int32 }{{3, 1}, {5, 3}, {5, 1}} {
		t.Run(fmt.Sprintf("%d to %d", tt.from, tt.to), func(t *testing.T) {
			h := started(t, cluster(tt.from))
			h.DeleteSteps = func(string) int { return 5 }
			h.Update(func(s *capnv1.ClusterSpec) { s.ControlPlane.Replicas = tt.to })
			var deleted []string
			converge(t, h, func(rec plantest.Record) error {
				for _, d := range of[plan.DeleteMachine](rec.Result) {
					for _, prev := range deleted {
						if ph := h.Observed[prev].GetPhaseValue(); ph != capnv1.MachineDeleted && h.Machines[prev] != nil {
							return fmt.Errorf("%s deleted while %s is %s", d.Name, prev, ph)
						}
					}
					deleted = append(deleted, d.Name)
				}
				return checkEtcdStep(h, rec)
			})
			if len(deleted) != int(tt.from-tt.to) {
				t.Errorf("deleted %v, want %d machines", deleted, tt.from-tt.to)
			}
		})
	}
}
