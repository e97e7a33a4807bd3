package healthwatcher

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"pgregory.net/rapid"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
)

func testPolicy() policy.Policy {
	p, _ := policy.Resolve(nil, "", policy.Default())
	p.UnhealthyConditions = append(p.UnhealthyConditions, policy.Condition{Type: "KernelDeadlock", Status: "True"})
	return p
}

func reasonsOf(us []Unhealthy, machine string) []string {
	for _, u := range us {
		if u.Machine == machine {
			var out []string
			for _, r := range u.Reasons {
				out = append(out, r.GetType())
			}
			return out
		}
	}
	return nil
}

func TestEvaluate(t *testing.T) {
	worker := func(mut ...func(*Target)) Target {
		tg := Target{Machine: "w1", Pool: "md-0", Created: t0, Phase: capnv1.MachineRunning, InfraReady: at(time.Minute)}
		for _, f := range mut {
			f(&tg)
		}
		return tg
	}
	beat := func(d time.Duration) func(*Target) {
		return func(tg *Target) { tg.LastHeartbeat, tg.Ready = at(d), true }
	}
	tests := []struct {
		name        string
		target      Target
		cpInit      bool
		cpInitAt    time.Duration
		now         time.Duration
		wantReasons []string
		wantSince   time.Duration
		wantRecheck time.Duration
	}{
		{"worker not judged before the control plane is initialised", worker(), false, 0, time.Hour, nil, 0, 0},
		{"control plane judged before initialisation", worker(func(tg *Target) { tg.ControlPlane, tg.Pool = true, "control-plane" }), false, 0, 20 * time.Minute,
			[]string{ReasonNodeStartupTimeout}, 11 * time.Minute, 0},
		{"node starting: recheck at the startup deadline", worker(), true, 0, 9 * time.Minute, nil, 0, 2 * time.Minute},
		{"node never reported: startup timeout", worker(), true, 0, 12 * time.Minute, []string{ReasonNodeStartupTimeout}, 11 * time.Minute, 0},
		{"startup clock of a worker starts at control-plane initialisation", worker(), true, 5 * time.Minute, 12 * time.Minute, nil, 0, 3 * time.Minute},
		{"infrastructure not ready: machine-manager's business", worker(func(tg *Target) { tg.InfraReady = time.Time{} }), true, 0, time.Hour, nil, 0, 0},
		{"conditions count as a report", worker(func(tg *Target) { tg.Reported = true }), true, 0, time.Hour, nil, 0, 0},
		{"infrastructure gone: at once", worker(beat(2*time.Minute), func(tg *Target) { tg.InfraGone = at(3 * time.Minute) }), true, 0, 3 * time.Minute,
			[]string{ReasonInfrastructureGone}, 3 * time.Minute, 0},
		{"failed machine", worker(func(tg *Target) { tg.Phase, tg.PhaseSince = capnv1.MachineFailed, at(4*time.Minute) }), true, 0, 5 * time.Minute,
			[]string{ReasonMachineFailed}, 4 * time.Minute, 0},
		{"fresh heartbeat: recheck when the grace runs out", worker(beat(10 * time.Minute)), true, 0, 11 * time.Minute, nil, 0, time.Minute},
		{"silent within grace+timeout: recheck at the timeout", worker(beat(10 * time.Minute)), true, 0, 13 * time.Minute, nil, 0, 4 * time.Minute},
		{"silent past grace+timeout: Ready Unknown", worker(beat(10 * time.Minute)), true, 0, 18 * time.Minute, []string{"Ready"}, 17 * time.Minute, 0},
		{"node not ready for the timeout", worker(beat(10*time.Minute), func(tg *Target) { tg.Ready = false }), true, 0, 11 * time.Minute, nil, 0, time.Minute},
		{"KernelDeadlock True, timeout 0: at its transition", worker(beat(10*time.Minute), func(tg *Target) {
			tg.Conditions = append(tg.Conditions, cond("KernelDeadlock", "True", "DockerHung", 10*time.Minute+5*time.Second, 10*time.Minute+5*time.Second))
		}), true, 0, 11 * time.Minute, []string{"KernelDeadlock"}, 10*time.Minute + 5*time.Second, time.Minute},
		{"KernelDeadlock False", worker(beat(10*time.Minute), func(tg *Target) {
			tg.Conditions = append(tg.Conditions, cond("KernelDeadlock", "False", "KernelHasNoDeadlock", 0, 10*time.Minute))
		}), true, 0, 11 * time.Minute, nil, 0, time.Minute},
		{"skipped (deleting, stopped)", worker(func(tg *Target) { tg.Skip = true }), true, 0, time.Hour, nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := State{ControlPlaneInitialized: tt.cpInit, Targets: []Target{tt.target}}
			if tt.cpInitAt > 0 {
				s.ControlPlaneInitializedAt = at(tt.cpInitAt)
			}
			us, recheck := Evaluate(s, Policies{Default: testPolicy()}, at(tt.now))
			got := reasonsOf(us, "w1")
			if !slices.Equal(got, tt.wantReasons) {
				t.Fatalf("reasons %v, want %v", got, tt.wantReasons)
			}
			if len(us) > 0 && !us[0].Since.Equal(at(tt.wantSince)) {
				t.Fatalf("since %s, want %s", us[0].Since.Sub(t0), tt.wantSince)
			}
			if recheck != tt.wantRecheck {
				t.Fatalf("recheck %s, want %s", recheck, tt.wantRecheck)
			}
		})
	}
}

