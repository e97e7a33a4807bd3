package plan_test

import (
	"strconv"
	"testing"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
)

func TestFailureBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{-1: 0, 0: 0, 1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second,
		6: 160 * time.Second, 7: 5 * time.Minute, 60: 5 * time.Minute} {
		if got := plan.FailureBackoff(n); got != want {
			t.Errorf("FailureBackoff(%d) = %s, want %s", n, got, want)
		}
	}
}

// TestMachinesThatCannotBeMadeAreRetriedAtASlowingPace: every machine of
// md-0 fails as soon as it boots (a version whose binaries are absent, a
// quota): over 10 simulated minutes at a step per second the pool's two
// new slots are retried a few times each, not hundreds, each replacement
// carries the streak its slot reached, a plan waiting on a backoff asks
// to be run again when it ends, and the pool recovers at once when the
// failures stop.
func TestMachinesThatCannotBeMadeAreRetriedAtASlowingPace(t *testing.T) {
	h := started(t, cluster(1, 2))
	h.Tick = time.Second
	failing := true
	h.FailBoot = func(name string) bool { return failing && poolOf(h, name) == "md-0" }
	h.BootSteps = func(string) int { return 1 }
	h.Cluster.Spec.WorkerPools[0].Replicas = 4 // two more, and each new one fails
	h.Cluster.Metadata.Generation++
	creates, maxStreak := 0, 0
	for step := 0; step < 600; step++ {
		r := h.Plan()
		for _, a := range of[plan.CreateMachine](r) {
			if a.Machine.GetSpec().GetPool() != "md-0" {
				continue
			}
			creates++
			n, _ := strconv.Atoi(a.Machine.GetMetadata().GetAnnotations()[plan.AnnotationFailureStreak])
			maxStreak = max(maxStreak, n)
		}
		waiting := false
		for name, m := range h.Machines {
			if st := h.Observed[name]; st.GetPhaseValue() == capnv1.MachineFailed && m.GetMetadata().GetDeletionTimestamp() == nil {
				waiting = true
			}
		}
		if waiting && len(of[plan.DeleteMachine](r)) == 0 && (r.RequeueAfter <= 0 || r.RequeueAfter > 5*time.Minute) {
			t.Fatalf("step %d: a failed machine waits for its backoff but the plan asks to run again after %s", step, r.RequeueAfter)
		}
		if err := h.Apply(r); err != nil {
			t.Fatal(err)
		}
		h.Advance()
	}
	// The streak is the pool's (its slots share it): backoffs of 0, 5, 10,
	// 20 … 300 s between tries, about a dozen creates in 600 s. Without
	// the backoff each slot is retried every few steps (hundreds).
	t.Logf("10 minutes of failing boots: %d creates in md-0, streak reached %d", creates, maxStreak)
	if creates > 20 || creates < 8 {
		t.Errorf("%d creates in 10 minutes, want 8 to 20 (a slowing pace, still retrying)", creates)
	}
	if maxStreak < 5 {
		t.Errorf("streak reached %d, want the replacements to carry a growing streak", maxStreak)
	}
	failing = false
	h.Tick = 10 * time.Minute // the backoffs of the last failures pass
	if _, err := h.Run(300, nil); err != nil {
		t.Fatalf("once machines boot again: %v", err)
	}
}
