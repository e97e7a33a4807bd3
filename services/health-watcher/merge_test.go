package healthwatcher

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"pgregory.net/rapid"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func cond(typ, status, reason string, transition, heartbeat time.Duration) *capnv1.NodeCondition {
	return &capnv1.NodeCondition{Type: typ, Status: status, Reason: reason,
		LastTransitionTime: timestamppb.New(at(transition)), LastHeartbeatTime: timestamppb.New(at(heartbeat))}
}

func ncReport(cs ...*capnv1.NodeCondition) *capnv1.NodeConditions {
	return &capnv1.NodeConditions{Cluster: "c1", Machine: "m1", Conditions: cs}
}

func condOf(h *capnv1.NodeHealth, typ string) *capnv1.NodeCondition {
	for _, c := range h.GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

func TestMergeConditions(t *testing.T) {
	tests := []struct {
		name        string
		steps       []*capnv1.NodeConditions
		wantChanged []bool
		wantStatus  string
		wantSince   time.Duration
	}{
		{"first report", []*capnv1.NodeConditions{ncReport(cond("KernelDeadlock", "True", "DockerHung", 10, 10))}, []bool{true}, "True", 10},
		{"duplicate changes nothing", []*capnv1.NodeConditions{
			ncReport(cond("KernelDeadlock", "True", "DockerHung", 10, 10)), ncReport(cond("KernelDeadlock", "True", "DockerHung", 10, 10)),
		}, []bool{true, false}, "True", 10},
		{"newer heartbeat alone is no write", []*capnv1.NodeConditions{
			ncReport(cond("KernelDeadlock", "True", "DockerHung", 10, 10)), ncReport(cond("KernelDeadlock", "True", "DockerHung", 10, 70)),
		}, []bool{true, false}, "True", 10},
		{"flip", []*capnv1.NodeConditions{
			ncReport(cond("KernelDeadlock", "False", "KernelHasNoDeadlock", 0, 5)), ncReport(cond("KernelDeadlock", "True", "DockerHung", 10, 10)),
		}, []bool{true, true}, "True", 10},
		{"late report of the old status is ignored", []*capnv1.NodeConditions{
			ncReport(cond("KernelDeadlock", "True", "DockerHung", 10, 10)), ncReport(cond("KernelDeadlock", "False", "KernelHasNoDeadlock", 0, 5)),
		}, []bool{true, false}, "True", 10},
		{"restarted reporter keeps the first transition", []*capnv1.NodeConditions{
			ncReport(cond("KernelDeadlock", "True", "DockerHung", 10, 10)), ncReport(cond("KernelDeadlock", "True", "DockerHung", 50, 50)),
		}, []bool{true, true}, "True", 10},
		{"late flip after a restart re-send is ignored", []*capnv1.NodeConditions{
			ncReport(cond("KernelDeadlock", "True", "DockerHung", 10, 10)), ncReport(cond("KernelDeadlock", "True", "DockerHung", 50, 50)),
			ncReport(cond("KernelDeadlock", "False", "KernelHasNoDeadlock", 20, 20)),
		}, []bool{true, true, false}, "True", 10},
		{"bad status ignored", []*capnv1.NodeConditions{ncReport(cond("KernelDeadlock", "Maybe", "", 10, 10))}, []bool{false}, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &capnv1.NodeHealth{}
			for i, r := range tt.steps {
				if got := mergeConditions(h, r, at(time.Hour)); got != tt.wantChanged[i] {
					t.Fatalf("step %d changed=%v, want %v", i, got, tt.wantChanged[i])
				}
			}
			c := condOf(h, "KernelDeadlock")
			if c.GetStatus() != tt.wantStatus {
				t.Fatalf("status %q, want %q", c.GetStatus(), tt.wantStatus)
			}
			if c != nil && !c.GetLastTransitionTime().AsTime().Equal(at(tt.wantSince)) {
				t.Fatalf("transition %s, want %s", c.GetLastTransitionTime().AsTime(), at(tt.wantSince))
			}
		})
	}
}

// TestMergeConditionsOrderProperty: whatever order a source's reports
// arrive in (JetStream redelivers, handlers run concurrently), the record
// ends with the status of the source's latest state. A source's history is
// a series of flips; each report says the status at its heartbeat, with a
// transition at or after the flip that began it (a restarted reporter
// re-sends with a later one), never after its heartbeat.
func TestMergeConditionsOrderProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		flips := rapid.IntRange(1, 5).Draw(t, "flips")
		var reports []*capnv1.NodeConditions
		now := time.Duration(0)
		status := rapid.SampledFrom([]string{"True", "False"}).Draw(t, "first")
		var last *capnv1.NodeCondition
		for f := 0; f < flips; f++ {
			flipAt := now + time.Duration(rapid.IntRange(1, 100).Draw(t, "gap"))*time.Second
			n := rapid.IntRange(1, 4).Draw(t, "reports")
			hb := flipAt
			for i := 0; i < n; i++ {
				hb += time.Duration(rapid.IntRange(0, 50).Draw(t, "hb"))*time.Second + time.Millisecond
				tr := flipAt + time.Duration(rapid.Int64Range(0, int64(hb-flipAt)).Draw(t, "transition"))
				if rapid.Bool().Draw(t, "exact") {
					tr = flipAt
				}
				c := cond("Ready", status, "R"+status, tr, hb)
				c.Type = "KernelDeadlock"
				reports = append(reports, ncReport(c))
				last = c
			}
			now = hb
			if status == "True" {
				status = "False"
			} else {
				status = "True"
			}
		}
		perm := rapid.Permutation(reports).Draw(t, "order")
		h := &capnv1.NodeHealth{}
		for _, r := range perm {
			mergeConditions(h, proto.Clone(r).(*capnv1.NodeConditions), at(time.Hour))
		}
		if got := condOf(h, "KernelDeadlock").GetStatus(); got != last.GetStatus() {
			t.Fatalf("final status %s, want the latest report's %s", got, last.GetStatus())
		}
	})
}

