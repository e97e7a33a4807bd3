package plan_test

import (
	"fmt"
	"testing"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

// TestIssueScenario runs the lifecycle the end-to-end test of issue 4 runs,
// in the simulator: 3 control-plane machines and two pools of 3 → Ready;
// scale a pool 3 → 5 → 1; upgrade v1.33 → v1.34; delete. Every step is
// checked against the surge and availability bounds and the control plane
// must finish its rollout before a pool starts.
func TestIssueScenario(t *testing.T) {
	h := plantest.New(cluster(3, 3, 3))
	h.BootSteps = func(name string) int { return 1 + len(name)%3 }
	h.DeleteSteps = func(name string) int { return 1 + len(name)%2 }
	bounds := func(rec plantest.Record) error {
		for _, p := range h.Cluster.Spec.WorkerPools {
			c := rec.After[p.Name]
			if c.Total > int(p.Replicas)+1 && rec.Before[p.Name].Total <= int(p.Replicas)+1 {
				return fmt.Errorf("pool %s: %d machines, replicas %d + maxSurge 1", p.Name, c.Total, p.Replicas)
			}
			if before := rec.Before[p.Name]; c.Available < min(before.Available, int(p.Replicas)) {
				return fmt.Errorf("pool %s: %d available, had %d, replicas %d - maxUnavailable 0", p.Name, c.Available, before.Available, p.Replicas)
			}
			if rec.Before[cpPool].OutdatedAll > 0 && c.Total > rec.Before[p.Name].Total {
				return fmt.Errorf("pool %s grew while the control plane rolls", p.Name)
			}
		}
		if cp := rec.After[cpPool]; cp.Total > 4 {
			return fmt.Errorf("control plane: %d machines", cp.Total)
		}
		return nil
	}
	converge(t, h, bounds)
	for _, replicas := range []int32{5, 1} {
		h.Update(func(s *capnv1.ClusterSpec) { s.WorkerPools[0].Replicas = replicas })
		converge(t, h, bounds)
		if n := len(h.Names("md-0")); n != int(replicas) {
			t.Fatalf("md-0 has %d machines, want %d", n, replicas)
		}
	}
	h.Update(func(s *capnv1.ClusterSpec) {
		s.KubernetesVersion = "v1.34.2"
		for _, p := range s.WorkerPools {
			p.Version = "v1.34.2"
		}
	})
	converge(t, h, bounds)
	for name, m := range h.Machines {
		if m.Spec.Version != "v1.34.2" || h.Observed[name].KubeletVersion != "v1.34.2" {
			t.Errorf("%s at %s after the upgrade", name, m.Spec.Version)
		}
	}
	h.Delete()
	converge(t, h, nil)
	if len(h.Machines) != 0 || h.Infra.Exists || h.PKI || !h.ClusterDeleted {
		t.Errorf("left after delete: %d machines, infra %t, pki %t", len(h.Machines), h.Infra.Exists, h.PKI)
	}
}
