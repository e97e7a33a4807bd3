package sim

import (
	"container/heap"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/daemon"
)

func TestRollIsDeterministicAndSpread(t *testing.T) {
	below := 0
	for i := range 1000 {
		m := "m" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		r := roll(42, "create", "c1", m)
		if r < 0 || r >= 1 {
			t.Fatalf("roll = %v", r)
		}
		if r != roll(42, "create", "c1", m) {
			t.Fatal("roll is not deterministic")
		}
		if r < 0.3 {
			below++
		}
	}
	if below < 230 || below > 370 {
		t.Errorf("%d of 1000 rolls below 0.3", below)
	}
	if roll(1, "create", "c1", "m1") == roll(2, "create", "c1", "m1") || roll(1, "create", "c1", "m1") == roll(1, "vanish", "c1", "m1") {
		t.Error("seed or choice does not change the roll")
	}
	if p := clusterPort("c1"); p < 30000 || p >= 60000 || p != clusterPort("c1") {
		t.Errorf("clusterPort = %d", p)
	}
}

func TestMessageKeepsVersion(t *testing.T) {
	for _, state := range []capnv1.InfraState{sdk.StateCreating, sdk.StateRunning, sdk.StateStopped} {
		for _, v := range []string{"v1.33.1", "v1.34.0-rc.1", ""} {
			if got := versionOf(message(state, v)); got != v {
				t.Errorf("versionOf(message(%s, %q)) = %q", state.Wire(), v, got)
			}
		}
	}
}

func TestAddresses(t *testing.T) {
	for _, n := range []uint32{1, 255, 256, 70000} {
		if got := ipIndex(ipOf(n)); got != n {
			t.Errorf("ipIndex(ipOf(%d)) = %d (%s)", n, got, ipOf(n))
		}
	}
	if ipIndex("192.168.0.1") != 0 || ipIndex("nope") != 0 {
		t.Error("foreign addresses are not ignored")
	}
}

func TestScheduleOrder(t *testing.T) {
	var s schedule
	t0 := time.Unix(0, 0)
	for _, d := range []int{5, 1, 4, 2, 3} {
		heap.Push(&s, entry{at: t0.Add(time.Duration(d) * time.Second), key: "k"})
	}
	var prev time.Time
	for s.Len() > 0 {
		e := heap.Pop(&s).(entry)
		if e.at.Before(prev) {
			t.Fatal("out of order")
		}
		prev = e.at
	}
}

func TestAdoptTakesBackOnlyWhatExists(t *testing.T) {
	p, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(m string, state capnv1.InfraState) *capnv1.InfraMachine {
		return &capnv1.InfraMachine{
			Cluster: "c1", Machine: m, State: state.Wire(), ProviderId: ProviderID("c1", m),
			Addresses: []*capnv1.Address{{Type: "InternalIP", Address: "10.0.0.7"}},
			Message:   message(state, "v1.33.1"),
		}
	}
	machines := []*capnv1.InfraMachine{
		rec("creating", sdk.StateCreating), rec("running", sdk.StateRunning), rec("stopped", sdk.StateStopped),
		rec("deleting", sdk.StateDeleting), rec("deleted", sdk.StateDeleted), rec("failed", sdk.StateFailed),
	}
	if err := p.Adopt(t.Context(), machines, []*capnv1.InfraCluster{{Cluster: "c1", Ready: true}}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	list, _ := p.List(t.Context())
	for _, m := range list {
		got[m.GetMachine()] = m.GetState()
	}
	want := map[string]string{"creating": sdk.StateCreating.Wire(), "running": sdk.StateRunning.Wire(), "stopped": sdk.StateStopped.Wire()}
	if len(got) != len(want) {
		t.Errorf("adopted %v, want %v", got, want)
	}
	for m, s := range want {
		if got[m] != s {
			t.Errorf("%s adopted as %q, want %q", m, got[m], s)
		}
	}
	if p.machines[key("c1", "running")].version != "v1.33.1" {
		t.Error("the version was not recovered from the message")
	}
	if p.sched.Len() != 2 { // the boot of creating, the heartbeat of running
		t.Errorf("%d scheduled entries, want 2", p.sched.Len())
	}
	m, err := p.CreateMachine(t.Context(), createReq("c1", "new", "v1.33.1"))
	if err != nil || !hasAddress(m, "InternalIP", "10.0.0.8") {
		t.Errorf("a new machine after adoption: %v, %v", m, err)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want []string
	}{
		{"zero", Options{}, nil},
		{"defaults", DefaultOptions(), nil},
		{"everything wrong", Options{BootLatency: -1, BootJitter: -1, CreateFailureRate: 2, VanishRate: 0.5, HeartbeatEvery: time.Millisecond},
			[]string{"sim-boot-latency", "sim-boot-jitter", "sim-create-failure-rate", "sim-vanish-after", "sim-heartbeat-every"}},
		{"negative rate", Options{VanishRate: -0.1}, []string{"sim-vanish-rate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.Validate()
			if (err != nil) != (len(tt.want) > 0) {
				t.Fatalf("Validate = %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not mention %s", err, w)
				}
			}
		})
	}
}

func TestFlags(t *testing.T) {
	s := NewService(DefaultOptions(), sdk.Options{})
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	daemon.BindFlags(fs, s.Flags()...)
	if err := fs.Parse([]string{"--sim-boot-latency=5s", "--sim-create-failure-rate=0.25"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"CAPN_SIM_BOOT_LATENCY": "9s", "CAPN_SIM_SEED": "3", "CAPN_PROVIDER_CONCURRENCY": "2"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := daemon.ApplyFlagEnv(fs, lookup, s.Flags()...); err != nil {
		t.Fatal(err)
	}
	if s.Sim.BootLatency != 5*time.Second || s.Sim.CreateFailureRate != 0.25 || s.Sim.Seed != 3 ||
		s.Sim.BootJitter != time.Second || s.Provider.Concurrency != 2 {
		t.Errorf("options = %+v %+v", s.Sim, s.Provider)
	}
	if err := s.Validate(); err != nil {
		t.Error(err)
	}
	if err := fs.Parse([]string{"--sim-vanish-rate=lots"}); err == nil {
		t.Error("a bad rate parsed")
	}
}
