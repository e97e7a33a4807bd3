package plan_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

// scaleUpInput is a cluster whose control plane is initialized and whose
// one pool grows from no machine to n in one unbounded plan.
func scaleUpInput(n int32) plan.Input {
	return plan.Input{
		Cluster:   cluster(1, n),
		Status:    &capnv1.ClusterStatus{ControlPlaneInitialized: true},
		Now:       time.Unix(0, 0),
		Validator: manifest.Validator{MaxPoolReplicas: int(n), MaxClusterReplicas: int(n) + 1},
	}
}

// BenchmarkPlanScaleUp names n new machines in one plan (go test -bench
// PlanScaleUp -benchtime=1x): the slot naming's cost.
func BenchmarkPlanScaleUp(b *testing.B) {
	for _, n := range []int32{1000, 5000, 20000} {
		b.Run(fmt.Sprintf("slots=%d", n), func(b *testing.B) {
			in := scaleUpInput(n)
			b.ReportAllocs()
			for b.Loop() {
				if r := plan.Plan(in); len(r.Actions) < int(n) {
					b.Fatalf("%d actions", len(r.Actions))
				}
			}
		})
	}
}

// TestSlotNamingIsLinear: naming 20,000 slots allocates a bounded amount
// per slot (a quadratic search made some 10,000 names per slot).
func TestSlotNamingIsLinear(t *testing.T) {
	const n = 20000
	in := scaleUpInput(n)
	allocs := testing.AllocsPerRun(1, func() {
		if r := plan.Plan(in); len(r.Actions) < n {
			t.Fatalf("%d actions", len(r.Actions))
		}
	})
	if perSlot := allocs / n; perSlot > 50 {
		t.Errorf("%.0f allocations per named slot, want at most 50 (%.0f in all)", perSlot, allocs)
	}
}

func TestMaxActionsTruncates(t *testing.T) {
	in := scaleUpInput(25)
	in.MaxActions = 10
	r := plan.Plan(in)
	if len(r.Actions) != 10 || r.RequeueAfter != plan.MoreAfter {
		t.Fatalf("got %d actions, requeue %s; want 10, %s", len(r.Actions), r.RequeueAfter, plan.MoreAfter)
	}
	in.MaxActions = 100
	if r := plan.Plan(in); len(r.Actions) != 27 || r.RequeueAfter == plan.MoreAfter {
		t.Fatalf("unbounded enough: got %d actions, requeue %s; want 27 (infra, 1 + 25 machines) and no hurry", len(r.Actions), r.RequeueAfter)
	}
}

func TestOverBoundSpecIsNotPlanned(t *testing.T) {
	in := scaleUpInput(2000)
	in.Validator = manifest.Validator{} // the defaults: 1,000 a pool
	r := plan.Plan(in)
	if len(r.Actions) != 0 {
		t.Fatalf("planned %d actions for a pool over the bound", len(r.Actions))
	}
	c := condition(r.Status, plan.ConditionReady)
	if r.Status.GetPhaseValue() != capnv1.ClusterFailed || c.GetReason() != "InvalidSpec" ||
		!strings.Contains(c.GetMessage(), "spec.workerPools[0].replicas: 2000: must be at most 1000 per pool") {
		t.Fatalf("phase %s, Ready %s: %s", r.Status.GetPhase(), c.GetReason(), c.GetMessage())
	}
}

func TestUnreadableNamesAreNotReused(t *testing.T) {
	in := scaleUpInput(1)
	first := plan.MachineName("demo", "md-0", plantest.DesiredHash(in.Cluster, "md-0"), 0)
	in.Unreadable = []string{first}
	for _, a := range plan.Plan(in).Actions {
		if c, ok := a.(plan.CreateMachine); ok && c.Machine.GetMetadata().GetName() == first {
			t.Fatalf("created %s over an unreadable record", first)
		}
	}
}
