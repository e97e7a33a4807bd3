package sim

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func TestCreateTwiceMakesOneMachine(t *testing.T) {
	tests := []struct {
		name string
		ids  []string
	}{
		{"same event id", []string{"create-a", "create-a"}},
		{"different event ids", []string{"create-a", "create-b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := sdktest.New(t)
			p, _ := start(t, env, Options{})
			for _, id := range tt.ids {
				env.Send(Name, sdk.KindMachine, "create", id, createReq("c1", "m1", "v1.33.1"))
			}
			m := env.WaitState(Name, "c1", "m1", sdk.StateRunning)
			env.WaitDrained()

			if list, _ := p.List(t.Context()); len(list) != 1 {
				t.Errorf("the sim has %d machines, want 1", len(list))
			}
			if keys := env.Keys("infra.sim."); len(keys) != 1 {
				t.Errorf("observed keys = %v", keys)
			}
			if m.GetProviderId() != "sim://c1/m1" || m.GetProvider() != Name {
				t.Errorf("record = %v", m)
			}
			if !hasAddress(m, "InternalIP", "10.0.0.1") || !hasAddress(m, "Hostname", "m1") {
				t.Errorf("addresses = %v", m.GetAddresses())
			}
			var hb *capnv1.NodeHeartbeat
			var id string
			natstest.WaitFor(t, sdktest.Timeout, "a heartbeat", func() bool {
				var ok bool
				hb, id, ok = env.LastHeartbeat("c1", "m1")
				return ok
			})
			if !hb.GetReady() || hb.GetKubeletVersion() != "v1.33.1" || hb.GetNodeName() != "m1" ||
				hb.GetCluster() != "c1" || hb.GetMachine() != "m1" || hb.GetTime() == nil {
				t.Errorf("heartbeat = %v", hb)
			}
			if !strings.HasPrefix(id, "heartbeat.c1.m1.") {
				t.Errorf("heartbeat id = %q", id)
			}
		})
	}
}

func hasAddress(m *capnv1.InfraMachine, typ, addr string) bool {
	for _, a := range m.GetAddresses() {
		if a.GetType() == typ && a.GetAddress() == addr {
			return true
		}
	}
	return false
}

func TestBootLatencyAndHeartbeats(t *testing.T) {
	env := sdktest.New(t)
	start(t, env, Options{BootLatency: 300 * time.Millisecond, HeartbeatEvery: 50 * time.Millisecond})
	create(env, "c1", "m1", "v1.34.0")
	creating := env.WaitState(Name, "c1", "m1", sdk.StateCreating)
	if !strings.Contains(creating.GetMessage(), "v1.34.0") {
		t.Errorf("message = %q", creating.GetMessage())
	}
	if n := beats(env, "c1", "m1"); n != 0 {
		t.Errorf("%d heartbeats before the machine booted", n)
	}
	running := env.WaitState(Name, "c1", "m1", sdk.StateRunning)
	if !running.GetUpdated().AsTime().After(creating.GetUpdated().AsTime()) {
		t.Error("updated did not move forward")
	}
	waitNewBeats(env, "c1", "m1", 3)
}

func TestDeleteMachine(t *testing.T) {
	env := sdktest.New(t)
	p, _ := start(t, env, Options{})
	env.Send(Name, sdk.KindMachine, "delete", "delete-missing", &capnv1.DeleteMachine{Cluster: "c1", Machine: "nope"})
	env.WaitDrained()
	if keys := env.Keys("infra.sim."); len(keys) != 0 {
		t.Fatalf("deleting a missing machine left %v", keys)
	}

	create(env, "c1", "m1", "v1.33.1")
	env.WaitState(Name, "c1", "m1", sdk.StateRunning)
	env.Send(Name, sdk.KindMachine, "delete", "delete-m1", &capnv1.DeleteMachine{Cluster: "c1", Machine: "m1"})
	env.WaitNoMachine(Name, "c1", "m1")
	if list, _ := p.List(t.Context()); len(list) != 0 {
		t.Errorf("the sim still has %v", list)
	}
}

