package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/services/cluster-planner"
	"github.com/capn-dev/capn/services/machine-manager"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// TestRestartMidRollout kills the planner and the machine-manager in the
// middle of an upgrade and starts them again: the rollout completes, with
// exactly the desired machines and one infrastructure record each.
func TestRestartMidRollout(t *testing.T) {
	w := newWorld(t)
	w.startAll()
	rec := w.record("demo")
	w.Apply(harness.Demo)
	w.WaitReady("demo", 60*time.Second)

	w.MutateCluster("demo", upgrade)
	// Wait until the rollout is under way: some machine on the new version.
	natstest.WaitFor(t, 30*time.Second, "the upgrade under way", func() bool { return w.anyOnVersion(rec, newVersion) })
	w.Stop(clusterplanner.Name)
	w.Stop(machinemanager.Name)
	t.Log("stopped the planner and the machine-manager mid-rollout")
	time.Sleep(200 * time.Millisecond) //sleep-ok: downtime: the providers and bootstrapper go on meanwhile
	w.Start(clusterplanner.Name)
	w.Start(machinemanager.Name)

	w.WaitReady("demo", 120*time.Second)
	w.expectPools(rec, map[string]int{"control-plane": 3, "md-0": 3, "md-1": 3})
	seen := map[string]bool{}
	for _, names := range rec.names() {
		for _, n := range names {
			if seen[n] {
				t.Fatalf("duplicate machine %s", n)
			}
			seen[n] = true
			if v := rec.machine(n).GetSpec().GetVersion(); v != newVersion {
				t.Errorf("machine %s on %s after the rollout", n, v)
			}
		}
	}
	infra := harness.Keys(t, w.Observed, "infra.sim.demo.")
	for _, k := range infra {
		if m := strings.TrimPrefix(k, "infra.sim.demo."); m != "_" && !seen[m] {
			t.Errorf("infrastructure %s has no machine", k)
		}
	}
	t.Logf("after the restart: %d machines, %d infrastructure records (+1 for the cluster), no duplicates", len(seen), len(infra)-1)
}

func (w *world) anyOnVersion(rec *recorder, v string) bool {
	for _, names := range rec.names() {
		for _, n := range names {
			if rec.machine(n).GetSpec().GetVersion() == v {
				return true
			}
		}
	}
	return false
}