func TestEvaluatePoolPolicy(t *testing.T) {
	p := testPolicy()
	strict := p
	strict.UnhealthyConditions = []policy.Condition{{Type: "ReadonlyFilesystem", Status: "True"}}
	tg := func(name, pool string) Target {
		return Target{Machine: name, Pool: pool, Created: t0, Phase: capnv1.MachineRunning, InfraReady: t0, LastHeartbeat: at(time.Minute), Ready: true,
			Conditions: []*capnv1.NodeCondition{cond("ReadonlyFilesystem", "True", "FilesystemIsReadOnly", time.Minute, time.Minute)}}
	}
	us, _ := Evaluate(State{ControlPlaneInitialized: true, Targets: []Target{tg("a", "md-0"), tg("b", "md-1")}},
		Policies{Default: p, ByPool: map[string]policy.Policy{"md-1": strict}}, at(2*time.Minute))
	if len(us) != 1 || us[0].Machine != "b" {
		t.Fatalf("only md-1's policy judges ReadonlyFilesystem: %+v", us)
	}
}

// genState draws one cluster's machines with random ages, heartbeats,
// conditions, infrastructure and phases.
func genState(t *rapid.T, p policy.Policy) (State, time.Time) {
	nowS := rapid.IntRange(0, 7200).Draw(t, "now")
	now := at(time.Duration(nowS) * time.Second)
	s := State{ControlPlaneInitialized: rapid.Bool().Draw(t, "cpInit")}
	if s.ControlPlaneInitialized && rapid.Bool().Draw(t, "cpInitAt") {
		s.ControlPlaneInitializedAt = at(time.Duration(rapid.IntRange(0, nowS).Draw(t, "cpInitAtS")) * time.Second)
	}
	n := rapid.IntRange(0, 6).Draw(t, "machines")
	sec := func(label string) time.Time {
		return at(time.Duration(rapid.IntRange(0, nowS).Draw(t, label)) * time.Second) // facts are in the past
	}
	for i := range n {
		tg := Target{Machine: string(rune('a' + i)), Pool: "md-0", ControlPlane: rapid.Bool().Draw(t, "cp"), Created: t0,
			Phase: rapid.SampledFrom([]capnv1.MachinePhase{capnv1.MachineProvisioned, capnv1.MachineRunning, capnv1.MachineRunning, capnv1.MachineFailed}).Draw(t, "phase"), PhaseSince: sec("phaseSince")}
		if rapid.Bool().Draw(t, "infraReady") {
			tg.InfraReady = sec("infraReadyAt")
		}
		if rapid.IntRange(0, 5).Draw(t, "gone") == 0 {
			tg.InfraGone = sec("goneAt")
		}
		if rapid.Bool().Draw(t, "beats") {
			tg.LastHeartbeat, tg.Ready = sec("lastBeat"), rapid.Bool().Draw(t, "ready")
		}
		for range rapid.IntRange(0, 2).Draw(t, "conds") {
			c := cond(rapid.SampledFrom([]string{"KernelDeadlock", "Ready", "DiskPressure"}).Draw(t, "type"),
				rapid.SampledFrom([]string{"True", "False", "Unknown"}).Draw(t, "status"), "R", 0, 0)
			c.LastTransitionTime = tsNow(sec("transition"))
			if c.GetType() == ConditionReady && rapid.Bool().Draw(t, "nodeReady") {
				c.Source = SourceKubernetes // the Node's Ready: judged as recorded
			} else if c.GetType() == ConditionReady && !tg.LastHeartbeat.IsZero() {
				// The Ready recorded for a node that beats is the one derived
				// from its heartbeats when the record was last written.
				c = ReadyCondition(nil, tg.LastHeartbeat, tg.Ready, p.HeartbeatGrace, tg.LastHeartbeat)
			}
			tg.Conditions = append(tg.Conditions, c)
		}
		tg.Skip = rapid.IntRange(0, 6).Draw(t, "skip") == 0
		s.Targets = append(s.Targets, tg)
	}
	return s, now
}