func TestVanish(t *testing.T) {
	tests := []struct {
		name   string
		opts   Options
		vanish func(env *sdktest.Env)
	}{
		{"test hook", Options{}, func(env *sdktest.Env) {
			env.Send(Name, sdk.KindMachine, VerbVanish, "vanish-m1", &capnv1.DeleteMachine{Cluster: "c1", Machine: "m1"})
		}},
		{"vanish rate", Options{VanishRate: 1, VanishAfter: 100 * time.Millisecond}, func(*sdktest.Env) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := sdktest.New(t)
			p, _ := start(t, env, tt.opts)
			create(env, "c1", "m1", "v1.33.1")
			env.WaitState(Name, "c1", "m1", sdk.StateRunning)
			tt.vanish(env)

			d := env.WaitDrift("c1", "m1", sdk.DriftGone)
			if d.GetProvider() != Name || !strings.Contains(d.GetMessage(), "sim://c1/m1") {
				t.Errorf("drift = %v", d)
			}
			m := env.WaitState(Name, "c1", "m1", sdk.StateDeleted)
			if m.GetMessage() != sdk.MessageGone || m.GetProviderId() != "sim://c1/m1" {
				t.Errorf("record = %v", m)
			}
			if _, err := p.Describe(t.Context(), "c1", "m1"); err == nil {
				t.Error("the machine still exists")
			}
			// The core then deletes it: the record goes.
			env.Send(Name, sdk.KindMachine, "delete", "delete-m1", &capnv1.DeleteMachine{Cluster: "c1", Machine: "m1"})
			env.WaitNoMachine(Name, "c1", "m1")
		})
	}
}

func TestRestartKeepsMachines(t *testing.T) {
	env := sdktest.New(t)
	opts := Options{HeartbeatEvery: 50 * time.Millisecond}
	_, stop := start(t, env, opts)
	env.Send(Name, sdk.KindCluster, "ensure", "ensure-c1", &capnv1.EnsureClusterInfra{Cluster: "c1"})
	for _, m := range []string{"m1", "m2", "m3"} {
		create(env, "c1", m, "v1.33.1")
	}
	before := map[string]*capnv1.InfraMachine{}
	for _, m := range []string{"m1", "m2", "m3"} {
		before[m] = env.WaitState(Name, "c1", m, sdk.StateRunning)
	}
	power(env, "c1", "m3", sdk.ActionStop)
	before["m3"] = env.WaitState(Name, "c1", "m3", sdk.StateStopped)
	env.WaitDrained()
	stop()
	if _, ok := env.Announcement(Name); ok {
		t.Fatal("announcement left after a clean stop")
	}

	p, _ := start(t, env, opts)
	list, _ := p.List(t.Context())
	if len(list) != 3 {
		t.Fatalf("after a restart the sim has %d machines, want 3", len(list))
	}
	for _, m := range list {
		b := before[m.GetMachine()]
		if m.GetProviderId() != b.GetProviderId() || m.GetState() != b.GetState() || !hasAddress(m, "InternalIP", b.GetAddresses()[0].GetAddress()) {
			t.Errorf("adopted %v, had %v", m, b)
		}
	}
	// A create redelivered after the restart does not duplicate; a new
	// machine gets a new address.
	env.Send(Name, sdk.KindMachine, "create", "create-again", createReq("c1", "m1", "v1.33.1"))
	create(env, "c1", "m4", "v1.33.1")
	m4 := env.WaitState(Name, "c1", "m4", sdk.StateRunning)
	env.WaitDrained()
	if list, _ := p.List(t.Context()); len(list) != 4 {
		t.Errorf("%d machines, want 4", len(list))
	}
	if !hasAddress(m4, "InternalIP", "10.0.0.4") {
		t.Errorf("new machine's addresses = %v", m4.GetAddresses())
	}
	// The running nodes report again, with their version; the stopped one stays stopped.
	waitNewBeats(env, "c1", "m1", 2)
	hb, _, _ := env.LastHeartbeat("c1", "m1")
	if hb.GetKubeletVersion() != "v1.33.1" {
		t.Errorf("heartbeat after restart = %v", hb)
	}
	if m3, _ := env.Machine(Name, "c1", "m3"); m3.GetStateValue() != sdk.StateStopped {
		t.Errorf("m3 = %v", m3)
	}
	if ic, ok := env.Cluster(Name, "c1"); !ok || !ic.GetReady() {
		t.Errorf("cluster infra after restart = %v", ic)
	}
}

