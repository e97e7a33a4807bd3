package maintenance

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // Europe/Berlin on any machine

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/daemon"
)

// fakeClock is the service's time source in tests: it moves only when
// the test advances it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

type world struct {
	t        *testing.T
	clock    *fakeClock
	clusters *store.Bucket[*capnv1.Cluster]
	records  *store.Bucket[*capnv1.MaintenanceRecord]
	catalog  *store.Bucket[*capnv1.KubernetesVersions]
	wakeups  atomic.Int64
}

// start runs the maintenance service on a fresh embedded server with a
// fake clock at now, deciding every cluster again every 20ms.
func start(t *testing.T, now time.Time) *world {
	t.Helper()
	ns := natstest.Start(t)
	nc, js := ns.Connect(t)
	ctx := context.Background()
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, clock: &fakeClock{now: now}}
	des, err := js.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	w.clusters = store.NewBucket(des, store.New[capnv1.Cluster]())
	w.catalog = store.NewBucket(des, store.New[capnv1.KubernetesVersions]())
	w.records = store.NewBucket(obs, store.New[capnv1.MaintenanceRecord]())
	svc := New(Config{Now: w.clock.Now, Resync: 20 * time.Millisecond, OnReconcile: func(string) { w.wakeups.Add(1) }})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	go func() {
		done <- daemon.Run(rctx, daemon.Config{Name: Name, HTTPAddr: daemon.HTTPOff, ShutdownTimeout: 5 * time.Second},
			svc, daemon.WithConn(nc), daemon.WithoutHTTP(), daemon.WithLogger(log))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("maintenance service: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the maintenance service did not stop")
		}
	})
	return w
}

func (w *world) cluster() *capnv1.Cluster {
	w.t.Helper()
	c, _, err := w.clusters.Get(context.Background(), keys.Cluster("demo"))
	if err != nil {
		w.t.Fatal(err)
	}
	return c
}

