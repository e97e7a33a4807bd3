package plan_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

// The harness starts on Wednesday 2025-01-01 00:00 UTC; the window opens
// that day at 06:00 for an hour.
var (
	windowOpens  = time.Date(2025, 1, 1, 6, 0, 0, 0, time.UTC)
	insideWindow = windowOpens.Add(10 * time.Minute)
)

// confined returns a cluster whose rollouts are confined to a window
// (Wednesdays 06:00–07:00 UTC): cp control-plane replicas, one
// RollingUpdate pool of `pool` machines with surge/unavailable.
func confined(cp, pool int32, surge, unav string) *capnv1.Cluster {
	c := cluster(cp, pool)
	c.Spec.WorkerPools[0].Strategy = &capnv1.RolloutStrategy{Type: manifest.StrategyRollingUpdate, MaxSurge: surge, MaxUnavailable: unav}
	c.Spec.Maintenance = &capnv1.MaintenanceSpec{ConfineSpecRollouts: true,
		Windows: []*capnv1.MaintenanceWindow{{Days: []string{"Wed"}, Start: "06:00", End: "07:00"}}}
	return c
}

// changeTemplates changes the control plane's and the pool's machine
// template: every machine is outdated.
func changeTemplates(s *capnv1.ClusterSpec) {
	s.ControlPlane.Template = &capnv1.MachineTemplate{Parameters: map[string]string{"size": "xl"}}
	s.WorkerPools[0].Template = &capnv1.MachineTemplate{Parameters: map[string]string{"size": "xl"}}
}

// TestConfinedRolloutWaitsForWindow: with confineSpecRollouts and the
// window closed, a new cluster is still created; a template change
// replaces no machine (status says what waits and until when) while a
// scale-up of the pool still happens; once the window opens the rollout
// runs to the end.
func TestConfinedRolloutWaitsForWindow(t *testing.T) {
	h := plantest.New(confined(3, 2, "1", "0"))
	converge(t, h, nil) // creating is never held
	if h.Now.After(windowOpens) {
		t.Fatalf("the test's clock %v passed the window", h.Now)
	}
	h.Update(changeTemplates)
	for range 30 {
		r, err := h.Step()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(of[plan.CreateMachine](r)) + len(of[plan.DeleteMachine](r)); n > 0 {
			t.Fatalf("step %d while the window is closed: %d creates and deletes %v", h.Steps, n, r.Actions)
		}
	}
	st := h.Status
	ready := condition(st, plan.ConditionReady)
	if ready.GetStatus() != "False" || ready.GetReason() != plan.ReasonWaitingForMaintenanceWindow {
		t.Errorf("Ready = %s %s %q, want False %s", ready.GetStatus(), ready.GetReason(), ready.GetMessage(), plan.ReasonWaitingForMaintenanceWindow)
	}
	for _, typ := range []string{plan.ConditionControlPlaneReady, plan.ConditionWorkersReady} {
		c := condition(st, typ)
		if c.GetReason() != plan.ReasonWaitingForMaintenanceWindow || !strings.Contains(c.GetMessage(), "2025-01-01T06:00:00Z") {
			t.Errorf("%s = %s %q, want %s naming the opening", typ, c.GetReason(), c.GetMessage(), plan.ReasonWaitingForMaintenanceWindow)
		}
	}
	w := st.GetMaintenance().GetWaiting()
	if len(w) != 1 || w[0].GetChange() != plan.ChangeSpecRollout ||
		w[0].GetMessage() != "rolling out control plane (3 machines outdated), pool md-0 (2 machines outdated) waits for the maintenance window opening at 2025-01-01T06:00:00Z (spec.maintenance.confineSpecRollouts)" {
		t.Errorf("waiting = %v", w)
	}
	if !st.GetMaintenance().GetNextWindowOpen().AsTime().Equal(windowOpens) {
		t.Errorf("next window open %v, want %v", st.GetMaintenance().GetNextWindowOpen(), windowOpens)
	}
	if r := h.Plan(); r.RequeueAfter <= 0 || r.RequeueAfter > windowOpens.Sub(h.Now) {
		t.Errorf("RequeueAfter %s, want at most until the window opens (%s)", r.RequeueAfter, windowOpens.Sub(h.Now))
	}

	// Scaling is never held: the pool grows to 4 with machines of the new
	// template, its 2 outdated ones stay.
	h.Update(func(s *capnv1.ClusterSpec) { s.WorkerPools[0].Replicas = 4 })
	for range 10 {
		if _, err := h.Step(); err != nil {
			t.Fatal(err)
		}
	}
	if c := h.Counts()["md-0"]; c.Active != 4 || c.Outdated != 2 || c.Available != 4 {
		t.Fatalf("md-0 while closed after a scale-up to 4: %+v, want 4 active, 2 outdated", c)
	}
	if c := h.Counts()[manifest.ControlPlanePool]; c.Outdated != 3 {
		t.Fatalf("control plane while closed: %+v, want 3 outdated", c)
	}

	h.Now = insideWindow
	converge(t, h, nil)
	for _, pool := range []string{manifest.ControlPlanePool, "md-0"} {
		if c := h.Counts()[pool]; c.Outdated != 0 {
			t.Errorf("%s after the window opened: %+v", pool, c)
		}
	}
	if w := h.Status.GetMaintenance().GetWaiting(); len(w) != 0 {
		t.Errorf("waiting after the rollout: %v", w)
	}
}