func TestStopStartReboot(t *testing.T) {
	env := sdktest.New(t)
	start(t, env, Options{HeartbeatEvery: 50 * time.Millisecond})
	create(env, "c1", "m1", "v1.33.1")
	create(env, "c1", "clock", "v1.33.1") // its heartbeats show time passing
	running := env.WaitState(Name, "c1", "m1", sdk.StateRunning)
	waitNewBeats(env, "c1", "m1", 1)

	power(env, "c1", "m1", sdk.ActionStop)
	stopped := env.WaitState(Name, "c1", "m1", sdk.StateStopped)
	sameIdentity(t, running, stopped)
	silent := lastBeatID(env, "c1", "m1")
	waitNewBeats(env, "c1", "clock", 3)
	if id := lastBeatID(env, "c1", "m1"); id != silent {
		t.Errorf("a stopped machine sent heartbeat %s", id)
	}

	power(env, "c1", "m1", sdk.ActionStart)
	started := env.WaitState(Name, "c1", "m1", sdk.StateRunning)
	sameIdentity(t, running, started)
	waitNewBeats(env, "c1", "m1", 2)

	power(env, "c1", "m1", sdk.ActionReboot)
	env.WaitDrained()
	waitNewBeats(env, "c1", "m1", 2)
	if m, _ := env.Machine(Name, "c1", "m1"); m.GetStateValue() != sdk.StateRunning {
		t.Errorf("after reboot: %v", m)
	}
}

func sameIdentity(t *testing.T, a, b *capnv1.InfraMachine) {
	t.Helper()
	if a.GetProviderId() != b.GetProviderId() || fmt.Sprint(a.GetAddresses()) != fmt.Sprint(b.GetAddresses()) {
		t.Errorf("identity changed: %v %v -> %v %v", a.GetProviderId(), a.GetAddresses(), b.GetProviderId(), b.GetAddresses())
	}
}

func TestCreateFailureInjection(t *testing.T) {
	env := sdktest.New(t)
	const seed, rate = 7, 0.5
	start(t, env, Options{CreateFailureRate: rate, Seed: seed})
	failed := 0
	for i := range 10 {
		m := fmt.Sprintf("m%d", i)
		create(env, "c1", m, "v1.33.1")
		want := sdk.StateRunning
		if roll(seed, "create", "c1", m) < rate {
			want, failed = sdk.StateFailed, failed+1
		}
		got := env.WaitMachine(Name, "c1", m, "a final state", func(m *capnv1.InfraMachine) bool {
			return m.GetStateValue() == sdk.StateRunning || m.GetStateValue() == sdk.StateFailed
		})
		if got.GetStateValue() != want {
			t.Errorf("%s is %s, want %s", m, got.GetState(), want.Wire())
		}
		if want == sdk.StateFailed && !strings.Contains(got.GetMessage(), "injected create failure") {
			t.Errorf("%s failed with %q", m, got.GetMessage())
		}
	}
	if failed == 0 || failed == 10 {
		t.Errorf("%d of 10 failed at rate %g: the test proves nothing", failed, rate)
	}
}

