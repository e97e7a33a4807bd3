package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/cluster-planner"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/services/maintenance"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// A cluster whose machine rollouts are confined to Mondays 03:00–04:00
// UTC; %s is its pool's template parameters.
const confinedCluster = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata: {name: %s}
spec:
  kubernetesVersion: v1.34.2
  controlPlane: {provider: sim, replicas: 1}
  workerPools:
  - {name: md-0, provider: sim, replicas: 2, template: {parameters: {size: %s}}}
  maintenance:
    confineSpecRollouts: true
    windows: [{days: [Mon], start: "03:00", end: "04:00"}]
`

// TestConfinedSpecRolloutWaitsForWindow: on sim, with the cluster-planner
// and the maintenance service on one fake clock, a template change of a
// cluster with confineSpecRollouts replaces no machine while the window
// is closed — the status says what waits and when the window opens —
// and rolls once the clock enters the window (the maintenance service's
// record changes then, which wakes the planner). A user's capn upgrade of
// another such cluster runs at once.
func TestConfinedSpecRolloutWaitsForWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	// Sunday noon UTC; the window opens on Monday at 03:00 UTC. The
	// planner reads this clock too, so it lies in the past of every real
	// stamp (a provider's announcement from the "future" is fresh; one
	// older than 30s at the fake now would stop its pools).
	clk := &clock{now: time.Date(2026, 1, 4, 12, 0, 0, 0, time.UTC)}
	opens := time.Date(2026, 1, 5, 3, 0, 0, 0, time.UTC)
	sys := harness.New(t, harness.Options{Now: clk.Now, FleetTick: 50 * time.Millisecond, Services: map[string]func(*harness.Factory) daemon.Service{
		clusterplanner.Name: func(*harness.Factory) daemon.Service { return clusterplanner.New(clusterplanner.Config{Now: clk.Now}) },
		maintenance.Name: func(*harness.Factory) daemon.Service {
			return maintenance.New(maintenance.Config{Now: clk.Now, Resync: 100 * time.Millisecond})
		},
	}})
	sys.StartAll(harness.All...)
	sys.Start(maintenance.Name)
	sys.Start(harness.Gateway)
	cl := sys.Client()
	ctx := context.Background()
	for _, n := range []string{"held", "forced"} {
		if _, _, err := cl.Apply(ctx, []byte(fmt.Sprintf(confinedCluster, n, "small"))); err != nil {
			t.Fatal(err)
		}
	}
	// Creating is never held by the window.
	sys.WaitReady("held", 60*time.Second)
	sys.WaitReady("forced", 60*time.Second)
	// machinesOf are the pool md-0's machines not being deleted, with
	// their template hashes.
	machinesOf := func(cluster string) map[string]string {
		out := map[string]string{}
		l, err := sys.Desired.ListKeysFiltered(ctx, keys.MachinesOf(cluster)+">")
		if err != nil {
			t.Fatal(err)
		}
		for k := range l.Keys() {
			m, _, err := sys.Machines.Get(ctx, k)
			if err == nil && m.GetMetadata().GetDeletionTimestamp() == nil && m.GetSpec().GetPool() == "md-0" {
				out[m.GetMetadata().GetName()] = m.GetSpec().GetTemplateHash()
			}
		}
		return out
	}
	before := machinesOf("held")

	if _, _, err := cl.Apply(ctx, []byte(fmt.Sprintf(confinedCluster, "held", "large"))); err != nil {
		t.Fatal(err)
	}
	var st *capnv1.ClusterStatus
	natstest.WaitFor(t, 30*time.Second, "held: the template change planned and waiting for the window", func() bool {
		st = sys.ClusterStatus("held")
		w := st.GetMaintenance().GetWaiting()
		return st.GetObservedGeneration() == 2 && len(w) == 1 && w[0].GetChange() == plan.ChangeSpecRollout
	})
	if got := st.GetMaintenance().GetWaiting()[0].GetMessage(); got != "rolling out pool md-0 (2 machines outdated) waits for the maintenance window opening at 2026-01-05T03:00:00Z (spec.maintenance.confineSpecRollouts)" {
		t.Errorf("waiting: %q", got)
	}
	if st.GetMaintenance().GetWindowOpen() || !st.GetMaintenance().GetNextWindowOpen().AsTime().Equal(opens) {
		t.Errorf("maintenance status %v, want closed until %v", st.GetMaintenance(), opens)
	}
	if c := condition(st, plan.ConditionReady); c.GetReason() != plan.ReasonWaitingForMaintenanceWindow {
		t.Errorf("Ready %s %s %q, want %s", c.GetStatus(), c.GetReason(), c.GetMessage(), plan.ReasonWaitingForMaintenanceWindow)
	}

	// An explicit upgrade of the other confined cluster runs at once.
	upgraded := time.Now()
	if _, err := cl.Upgrade(ctx, "forced", "v1.34.3"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 60*time.Second, "forced: upgraded to v1.34.3 and Ready while the window is closed", func() bool {
		s := sys.ClusterStatus("forced")
		return sys.IsReady("forced") && s.GetControlPlane().GetVersion() == "v1.34.3" && s.GetWorkerPools()[0].GetVersion() == "v1.34.3"
	})
	t.Logf("forced: upgraded and Ready %s after capn upgrade", time.Since(upgraded).Round(time.Millisecond))
	// By now the held cluster has been planned many times over (the
	// planner's resync and the maintenance service's record, every
	// 100ms): still its machines of generation 1.
	if got := machinesOf("held"); !equalMaps(before, got) || len(got) != 2 {
		t.Fatalf("held cluster's machines changed while the window was closed: %v → %v", before, got)
	}
	if !clk.Now().Before(opens) {
		t.Fatalf("the clock passed the window: %v", clk.Now())
	}

	clk.Advance(opens.Sub(clk.Now()) + 30*time.Second)
	opened := time.Now()
	natstest.WaitFor(t, 60*time.Second, "held: rolled out once the window opened", func() bool {
		s := sys.ClusterStatus("held")
		return sys.IsReady("held") && s.GetWorkerPools()[0].GetUpdated() == 2 && len(s.GetMaintenance().GetWaiting()) == 0 &&
			s.GetMaintenance().GetWindowOpen() // the maintenance service's record, copied
	})
	t.Logf("held: rolled out %s (wall time) after the clock entered the window", time.Since(opened).Round(time.Millisecond))
	after := machinesOf("held")
	for name := range before {
		if _, left := after[name]; left {
			t.Errorf("machine %s of the old template left after the rollout: %v", name, after)
		}
	}
	if len(after) != 2 {
		t.Errorf("pool md-0 has %d machines after the rollout, want 2: %v", len(after), after)
	}
}

func condition(st *capnv1.ClusterStatus, typ string) *capnv1.Condition {
	for _, c := range st.GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
