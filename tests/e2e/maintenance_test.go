package e2e

import (
	"context"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // Europe/Berlin on any machine

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/maintenance"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// clock is the maintenance service's time: it moves when the test says.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) set(s string) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

const office = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata: {name: office}
spec:
  kubernetesVersion: v1.33.4
  controlPlane: {provider: sim, replicas: 1}
  workerPools:
  - {name: md-0, provider: sim, replicas: 2}
  maintenance:
    autoPatch: true
    windows:
    - {days: [Sun], start: "02:30", end: "04:00", timeZone: Europe/Berlin}
  hibernation:
    schedules:
    - {start: "0 19 * * *", end: "0 7 * * *", location: Europe/Berlin}
`

// TestMaintenanceWindowAndScheduleOnSim runs the core services, the sim
// provider and the maintenance service on a fake clock, on the weekend
// Berlin's clocks fall back (25 October 2026): the auto-patch waits for
// Sunday's 02:30 window (the status says so, through the planner), the
// schedule stops every machine at 19:00 CEST and starts them again at
// 07:00 CET (06:00Z, not 05:00Z), and the patch applied in the window
// while the cluster slept rolls every machine to v1.33.6 once it wakes.
func TestMaintenanceWindowAndScheduleOnSim(t *testing.T) {
	w := newWorld(t)
	w.startAll()
	clk := &clock{}
	clk.set("2026-10-24T10:00:00Z") // Saturday, 12:00 CEST
	ctx := context.Background()
	cat := store.NewBucket(w.Desired, store.New[capnv1.KubernetesVersions]())
	if _, err := cat.Create(ctx, keys.K8sVersionsDefault, &capnv1.KubernetesVersions{ApiVersion: "capn.dev/v1alpha1", Kind: "KubernetesVersions",
		Metadata: &capnv1.ObjectMeta{Name: "default"}, Spec: &capnv1.KubernetesVersionsSpec{Versions: []*capnv1.KubernetesVersion{
			{Version: "v1.33.4", Classification: "deprecated"}, {Version: "v1.33.6", Classification: "supported"}, {Version: "v1.34.2"}}}}); err != nil {
		t.Fatal(err)
	}
	w.StartService(harness.Maintenance, maintenance.New(maintenance.Config{Now: clk.Now, Resync: 50 * time.Millisecond}))
	w.Apply(office)
	w.WaitReady("office", 60*time.Second)

	natstest.WaitFor(t, 30*time.Second, "the status to say the patch waits for Sunday 00:30Z", func() bool {
		m := w.ClusterStatus("office").GetMaintenance()
		return len(m.GetWaiting()) == 1 && m.GetWaiting()[0].GetTo() == "v1.33.6" &&
			m.GetNextWindowOpen().AsTime().Equal(time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC))
	})
	versions := func() map[string]string {
		out := map[string]string{}
		ms, err := w.Machines.List(ctx, keys.MachinesOf("office"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			out[m.Key] = m.Value.GetSpec().GetVersion()
		}
		return out
	}
	for k, v := range versions() {
		if v != "v1.33.4" {
			t.Fatalf("%s runs %s before the window", k, v)
		}
	}

	clk.set("2026-10-24T17:00:00Z") // 19:00 CEST
	natstest.WaitFor(t, 60*time.Second, "office Hibernated at 19:00 CEST", func() bool {
		st := w.ClusterStatus("office")
		return st.GetPhase() == "Hibernated" && st.GetHibernation().GetNextTransition().AsTime().Equal(time.Date(2026, 10, 25, 6, 0, 0, 0, time.UTC))
	})

	clk.set("2026-10-25T00:30:00Z") // 02:30 CEST: the window opens while it sleeps
	natstest.WaitFor(t, 30*time.Second, "the patch applied in the window", func() bool {
		c, _, err := w.Clusters.Get(ctx, keys.Cluster("office"))
		return err == nil && c.GetSpec().GetKubernetesVersion() == "v1.33.6" && c.GetSpec().GetHibernated()
	})
	clk.set("2026-10-25T05:00:00Z") // 06:00 CET: a naive 12 hours, still asleep
	natstest.WaitFor(t, 30*time.Second, "the window to have closed", func() bool {
		m := w.ClusterStatus("office").GetMaintenance()
		return !m.GetWindowOpen() && m.GetLastApplied() == "AutoPatch v1.33.4 → v1.33.6"
	})
	if st := w.ClusterStatus("office"); st.GetPhase() != "Hibernated" {
		t.Fatalf("phase %s at 06:00 CET: the wake is at 07:00", st.GetPhase())
	}

	clk.set("2026-10-25T06:00:00Z") // 07:00 CET
	w.WaitReady("office", 90*time.Second)
	natstest.WaitFor(t, 90*time.Second, "every machine on v1.33.6", func() bool {
		vs := versions()
		for _, v := range vs {
			if v != "v1.33.6" {
				return false
			}
		}
		return len(vs) == 3 && w.IsReady("office")
	})
}