func (w *world) record() *capnv1.MaintenanceRecord {
	r, _, err := w.records.Get(context.Background(), keys.Maintenance("demo"))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// edit changes the cluster as a user does: a compare-and-set, its
// generation bumped.
func (w *world) edit(fn func(*capnv1.ClusterSpec)) {
	w.t.Helper()
	if _, _, err := w.clusters.Mutate(context.Background(), keys.Cluster("demo"), func(c *capnv1.Cluster, _ bool) (*capnv1.Cluster, error) {
		fn(c.Spec)
		c.Metadata.Generation++
		return c, nil
	}); err != nil {
		w.t.Fatal(err)
	}
}

// advance moves the clock and waits until the service decided twice
// after it (each decision reads the clock after its wake-up is counted).
func (w *world) advance(to string) {
	w.t.Helper()
	w.clock.Set(mustUTC(to))
	n := w.wakeups.Load()
	testkit.WaitFor(w.t, 10*time.Second, "the service to decide again after "+to, func() bool { return w.wakeups.Load() >= n+2 })
}

func mustUTC(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func demoCluster() *capnv1.Cluster {
	c := &capnv1.Cluster{ApiVersion: manifest.APIVersion, Kind: manifest.KindCluster,
		Metadata: &capnv1.ObjectMeta{Name: "demo", Uid: "u-demo", Generation: 1},
		Spec: &capnv1.ClusterSpec{
			KubernetesVersion: "v1.34.2",
			ControlPlane:      &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 1},
			WorkerPools: []*capnv1.WorkerPool{
				{Name: "md-0", Provider: "sim", Replicas: 2, Version: "v1.34.2"}, // follows the control plane
				{Name: "old", Provider: "sim", Replicas: 1, Version: "v1.33.9"},  // lags on purpose: left alone
			},
			// Sundays 02:30-04:00 Berlin; 25 October 2026 is the night the
			// clocks fall back, so 02:30 CEST is 00:30Z.
			Maintenance: &capnv1.MaintenanceSpec{AutoPatch: true, Windows: []*capnv1.MaintenanceWindow{
				{Days: []string{"Sun"}, Start: "02:30", End: "04:00", TimeZone: "Europe/Berlin"}}},
			// Office hours: asleep 19:00 to 07:00 Berlin time.
			Hibernation: &capnv1.HibernationSpec{Schedules: []*capnv1.HibernationSchedule{
				{Start: "0 19 * * *", End: "0 7 * * *", Location: "Europe/Berlin"}}},
		}}
	manifest.Default(c)
	return c
}

// An auto-patch waits for the window and is applied in it; the
// hibernation schedule hibernates and wakes on time across the autumn DST
// change; a manual wake holds until the next scheduled transition.
func TestAutoPatchWaitsForTheWindowAndSchedulesRunAcrossDST(t *testing.T) {
	w := start(t, mustUTC("2026-10-24T10:00:00Z")) // Saturday, 12:00 CEST
	ctx := context.Background()
	if _, err := w.catalog.Create(ctx, keys.K8sVersionsDefault, &capnv1.KubernetesVersions{ApiVersion: manifest.APIVersion, Kind: manifest.KindKubernetesVersions,
		Metadata: &capnv1.ObjectMeta{Name: "default"}, Spec: &capnv1.KubernetesVersionsSpec{Versions: []*capnv1.KubernetesVersion{
			{Version: "v1.34.2"}, {Version: "v1.34.5", Classification: "supported"}, {Version: "v1.34.6", Classification: "preview"}, {Version: "v1.35.0"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.clusters.Create(ctx, keys.Cluster("demo"), demoCluster()); err != nil {
		t.Fatal(err)
	}

	// Outside the window: the patch waits, and the record says for what
	// and until when; the schedule was first seen after this morning's
	// wake, so it acts from its next transition.
	testkit.WaitFor(t, 10*time.Second, "the auto-patch to wait for the window", func() bool {
		r := w.record()
		ws := r.GetMaintenance().GetWaiting()
		return len(ws) == 1 && ws[0].GetChange() == ChangeAutoPatch && ws[0].GetTo() == "v1.34.5" &&
			r.GetMaintenance().GetNextWindowOpen().AsTime().Equal(mustUTC("2026-10-25T00:30:00Z")) &&
			r.GetHibernation().GetNextTransition().AsTime().Equal(mustUTC("2026-10-24T17:00:00Z")) && r.GetHibernation().GetNextHibernates()
	})
	if v := w.cluster().GetSpec().GetKubernetesVersion(); v != "v1.34.2" {
		t.Fatalf("patched outside the window: %s", v)
	}

	// 19:00 CEST: the schedule hibernates the cluster; the next
	// transition is 07:00 CET, after the clocks fell back: 06:00Z.
	w.advance("2026-10-24T16:59:00Z")
	if w.cluster().GetSpec().GetHibernated() {
		t.Fatal("hibernated a minute early")
	}
	w.clock.Set(mustUTC("2026-10-24T17:00:00Z"))
	testkit.WaitFor(t, 10*time.Second, "the schedule to hibernate the cluster at 19:00 CEST", func() bool {
		return w.cluster().GetSpec().GetHibernated() &&
			w.record().GetHibernation().GetNextTransition().AsTime().Equal(mustUTC("2026-10-25T06:00:00Z"))
	})
	gen := w.cluster().GetMetadata().GetGeneration()

	// 02:30 CEST (00:30Z), the first of the two 02:30s: the window opens
	// and the patch is applied — the control plane and the pool that
	// follows it, not the pool that lags.
	w.advance("2026-10-25T00:29:00Z")
	if v := w.cluster().GetSpec().GetKubernetesVersion(); v != "v1.34.2" {
		t.Fatalf("patched before the window: %s", v)
	}
	w.clock.Set(mustUTC("2026-10-25T00:30:00Z"))
	testkit.WaitFor(t, 10*time.Second, "the auto-patch in the window", func() bool {
		c := w.cluster()
		return c.GetSpec().GetKubernetesVersion() == "v1.34.5"
	})
	c := w.cluster()
	if c.Spec.WorkerPools[0].Version != "v1.34.5" || c.Spec.WorkerPools[1].Version != "v1.33.9" || c.Metadata.Generation <= gen {
		t.Errorf("pools %s, %s, generation %d (was %d): want v1.34.5, v1.33.9, bumped", c.Spec.WorkerPools[0].Version, c.Spec.WorkerPools[1].Version, c.Metadata.Generation, gen)
	}
	testkit.WaitFor(t, 10*time.Second, "the record to say what was applied", func() bool {
		m := w.record().GetMaintenance()
		return len(m.GetWaiting()) == 0 && m.GetWindowOpen() && m.GetLastApplied() == "AutoPatch v1.34.2 → v1.34.5" &&
			m.GetWindowCloses().AsTime().Equal(mustUTC("2026-10-25T03:00:00Z")) // 04:00 CET: the window ran 3 hours
	})

	// 06:00 CEST would be 04:00Z and a naive 12-hour schedule 05:00Z;
	// the wake is at 07:00 CET, 06:00Z.
	w.advance("2026-10-25T05:59:00Z")
	if !w.cluster().GetSpec().GetHibernated() {
		t.Fatal("woken before 07:00 CET")
	}
	w.clock.Set(mustUTC("2026-10-25T06:00:00Z"))
	testkit.WaitFor(t, 10*time.Second, "the schedule to wake the cluster at 07:00 CET", func() bool {
		return !w.cluster().GetSpec().GetHibernated()
	})

	// A manual hibernate at 10:00 holds against the schedule (the record
	// says so) until the schedule's next transition, 19:00 CET (18:00Z),
	// which hibernates anyway; a manual wake after it holds until 07:00.
	w.edit(func(s *capnv1.ClusterSpec) { s.Hibernated = true })
	w.advance("2026-10-25T09:00:00Z")
	testkit.WaitFor(t, 10*time.Second, "the record to show the override", func() bool {
		h := w.record().GetHibernation()
		return h.GetOverride() && h.GetNextTransition().AsTime().Equal(mustUTC("2026-10-25T18:00:00Z"))
	})
	w.edit(func(s *capnv1.ClusterSpec) { s.Hibernated = false }) // changed their mind: awake, as the schedule says
	w.advance("2026-10-25T12:00:00Z")
	if w.cluster().GetSpec().GetHibernated() || w.record().GetHibernation().GetOverride() {
		t.Fatal("awake as the schedule says: no override")
	}
	w.advance("2026-10-25T18:00:00Z")
	testkit.WaitFor(t, 10*time.Second, "the evening's hibernation", func() bool { return w.cluster().GetSpec().GetHibernated() })
	w.edit(func(s *capnv1.ClusterSpec) { s.Hibernated = false })
	w.advance("2026-10-25T23:00:00Z")
	w.advance("2026-10-26T05:59:00Z")
	if w.cluster().GetSpec().GetHibernated() {
		t.Fatal("the manual wake did not hold until the next transition")
	}
	if h := w.record().GetHibernation(); !h.GetOverride() || !h.GetNextTransition().AsTime().Equal(mustUTC("2026-10-26T06:00:00Z")) {
		t.Errorf("hibernation status %v: want the override until 06:00Z", h)
	}
}

// capn upgrade --respect-window records the wish in pending_version; the
// service applies it in the next window and clears it, and a catalogue
// patch that is newer than the wish wins.
func TestPendingUpgradeWaitsForTheWindow(t *testing.T) {
	w := start(t, mustUTC("2026-03-28T12:00:00Z")) // Saturday
	ctx := context.Background()
	c := demoCluster()
	c.Spec.Hibernation = nil
	c.Spec.Maintenance = &capnv1.MaintenanceSpec{PendingVersion: "v1.35.1", Windows: []*capnv1.MaintenanceWindow{
		// 02:30 does not exist on 29 March 2026 in Berlin: the window
		// opens when the gap ends, 03:00 CEST (01:00Z).
		{Days: []string{"Sun"}, Start: "02:30", End: "04:00", TimeZone: "Europe/Berlin"}}}
	if _, err := w.clusters.Create(ctx, keys.Cluster("demo"), c); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the upgrade to wait", func() bool {
		m := w.record().GetMaintenance()
		return len(m.GetWaiting()) == 1 && m.GetWaiting()[0].GetChange() == ChangeUpgrade && m.GetWaiting()[0].GetTo() == "v1.35.1" &&
			m.GetNextWindowOpen().AsTime().Equal(mustUTC("2026-03-29T01:00:00Z"))
	})
	w.advance("2026-03-29T00:59:59Z")
	if v := w.cluster().GetSpec().GetKubernetesVersion(); v != "v1.34.2" {
		t.Fatalf("upgraded before the window: %s", v)
	}
	w.clock.Set(mustUTC("2026-03-29T01:00:00Z"))
	testkit.WaitFor(t, 10*time.Second, "the upgrade in the window, the wish cleared", func() bool {
		s := w.cluster().GetSpec()
		return s.GetKubernetesVersion() == "v1.35.1" && s.GetMaintenance().GetPendingVersion() == ""
	})
	testkit.WaitFor(t, 10*time.Second, "the record to say the window closes at 04:00 CEST", func() bool {
		m := w.record().GetMaintenance()
		return m.GetWindowCloses().AsTime().Equal(mustUTC("2026-03-29T02:00:00Z")) && m.GetLastApplied() == "Upgrade v1.34.2 → v1.35.1" &&
			m.GetLastAppliedTime().AsTime().Equal(mustUTC("2026-03-29T01:00:00Z"))
	})
}

// A cluster that goes away takes its record with it.
func TestRecordFollowsTheCluster(t *testing.T) {
	w := start(t, mustUTC("2026-03-28T12:00:00Z"))
	ctx := context.Background()
	if _, err := w.clusters.Create(ctx, keys.Cluster("demo"), demoCluster()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "a record", func() bool { return w.record() != nil })
	_, rev, err := w.clusters.Get(ctx, keys.Cluster("demo"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.clusters.Delete(ctx, keys.Cluster("demo"), rev); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the record to go", func() bool { return w.record() == nil })
}