// TestConfinedRolloutInProgressCompletes: a rollout that started in the
// window finishes the replacement it began when the window closes (the
// surge machine is kept and an outdated machine goes), and starts no
// other.
func TestConfinedRolloutInProgressCompletes(t *testing.T) {
	h := plantest.New(confined(1, 4, "1", "0"))
	h.Now = insideWindow
	converge(t, h, nil)
	h.Update(func(s *capnv1.ClusterSpec) {
		s.WorkerPools[0].Template = &capnv1.MachineTemplate{Parameters: map[string]string{"size": "xl"}}
	})
	// Plan until the pool surged its first new machine, then close the
	// window.
	for h.Counts()["md-0"].Active <= 4 {
		if _, err := h.Step(); err != nil {
			t.Fatal(err)
		}
	}
	h.Now = windowOpens.Add(2 * time.Hour)
	for range 30 {
		r, err := h.Step()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(of[plan.CreateMachine](r)); n > 0 {
			t.Fatalf("step %d after the window closed: %d creates", h.Steps, n)
		}
	}
	if c := h.Counts()["md-0"]; c.Active != 4 || c.Outdated != 3 || c.Total != 4 {
		t.Fatalf("md-0 after the window closed mid-rollout: %+v, want 4 machines, 1 replaced, 3 outdated left", c)
	}
}

// TestConfinedExplicitUpgradeRunsAtOnce: the version a user's capn
// upgrade set (annotations.UpgradeAtOnce) rolls while the window is
// closed; a template change afterwards at that version waits again.
func TestConfinedExplicitUpgradeRunsAtOnce(t *testing.T) {
	h := started(t, confined(1, 2, "1", "0"))
	h.Update(func(s *capnv1.ClusterSpec) {
		s.KubernetesVersion = "v1.33.5"
		s.WorkerPools[0].Version = "v1.33.5"
	})
	h.Cluster.Metadata.Annotations = map[string]string{annotations.UpgradeAtOnce: "v1.33.5"}
	converge(t, h, nil)
	if h.Now.After(windowOpens) {
		t.Fatalf("the test's clock %v passed the window", h.Now)
	}
	for _, pool := range []string{manifest.ControlPlanePool, "md-0"} {
		if c := h.Counts()[pool]; c.Outdated != 0 {
			t.Errorf("%s after the explicit upgrade: %+v", pool, c)
		}
	}
	h.Update(changeTemplates)
	for range 20 {
		r, err := h.Step()
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Actions) > 0 {
			t.Fatalf("a template change at the upgraded version rolled while closed: %v", r.Actions)
		}
	}
	// Without the mark the same upgrade waits.
	h2 := started(t, confined(1, 2, "1", "0"))
	h2.Update(func(s *capnv1.ClusterSpec) { s.KubernetesVersion = "v1.33.5"; s.WorkerPools[0].Version = "v1.33.5" })
	for range 20 {
		if r, _ := h2.Step(); len(r.Actions) > 0 {
			t.Fatalf("an upgrade not marked explicit rolled while closed: %v", r.Actions)
		}
	}
}

