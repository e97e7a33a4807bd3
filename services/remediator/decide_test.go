package remediator

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

type mopt func(*Machine)

func mach(name string, opts ...mopt) Machine {
	m := Machine{Name: name, UID: "u-" + name, Provider: "sim", Created: at(-time.Hour), Phase: capnv1.MachineRunning, CanReboot: true, HealthUpdated: at(-time.Hour)}
	for _, o := range opts {
		o(&m)
	}
	return m
}

func sick(typ string) mopt {
	return func(m *Machine) {
		m.Reasons = append(m.Reasons, &capnv1.Condition{Type: typ, Status: "False", Message: typ + " bad"})
		m.Since, m.HealthUpdated = at(-time.Minute), at(-time.Minute)
	}
}

func pool(name string, replicas int, ms ...Machine) Pool {
	p, _ := policy.Resolve(nil, name, policy.Default())
	return Pool{Name: name, ControlPlane: name == policy.ControlPlanePool, Replicas: replicas, Policy: p, Machines: ms}
}

func withMax(p Pool, s string) Pool { p.Policy.MaxUnhealthy = policy.MustThreshold(s); return p }

func withHistory(p Pool, recs ...*capnv1.RemediationRecord) Pool {
	p.Status = &capnv1.RemediationStatus{Pool: p.Name, History: recs}
	return p
}

func rec(machine, action, outcome string, d time.Duration) *capnv1.RemediationRecord {
	return &capnv1.RemediationRecord{Machine: machine, Action: action, Outcome: outcome, Time: timestamppb.New(at(d))}
}

func blockedOf(st *capnv1.RemediationStatus) *capnv1.Condition { return blocked(st) }