func TestMergeHeartbeat(t *testing.T) {
	h := &capnv1.NodeHealth{}
	hb := &capnv1.NodeHeartbeat{Ready: true, KubeletVersion: "v1.34.2", NodeName: "n1"}
	steps := []struct {
		name string
		hb   *capnv1.NodeHeartbeat
		at   time.Duration
		want bool
	}{
		{"first", hb, 10 * time.Second, true},
		{"steady: memory only", hb, 40 * time.Second, false},
		{"late: ignored", &capnv1.NodeHeartbeat{Ready: false}, 5 * time.Second, false},
		{"ready changed", &capnv1.NodeHeartbeat{Ready: false}, 50 * time.Second, true},
		{"persist every", &capnv1.NodeHeartbeat{Ready: false}, 6 * time.Minute, true},
	}
	for _, s := range steps {
		if got := mergeHeartbeat(h, s.hb, at(s.at), 5*time.Minute); got != s.want {
			t.Fatalf("%s: changed=%v, want %v", s.name, got, s.want)
		}
	}
	if h.GetReady() || h.GetKubeletVersion() != "v1.34.2" || !h.GetLastHeartbeat().AsTime().Equal(at(6*time.Minute)) {
		t.Fatalf("record %v", h)
	}
}

func TestMergeProblemAndDrift(t *testing.T) {
	h := &capnv1.NodeHealth{}
	p := func(reason string, d time.Duration) *capnv1.ProblemEvent {
		return &capnv1.ProblemEvent{Reason: reason, Time: timestamppb.New(at(d))}
	}
	for i, want := range []bool{true, false, true, true, false} {
		ev := []*capnv1.ProblemEvent{p("TaskHung", 10), p("TaskHung", 10), p("OOMKilling", 5), p("KernelOops", 20), p("Old", 1)}[i]
		if got := mergeProblem(h, ev, at(time.Hour), 3); got != want {
			t.Fatalf("problem %d: changed=%v, want %v", i, got, want)
		}
	}
	if len(h.Problems) != 3 || h.Problems[0].GetReason() != "OOMKilling" || h.Problems[2].GetReason() != "KernelOops" {
		t.Fatalf("problems not the newest three, oldest first: %v", h.Problems)
	}
	gone := &capnv1.DriftReport{Kind: DriftGone, Time: timestamppb.New(at(30))}
	if !mergeDrift(h, gone, at(time.Hour)) || mergeDrift(h, gone, at(time.Hour)) {
		t.Fatal("drift: first must change, duplicate must not")
	}
	if mergeDrift(h, &capnv1.DriftReport{Kind: DriftStopped, Time: timestamppb.New(at(20))}, at(time.Hour)) {
		t.Fatal("an older drift report replaced a newer one")
	}
	if mergeDrift(h, &capnv1.DriftReport{Kind: DriftOrphan, Time: timestamppb.New(at(40))}, at(time.Hour)) {
		t.Fatal("an orphan is not about this machine")
	}
}

func TestForIncarnation(t *testing.T) {
	old := &capnv1.NodeHealth{Cluster: "c1", Machine: "m1", Updated: timestamppb.New(at(time.Minute)), Conditions: []*capnv1.NodeCondition{cond("KernelDeadlock", "True", "", 0, 0)}}
	if got := forIncarnation(old, "c1", "m1", at(2*time.Minute)); len(got.GetConditions()) != 0 {
		t.Fatal("a record older than the machine was inherited")
	}
	if got := forIncarnation(old, "c1", "m1", at(0)); got != old {
		t.Fatal("the machine's own record was dropped")
	}
}

// A gateway token's condition has a slot of its own: it neither replaces
// nor hides the machine's own report of the same type.
func TestIngestedConditionKeepsItsOwnSlot(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &capnv1.NodeHealth{}
	report := func(source, status string, at time.Time) *capnv1.NodeConditions {
		return &capnv1.NodeConditions{Source: source, Conditions: []*capnv1.NodeCondition{{Type: "KernelDeadlock", Status: status,
			LastTransitionTime: timestamppb.New(at), LastHeartbeatTime: timestamppb.New(at)}}}
	}
	mergeConditions(h, report("node-problem-detector", capnv1.ConditionTrue.Wire(), t0), t0)
	mergeConditions(h, report("ingest:attacker", capnv1.ConditionFalse.Wire(), t0.Add(time.Minute)), t0.Add(time.Minute))
	got := map[string]string{}
	for _, c := range h.GetConditions() {
		got[c.GetSource()] = c.GetStatus()
	}
	if len(got) != 2 || got["node-problem-detector"] != capnv1.ConditionTrue.Wire() || got["ingest:attacker"] != capnv1.ConditionFalse.Wire() {
		t.Fatalf("conditions %v", h.GetConditions())
	}
}