// TestConfinedVersionSkewHoldsScaleUp: while the control plane's version
// change waits for the window, a pool whose new machines would run the
// newer version creates none (a kubelet never newer than its API server)
// and says why; a pool at the control plane's version scales.
func TestConfinedVersionSkewHoldsScaleUp(t *testing.T) {
	h := started(t, confined(1, 1, "1", "0"))
	h.Update(func(s *capnv1.ClusterSpec) {
		s.KubernetesVersion = "v1.33.5"
		s.WorkerPools[0].Version = "v1.33.5"
		s.WorkerPools[0].Replicas = 2
	})
	for range 10 {
		if r, _ := h.Step(); len(r.Actions) > 0 {
			t.Fatalf("skewed scale-up or rollout while closed: %v", r.Actions)
		}
	}
	if c := condition(h.Status, plan.ConditionWorkersReady); c.GetReason() != plan.ReasonWaitingForControlPlane || !strings.Contains(c.GetMessage(), "maintenance window") {
		t.Errorf("WorkersReady %s %q", c.GetReason(), c.GetMessage())
	}
	h.Update(func(s *capnv1.ClusterSpec) { s.WorkerPools[0].Version = "v1.33.4" })
	for range 10 {
		if _, err := h.Step(); err != nil {
			t.Fatal(err)
		}
	}
	if c := h.Counts()["md-0"]; c.Active != 2 || c.Available != 2 {
		t.Errorf("md-0 at the control plane's version did not scale to 2: %+v", c)
	}
}