func verdicts(us []Unhealthy) map[string]time.Time {
	out := map[string]time.Time{}
	for _, u := range us {
		out[u.Machine] = u.Since
	}
	return out
}

// TestEvaluateProperties: for any state,
//   - Evaluate is deterministic;
//   - every unhealthy machine has a reason and its since is not in the future;
//   - a verdict does not change by time alone before recheckAfter (or
//     ever, when it is 0): nothing is missed between rechecks;
//   - an unhealthy machine stays unhealthy, with the same since, as time
//     passes (the same episode keeps one event id);
//   - skipped machines and workers before initialisation are never judged.
func TestEvaluateProperties(t *testing.T) {
	p := testPolicy()
	rapid.Check(t, func(t *rapid.T) {
		s, now := genState(t, p)
		pols := Policies{Default: p}
		us, recheck := Evaluate(s, pols, now)
		again, recheck2 := Evaluate(s, pols, now)
		if !mapsEqual(verdicts(us), verdicts(again)) || recheck != recheck2 {
			t.Fatal("not deterministic")
		}
		for _, u := range us {
			if len(u.Reasons) == 0 || u.Since.After(now) {
				t.Fatalf("verdict %+v at %s", u, now)
			}
		}
		skipped := map[string]bool{}
		for _, tg := range s.Targets {
			if tg.Skip || (!tg.ControlPlane && !s.ControlPlaneInitialized) {
				skipped[tg.Machine] = true
			}
		}
		for _, u := range us {
			if skipped[u.Machine] {
				t.Fatalf("%s judged although skipped", u.Machine)
			}
		}
		horizon := recheck
		if horizon == 0 {
			horizon = 48 * time.Hour
		}
		frac := rapid.Float64Range(0, 0.999).Draw(t, "frac")
		mid := now.Add(time.Duration(float64(horizon) * frac))
		usMid, _ := Evaluate(s, pols, mid)
		if !mapsEqual(verdicts(us), verdicts(usMid)) {
			t.Fatalf("verdict changed at %s, before the recheck at %s: %v → %v", mid.Sub(now), recheck, verdicts(us), verdicts(usMid))
		}
		later, _ := Evaluate(s, pols, now.Add(time.Duration(rapid.IntRange(0, 100000).Draw(t, "later"))*time.Second))
		lv := verdicts(later)
		for m, since := range verdicts(us) {
			if got, ok := lv[m]; !ok || !got.Equal(since) {
				t.Fatalf("%s was unhealthy since %s, later %v (present %v)", m, since, got, ok)
			}
		}
	})
}

func mapsEqual(a, b map[string]time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !w.Equal(v) {
			return false
		}
	}
	return true
}

// A gateway token's condition is judged only when the policy trusts the
// token, and an untrusted one does not count as the node having reported.
func TestEvaluateJudgesTrustedSourcesOnly(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tgt := Target{Machine: "m", Pool: "md-0", ControlPlane: true, Created: t0, InfraReady: t0,
		Conditions: []*capnv1.NodeCondition{{Type: "KernelDeadlock", Status: "True", Source: "ingest:monitoring",
			LastTransitionTime: timestamppb.New(t0)}}}
	reasons := func(p policy.Policy) []string {
		u, _ := Evaluate(State{ControlPlaneInitialized: true, Targets: []Target{tgt}}, Policies{Default: p}, t0.Add(time.Hour))
		var out []string
		for _, x := range u {
			for _, r := range x.Reasons {
				out = append(out, r.GetType())
			}
		}
		return out
	}
	p := testPolicy()
	if got := reasons(p); len(got) != 1 || got[0] != ReasonNodeStartupTimeout {
		t.Errorf("untrusted: reasons %v, want only %s", got, ReasonNodeStartupTimeout)
	}
	p.TrustedSources = []string{"monitoring"}
	if got := reasons(p); len(got) != 1 || got[0] != "KernelDeadlock" {
		t.Errorf("trusted: reasons %v, want KernelDeadlock", got)
	}
}
