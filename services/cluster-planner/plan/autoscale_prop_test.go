package plan_test

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

// The cluster autoscaler's DeleteNodes, as capn's autoscaler-provider
// carries it out: it marks the machines the autoscaler named
// (capn.dev/delete-machine) and lowers the pool's replicas by their number.
// The planner must then delete exactly those machines — never a different
// one, whatever the other machines' states (unhealthy, marked unhealthy,
// still booting), their ages and the pool's deletion order — and nothing
// else until the pool is back at its replicas.
func TestPropScaleDownDeletesExactlyTheMarkedMachines(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(t, "replicas")
		c := cluster(1, int32(n))
		pool := c.Spec.WorkerPools[0]
		pool.DeletionOrder = rapid.SampledFrom(orders).Draw(t, "order")
		if rapid.Bool().Draw(t, "onDelete") {
			pool.Strategy = &capnv1.RolloutStrategy{Type: manifest.StrategyOnDelete}
		}
		pool.Autoscaling = &capnv1.Autoscaling{Min: 0, Max: int32(n)}
		h := plantest.New(c)
		if _, err := h.Run(300, nil); err != nil {
			t.Fatal(err)
		}
		names := h.Names(pool.Name)
		if len(names) != n {
			t.Fatalf("pool has %d machines, want %d", len(names), n)
		}

		// The other machines' states, which rank them before or after one
		// another on an ordinary scale-down.
		for i, name := range names {
			switch rapid.IntRange(0, 3).Draw(t, fmt.Sprintf("state%d", i)) {
			case 1:
				h.Annotate(name, plan.AnnotationUnhealthy, "test")
			case 2:
				h.Observed[name].Conditions = []*capnv1.Condition{{Type: plan.ConditionNodeHealthy, Status: capnv1.ConditionFalse.Wire()}}
			case 3:
				h.SetPhase(name, capnv1.MachineProvisioning)
			}
		}
		marked := rapid.SliceOfNDistinct(rapid.SampledFrom(names), 1, n, rapid.ID[string]).Draw(t, "marked")
		for _, name := range marked {
			h.Annotate(name, plan.AnnotationDeleteMachine, "cluster-autoscaler")
		}
		h.Update(func(s *capnv1.ClusterSpec) { s.WorkerPools[0].Replicas = int32(n - len(marked)) })

		// The first plan deletes exactly the marked machines, at once.
		r := h.Plan()
		var deleted []string
		for _, d := range of[plan.DeleteMachine](r) {
			deleted = append(deleted, d.Name)
		}
		slices.Sort(deleted)
		slices.Sort(marked)
		if !slices.Equal(deleted, marked) {
			t.Fatalf("scale-down deleted %v, the autoscaler named %v", deleted, marked)
		}
		// And nothing else is deleted or created on the way to Ready.
		if _, err := h.Run(300, func(rec plantest.Record) error {
			for _, a := range rec.Result.Actions {
				switch a := a.(type) {
				case plan.DeleteMachine:
					if !slices.Contains(marked, a.Name) {
						return fmt.Errorf("deleted %s, which the autoscaler did not name", a.Name)
					}
				case plan.CreateMachine:
					if a.Machine.GetSpec().GetPool() == pool.Name {
						return fmt.Errorf("created %s after a scale-down", a.Machine.GetMetadata().GetName())
					}
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		left := h.Names(pool.Name)
		for _, name := range marked {
			if slices.Contains(left, name) {
				t.Fatalf("marked machine %s is still there: %v", name, left)
			}
		}
		if len(left) != n-len(marked) {
			t.Fatalf("pool has %v, want %d machines", left, n-len(marked))
		}
	})
}