// TestPropConfinedNeverStartsReplacement: random pools, strategies,
// changes (template, scale) and boot times; while the window is closed no
// plan creates a machine in a pool that already has its replicas, and no
// plan deletes more outdated machines than the pool has beyond its
// replicas (failed machines aside: repairs are never held); scaling
// converges while closed; everything converges once the window opens.
func TestPropConfinedNeverStartsReplacement(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := confined(int32(rapid.SampledFrom([]int{1, 3}).Draw(t, "cp")), int32(rapid.IntRange(0, 5).Draw(t, "replicas")), "1", "0")
		c.Spec.WorkerPools[0].Strategy = genStrategy(t)
		if c.Spec.WorkerPools[0].Strategy.Type == manifest.StrategyOnDelete {
			c.Spec.WorkerPools[0].Strategy = &capnv1.RolloutStrategy{Type: manifest.StrategyRollingUpdate, MaxSurge: "1", MaxUnavailable: "0"}
		}
		h := plantest.New(c)
		h.Tick = time.Second
		boot := map[string]int{}
		h.BootSteps = func(name string) int {
			if _, ok := boot[name]; !ok {
				boot[name] = rapid.IntRange(1, 4).Draw(t, "boot "+name)
			}
			return boot[name]
		}
		if _, err := h.Run(300, nil); err != nil {
			t.Fatal(err)
		}
		// The change starts inside the window or outside it.
		if rapid.Bool().Draw(t, "start in window") {
			h.Now = insideWindow
		}
		h.Update(changeTemplates)
		closeAt := rapid.IntRange(0, 10).Draw(t, "steps before closed")
		if !h.Now.Before(windowOpens) {
			for range closeAt {
				if _, err := h.Step(); err != nil {
					t.Fatal(err)
				}
			}
			h.Now = windowOpens.Add(2 * time.Hour) // closed until next Wednesday
		}
		want := int(h.Cluster.Spec.WorkerPools[0].Replicas)
		if rapid.Bool().Draw(t, "scale") {
			want = rapid.IntRange(0, 6).Draw(t, "new replicas")
			h.Update(func(s *capnv1.ClusterSpec) { s.WorkerPools[0].Replicas = int32(want) })
		}
		check := func(rec plantest.Record) error {
			for _, pool := range []string{manifest.ControlPlanePool, "md-0"} {
				b := rec.Before[pool]
				replicas := want
				if pool == manifest.ControlPlanePool {
					replicas = int(h.Cluster.Spec.ControlPlane.Replicas)
				}
				creates, deletes := 0, 0
				for _, a := range rec.Result.Actions {
					switch a := a.(type) {
					case plan.CreateMachine:
						if a.Machine.GetSpec().GetPool() == pool {
							creates++
						}
					case plan.DeleteMachine:
						if m := h.Machines[a.Name]; m.GetSpec().GetPool() == pool && m.GetSpec().GetTemplateHash() != h.DesiredHash(pool) &&
							h.Observed[a.Name].GetPhaseValue() != capnv1.MachineFailed {
							deletes++
						}
					}
				}
				if creates > 0 && b.Active+creates > max(replicas, b.Active) {
					return fmt.Errorf("%s: %d creates with %d active of %d replicas: a replacement started while closed", pool, creates, b.Active, replicas)
				}
				if deletes > max(0, b.Active-replicas) {
					return fmt.Errorf("%s: %d outdated machines deleted with %d active of %d replicas: a replacement started while closed", pool, deletes, b.Active, replicas)
				}
			}
			return nil
		}
		for range 60 {
			r, err := h.PlanAndApply()
			if err != nil {
				t.Fatal(err)
			}
			if err := check(h.History[len(h.History)-1]); err != nil {
				t.Fatalf("step %d: %v", h.Steps-1, err)
			}
			h.Advance()
			_ = r
		}
		if c := h.Counts()["md-0"]; c.Active != want || c.Available != want {
			t.Fatalf("md-0 did not scale to %d while closed: %+v", want, c)
		}
		h.Now = windowOpens.Add(7 * 24 * time.Hour).Add(time.Minute)
		if _, err := h.Run(400, nil); err != nil {
			t.Fatal(err)
		}
		for _, pool := range []string{manifest.ControlPlanePool, "md-0"} {
			if c := h.Counts()[pool]; c.Outdated != 0 {
				t.Fatalf("%s outdated after the window opened: %+v", pool, c)
			}
		}
	})
}

// TestConfinedRepairsAreNotHeld: while a template change waits for the
// window, a failed machine is still deleted and its slot refilled (with
// the new template: the pool's only template), and nothing else moves.
func TestConfinedRepairsAreNotHeld(t *testing.T) {
	h := started(t, confined(1, 3, "1", "0"))
	h.Update(changeTemplates)
	for range 5 {
		if _, err := h.Step(); err != nil {
			t.Fatal(err)
		}
	}
	failed := h.Names("md-0")[0]
	h.SetPhase(failed, capnv1.MachineFailed)
	deleted := false
	for range 20 {
		r, err := h.Step()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range of[plan.DeleteMachine](r) {
			if d.Name != failed {
				t.Fatalf("deleted %s while the window is closed: only the failed %s may go", d.Name, failed)
			}
			deleted = true
		}
	}
	c := h.Counts()["md-0"]
	if !deleted || c.Active != 3 || c.Available != 3 || c.Outdated != 2 {
		t.Fatalf("md-0 after its failed machine was repaired while closed: %+v (deleted %v), want 3 available, 2 outdated", c, deleted)
	}
}