func TestClusterInfra(t *testing.T) {
	env := sdktest.New(t)
	start(t, env, Options{})
	for _, id := range []string{"ensure-1", "ensure-2"} {
		env.Send(Name, sdk.KindCluster, "ensure", id, &capnv1.EnsureClusterInfra{Cluster: "c1"})
	}
	env.WaitDrained()
	ic, ok := env.Cluster(Name, "c1")
	if !ok || !ic.GetReady() || ic.GetControlPlaneEndpoint().GetHost() != "127.0.0.1" ||
		ic.GetControlPlaneEndpoint().GetPort() != clusterPort("c1") {
		t.Fatalf("cluster infra = %v", ic)
	}
	env.Send(Name, sdk.KindCluster, "delete", "delete-1", &capnv1.DeleteClusterInfra{Cluster: "c1"})
	natstest.WaitFor(t, sdktest.Timeout, "cluster infra deleted", func() bool {
		_, ok := env.Cluster(Name, "c1")
		return !ok
	})
}

func TestAnnouncement(t *testing.T) {
	env := sdktest.New(t)
	_, stop := start(t, env, Options{})
	a, _ := env.Announcement(Name)
	if a.GetName() != Name || strings.Join(a.GetCapabilities(), ",") != "stop-start,reboot" || !sdk.Alive(a, time.Now()) ||
		strings.Join(a.GetOperatingSystems(), ",") != "linux,windows" {
		t.Errorf("announcement = %v", a)
	}
	stop()
	if _, ok := env.Announcement(Name); ok {
		t.Error("announcement left after a clean shutdown")
	}
}

// TestManyMachinesOneGoroutine: a machine costs one entry in the
// scheduler's heap, not a goroutine or a timer. On a fake clock, n
// machines are n entries through boot and heartbeats, each wake-up
// handles every machine due in it, and each node beats once per
// HeartbeatEvery; creating them and running the scheduler's steps starts
// no goroutine. Through NATS, every node reports.
func TestManyMachinesOneGoroutine(t *testing.T) {
	const n = 200
	opts := Options{BootLatency: time.Second, BootJitter: 200 * time.Millisecond, HeartbeatEvery: time.Second}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	p.now = func() time.Time { return now }
	before := simGoroutines()
	for i := range n {
		if _, err := p.CreateMachine(context.Background(), createReq("c1", fmt.Sprintf("m%d", i), "v1.33.1")); err != nil {
			t.Fatal(err)
		}
	}
	if len(p.sched) != n {
		t.Fatalf("%d machines are %d scheduler entries, want one each", n, len(p.sched))
	}
	// Every boot is due once BootLatency+BootJitter passed: one wake-up
	// boots them all, and each node's first heartbeat goes with its boot.
	now = now.Add(opts.BootLatency + opts.BootJitter)
	w, next := p.due(now)
	if got := machinesOf(w); len(w.reports) != n || got != n {
		t.Fatalf("the boot wake-up reported %d machines and beat %d distinct nodes, want %d of each", len(w.reports), got, n)
	}
	if len(p.sched) != n || !next.After(now.Add(Resolution)) {
		t.Fatalf("after the boots: %d entries, next at %s (now %s), want %d entries, none due", len(p.sched), next, now, n)
	}
	// Then every HeartbeatEvery, every node beats once, and only once.
	for round := range 3 {
		now = now.Add(opts.HeartbeatEvery)
		w, _ := p.due(now)
		if len(w.reports) != 0 || len(w.beats) != n || machinesOf(w) != n || len(p.sched) != n {
			t.Fatalf("heartbeat round %d: %d reports, %d beats of %d nodes, %d entries; want 0, %d, %d, %d",
				round, len(w.reports), len(w.beats), machinesOf(w), len(p.sched), n, n, n)
		}
	}
	if after := simGoroutines(); after != before {
		t.Errorf("the simulation's code started goroutines: %d before the machines, %d after", before, after)
	}

	// Through NATS: every node reports (the health stream has a subject
	// for each machine's heartbeats).
	env := sdktest.New(t)
	start(t, env, Options{BootJitter: 200 * time.Millisecond, HeartbeatEvery: 10 * time.Second})
	for i := range n {
		create(env, "c2", fmt.Sprintf("m%d", i), "v1.33.1")
	}
	natstest.WaitFor(t, 2*time.Minute, "every node reports", func() bool {
		return subjects(t, env, events.StreamHealth, events.HealthSubject("c2", "*", HeartbeatKind)) == n
	})
}