func TestDecide(t *testing.T) {
	tests := []struct {
		name        string
		paused      bool
		cpInit      bool
		pool        Pool
		wantActs    []string // kind:machine
		wantBlocked string   // "" for not blocked
		wantMsg     string
		wantRecord  string // outcome of the first record, if any
	}{
		{"healthy pool: nothing", false, true, pool("md-0", 3, mach("a"), mach("b"), mach("c")), nil, "", "0 of 3 machines unhealthy", ""},
		{"kernel deadlock: reboot first", false, true, pool("md-0", 3, mach("a", sick("KernelDeadlock")), mach("b"), mach("c")),
			[]string{"reboot:a"}, "", "1 of 3", OutcomeInProgress},
		{"provider cannot reboot: replace", false, true, pool("md-0", 3, mach("a", sick("KernelDeadlock"), func(m *Machine) { m.CanReboot = false }), mach("b"), mach("c")),
			[]string{"replace:a"}, "", "", OutcomeInProgress},
		{"infrastructure gone: replace", false, true, pool("md-0", 3, mach("a", sick("InfrastructureGone")), mach("b"), mach("c")),
			[]string{"replace:a"}, "", "", ""},
		{"node never started: replace", false, true, pool("md-0", 3, mach("a", sick("NodeStartupTimeout")), mach("b"), mach("c")),
			[]string{"replace:a"}, "", "", ""},
		{"half the pool: circuit breaker", false, true, pool("md-0", 4, mach("a", sick("Ready")), mach("b", sick("Ready")), mach("c"), mach("d")),
			nil, BlockedTooManyUnhealthy, "2 of 4 machines unhealthy (50%), more than maxUnhealthy 40% of 4 = 1 allows", ""},
		{"count allows two, one at a time", false, true, withMax(pool("md-0", 4, mach("a", sick("Ready")), mach("b", sick("Ready")), mach("c"), mach("d")), "2"),
			[]string{"reboot:a"}, "", "", ""},
		{"one in flight: wait", false, true, withHistory(withMax(pool("md-0", 4, mach("a", sick("Ready")), mach("b", sick("Ready")), mach("c"), mach("d")), "2"),
			rec("a", ActionReboot, OutcomeInProgress, -10*time.Second)),
			[]string{"reboot:a"}, BlockedMaxInFlight, "1 of at most 1 repairs in flight", OutcomeInProgress},
		{"paused: nothing", true, true, pool("md-0", 3, mach("a", sick("Ready")), mach("b"), mach("c")), nil, BlockedPaused, "paused", ""},
		{"skip annotation", false, true, pool("md-0", 3, mach("a", sick("Ready"), func(m *Machine) { m.Skip = true }), mach("b"), mach("c")),
			nil, BlockedSkipped, "a", ""},
		{"failed machine: the planner's", false, true, pool("md-0", 3, mach("a", func(m *Machine) { m.Phase = capnv1.MachineFailed }), mach("b"), mach("c")),
			nil, "", "1 of 3 machines unhealthy", ""},
		{"reboot did not help: replace", false, true, withHistory(pool("md-0", 3, mach("a", sick("KernelDeadlock")), mach("b"), mach("c")),
			rec("a", ActionReboot, OutcomeInProgress, -6*time.Minute)),
			[]string{"replace:a"}, "", "", OutcomeFailed},
		{"reboot helped", false, true, withHistory(pool("md-0", 3, mach("a", func(m *Machine) { m.HealthUpdated = at(-time.Second) }), mach("b"), mach("c")),
			rec("a", ActionReboot, OutcomeInProgress, -time.Minute)),
			nil, "", "", OutcomeSucceeded},
		{"sick again soon after a good reboot: replace", false, true, withHistory(pool("md-0", 3, mach("a", sick("KernelDeadlock")), mach("b"), mach("c")),
			rec("a", ActionReboot, OutcomeSucceeded, -20*time.Minute)),
			[]string{"replace:a"}, "", "", OutcomeSucceeded},
		{"slot replaced recently: min healthy period", false, true, withHistory(pool("md-0", 3, mach("a", sick("NodeStartupTimeout"), func(m *Machine) { m.Created = at(-9 * time.Minute) }), mach("b"), mach("c")),
			rec("a", ActionReplace, OutcomeSucceeded, -10*time.Minute)),
			nil, BlockedMinHealthyPeriod, "a replaced a 10m0s ago", OutcomeSucceeded},
		{"replace under way: re-driven until deleting", false, true, withHistory(pool("md-0", 3, mach("a", sick("InfrastructureGone")), mach("b"), mach("c")),
			rec("a", ActionReplace, OutcomeInProgress, -time.Second)),
			[]string{"replace:a"}, "", "", OutcomeInProgress},
		{"replacement runs: succeeded", false, true, withHistory(pool("md-0", 3, mach("a", func(m *Machine) { m.Created = at(-time.Minute) }), mach("b"), mach("c")),
			rec("a", ActionReplace, OutcomeInProgress, -5*time.Minute)),
			nil, "", "", OutcomeSucceeded},
		{"control plane 3, one down: repaired", false, true, pool("control-plane", 3, mach("a", sick("Ready")), mach("b"), mach("c")),
			[]string{"reboot:a"}, "", "", ""},
		{"control plane 3, two down: quorum", false, true, withMax(pool("control-plane", 3, mach("a", sick("Ready")), mach("b", sick("Ready")), mach("c")), "100%"),
			nil, BlockedControlPlaneQuorum, "would leave 1 healthy of 2 control-plane members; etcd quorum needs 2", ""},
		{"control plane 5, two down: one repaired", false, true, withMax(pool("control-plane", 5, mach("a", sick("Ready")), mach("b", sick("Ready")), mach("c"), mach("d"), mach("e")), "100%"),
			[]string{"reboot:a"}, "", "", ""},
		{"control plane 1: no remediation once initialised", false, true, withMax(pool("control-plane", 1, mach("a", sick("Ready"))), "100%"),
			nil, BlockedControlPlaneQuorum, "would leave 0 healthy of 0", ""},
		{"control plane 1 before initialisation: repaired", false, false, withMax(pool("control-plane", 1, mach("a", sick("NodeStartupTimeout"))), "100%"),
			[]string{"replace:a"}, "", "", ""},
		{"control plane member deleting: one change at a time", false, true, withMax(pool("control-plane", 3, mach("a", sick("Ready")), mach("b"), mach("c"), mach("d", func(m *Machine) { m.Deleting = true })), "100%"),
			nil, BlockedControlPlaneBusy, "", ""},
		{"most broken first", false, true, withMax(pool("md-0", 5, mach("a", sick("KernelDeadlock")), mach("b", sick("InfrastructureGone")), mach("c"), mach("d"), mach("e")), "2"),
			[]string{"replace:b"}, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(Snapshot{Cluster: "c1", Paused: tt.paused, ControlPlaneInitialized: tt.cpInit, Pools: []Pool{tt.pool}, Now: t0}, Timing{})
			var acts []string
			for _, a := range d.Actions {
				acts = append(acts, a.Kind+":"+a.Machine)
			}
			if strings.Join(acts, ",") != strings.Join(tt.wantActs, ",") {
				t.Fatalf("actions %v, want %v", acts, tt.wantActs)
			}
			st := d.Statuses[0]
			c := blockedOf(st)
			wantStatus, wantReason := "False", NotBlocked
			if tt.wantBlocked != "" {
				wantStatus, wantReason = "True", tt.wantBlocked
			}
			if c.GetStatus() != wantStatus || c.GetReason() != wantReason {
				t.Fatalf("RemediationBlocked %s/%s (%s), want %s/%s", c.GetStatus(), c.GetReason(), c.GetMessage(), wantStatus, wantReason)
			}
			if !strings.Contains(c.GetMessage(), tt.wantMsg) {
				t.Fatalf("message %q does not say %q", c.GetMessage(), tt.wantMsg)
			}
			if tt.wantRecord != "" && (len(st.GetHistory()) == 0 || st.GetHistory()[0].GetOutcome() != tt.wantRecord) {
				t.Fatalf("first record %v, want outcome %s", st.GetHistory(), tt.wantRecord)
			}
			if again := Decide(Snapshot{Cluster: "c1", Paused: tt.paused, ControlPlaneInitialized: tt.cpInit, Pools: []Pool{tt.pool}, Now: t0}, Timing{}); len(again.Actions) != len(d.Actions) {
				t.Fatal("Decide is not deterministic")
			}
		})
	}
}

