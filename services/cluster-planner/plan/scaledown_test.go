package plan_test

import (
	"fmt"
	"testing"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

// TestNotReadyWhileAMachineDeletes pins what `capn scale --wait` relies
// on: after a scale-down, the status of the new generation never says
// Ready while a removed machine is still being deleted (its desired
// record there, its deletion not finished), for a control plane on
// machines and for a hosted one.
func TestNotReadyWhileAMachineDeletes(t *testing.T) {
	for _, typ := range []string{capnv1.ControlPlaneMachines, capnv1.ControlPlaneHosted} {
		t.Run(typ, func(t *testing.T) {
			c := cluster(1, 3)
			if typ == capnv1.ControlPlaneHosted {
				c = implCluster(typ, 3)
			}
			h := plantest.New(c)
			h.DeleteSteps = func(string) int { return 3 } // a deletion spans several plans
			answer := func() {
				if typ == capnv1.ControlPlaneHosted {
					h.ControlPlane = record(typ, h.Cluster.GetMetadata().GetGeneration(), true, "v1.33.4", true)
				}
			}
			answer()
			if _, err := h.Run(30, nil); err != nil {
				t.Fatal(err)
			}
			h.Update(func(s *capnv1.ClusterSpec) { s.WorkerPools[0].Replicas = 1 })
			answer()
			gen := h.Cluster.GetMetadata().GetGeneration()
			deleting := 0
			_, err := h.Run(30, func(r plantest.Record) error {
				st := r.Result.Status
				before := r.Before["md-0"]
				if before.Total > before.Active {
					deleting++
				}
				if st.GetObservedGeneration() == gen && st.GetPhaseValue() == capnv1.ClusterReady && before.Total != 1 {
					return fmt.Errorf("Ready with %d machines in md-0 (%d not deleting): %v", before.Total, before.Active, condition(st, plan.ConditionReady))
				}
				if c := condition(st, plan.ConditionReady); c.GetStatus() == "True" && before.Total != 1 {
					return fmt.Errorf("Ready=True with %d machines in md-0", before.Total)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if deleting == 0 {
				t.Fatal("no plan saw a machine deleting: the test tests nothing")
			}
			if n := len(h.Machines); n != map[string]int{capnv1.ControlPlaneMachines: 2, capnv1.ControlPlaneHosted: 1}[typ] {
				t.Errorf("%d machines left", n)
			}
		})
	}
}