// subjects is the number of distinct subjects matching filter in stream.
func subjects(t *testing.T, env *sdktest.Env, stream, filter string) int {
	t.Helper()
	s, err := env.JS.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	return len(info.State.Subjects)
}

// machinesOf is the number of distinct machines w beats for.
func machinesOf(w work) int {
	seen := map[string]bool{}
	for _, b := range w.beats {
		seen[b.cluster+"/"+b.machine] = true
	}
	return len(seen)
}

// simGoroutines counts the goroutines this package's code started (the
// scheduler itself is started by the SDK; its report workers end with
// each wake-up).
func simGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "\ncreated by github.com/capn-dev/capn/providers/sim.") {
			count++
		}
	}
	return count
}

// A machine handed over (orphaned here, adopted by the sim of the
// deployment it moves to — here the same one, after) keeps its identity:
// orphaning stops its heartbeats and deletes nothing; adopting its record
// brings it back with the same provider id and address, beating again.
func TestOrphanThenAdopt(t *testing.T) {
	env := sdktest.New(t)
	p, _ := start(t, env, Options{HeartbeatEvery: 50 * time.Millisecond})
	env.Send(Name, sdk.KindCluster, "ensure", "ensure-c1", &capnv1.EnsureClusterInfra{Cluster: "c1"})
	create(env, "c1", "m1", "v1.33.1")
	before := env.WaitState(Name, "c1", "m1", sdk.StateRunning)
	var cluster *capnv1.InfraCluster
	natstest.WaitFor(t, sdktest.Timeout, "the cluster's record", func() bool {
		var ok bool
		cluster, ok = env.Cluster(Name, "c1")
		return ok
	})
	waitNewBeats(env, "c1", "m1", 1)

	env.Send(Name, sdk.KindMachine, "orphan", "orphan-m1", &capnv1.DeleteMachine{Cluster: "c1", Machine: "m1"})
	env.Send(Name, sdk.KindCluster, "orphan", "orphan-c1", &capnv1.DeleteClusterInfra{Cluster: "c1"})
	env.WaitNoMachine(Name, "c1", "m1")
	env.WaitDrained()
	if list, _ := p.List(t.Context()); len(list) != 0 {
		t.Fatalf("the sim still manages %v", list)
	}
	if _, ok := env.Cluster(Name, "c1"); ok {
		t.Error("the orphaned cluster's record is still there")
	}
	last := lastBeatID(env, "c1", "m1")
	// Silent: three heartbeat periods pass without a beat.
	deadline := time.Now().Add(150 * time.Millisecond)
	natstest.WaitFor(t, time.Second, "three heartbeat periods", func() bool { return time.Now().After(deadline) })
	if got := lastBeatID(env, "c1", "m1"); got != last {
		t.Errorf("an orphaned machine still beats: %s after %s", got, last)
	}

	env.Send(Name, sdk.KindCluster, "adopt", "adopt-c1", &capnv1.AdoptClusterInfra{Cluster: "c1", Record: cluster})
	env.Send(Name, sdk.KindMachine, "adopt", "adopt-m1", &capnv1.AdoptMachine{Cluster: "c1", Machine: "m1", Record: before})
	after := env.WaitState(Name, "c1", "m1", sdk.StateRunning)
	if after.GetProviderId() != before.GetProviderId() || !hasAddress(after, "InternalIP", before.GetAddresses()[0].GetAddress()) {
		t.Errorf("adopted %v, had %v", after, before)
	}
	waitNewBeats(env, "c1", "m1", 2)
	if ic, ok := env.Cluster(Name, "c1"); !ok || ic.GetControlPlaneEndpoint().GetPort() != cluster.GetControlPlaneEndpoint().GetPort() {
		t.Errorf("cluster after the adopt: %v, had %v", ic, cluster)
	}
}