func TestDecideSettle(t *testing.T) {
	// Two verdicts a second apart: the first is not repaired before the
	// second is known, and then the breaker counts both.
	fresh := func(d time.Duration) mopt {
		return func(m *Machine) { m.HealthUpdated = at(d) }
	}
	p := pool("md-0", 4, mach("a", sick("Ready"), fresh(-time.Second)), mach("b"), mach("c"), mach("d"))
	d := Decide(Snapshot{Cluster: "c1", ControlPlaneInitialized: true, Pools: []Pool{p}, Now: t0}, Timing{})
	if len(d.Actions) != 0 || d.RequeueAfter != 2*time.Second {
		t.Fatalf("a fresh verdict waits for Settle: %v, requeue %s", d.Actions, d.RequeueAfter)
	}
	p = pool("md-0", 4, mach("a", sick("Ready"), fresh(-3*time.Second)), mach("b", sick("Ready"), fresh(-2*time.Second)), mach("c"), mach("d"))
	d = Decide(Snapshot{Cluster: "c1", ControlPlaneInitialized: true, Pools: []Pool{p}, Now: t0}, Timing{})
	if len(d.Actions) != 0 || blocked(d.Statuses[0]).GetReason() != BlockedTooManyUnhealthy {
		t.Fatalf("burst counted together: %v %v", d.Actions, blocked(d.Statuses[0]))
	}
}
