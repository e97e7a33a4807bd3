package wave

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"pgregory.net/rapid"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

var t0 = time.Date(2026, 12, 6, 2, 0, 0, 0, time.UTC)

// world is a fake fleet the tests move clusters in: what Plan observes.
type world struct {
	clusters map[string]*Cluster
}

func newWorld(n int, atChange func(i int) bool) *world {
	w := &world{clusters: map[string]*Cluster{}}
	for i := range n {
		name := fmt.Sprintf("c%03d", i)
		w.clusters[name] = &Cluster{Name: name, AtChange: atChange(i), Ready: atChange(i), Machines: 3}
	}
	return w
}

func (w *world) list() []Cluster {
	out := make([]Cluster, 0, len(w.clusters))
	for _, c := range w.clusters {
		out = append(out, *c)
	}
	return out
}

func (w *world) move(names []string) {
	for _, n := range names {
		w.clusters[n].AtChange = true
	}
}

func TestBoundaries(t *testing.T) {
	tests := []struct {
		waves []string
		n     int
		want  []int
	}{
		{[]string{"2", "10%", "50%", "100%"}, 100, []int{2, 10, 50, 100}},
		{[]string{"2", "10%", "50%"}, 100, []int{2, 10, 50, 100}},
		{nil, 5, []int{1, 5}},
		{[]string{"2", "10%", "50%", "100%"}, 3, []int{2, 3}},
		{[]string{"5", "1", "100%"}, 10, []int{5, 10}},
		{[]string{"2"}, 0, nil},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.waves, ",")+fmt.Sprint("/", tt.n), func(t *testing.T) {
			if got := Boundaries(tt.waves, tt.n); !slices.Equal(got, tt.want) {
				t.Fatalf("Boundaries = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCanaryFaultHaltsThenResumes is the scenario on the planner
// alone: 100 clusters in waves 2, 10%, 50%, rest; a canary keeps an
// unhealthy machine, the rollout halts with the reason and moves nothing
// more; once the fault is gone and the rollout resumed it completes.
func TestCanaryFaultHaltsThenResumes(t *testing.T) {
	w := newWorld(100, func(int) bool { return false })
	spec := &capnv1.RolloutSpec{Waves: []string{"2", "10%", "50%", "100%"}, Soak: durationpb.New(5 * time.Minute), ReadyTimeout: durationpb.New(10 * time.Minute)}
	now := t0
	var st *capnv1.RolloutStatus
	moved := map[string]bool{}
	step := func() Result {
		res := Plan(Input{Spec: spec, Status: st, Clusters: w.list(), Now: now})
		w.move(res.Move)
		for _, n := range res.Move {
			moved[n] = true
		}
		st = res.Status
		return res
	}
	res := step()
	if want := []string{"c000", "c001"}; !slices.Equal(res.Move, want) {
		t.Fatalf("canary moved %v, want %v", res.Move, want)
	}
	// The canaries become Ready; c001 keeps an unhealthy machine.
	w.clusters["c000"].Ready = true
	w.clusters["c001"].Ready = true
	w.clusters["c001"].UnhealthyMachines = 1
	now = now.Add(time.Minute)
	res = step()
	if st.GetPhase() != PhaseHalted || !strings.Contains(st.GetHaltReason(), "c001: 1 of 3 machines unhealthy") {
		t.Fatalf("phase %s halt %q, want Halted for c001's machines", st.GetPhase(), st.GetHaltReason())
	}
	if len(res.Events) != 1 || res.Events[0].Type != EventHalted {
		t.Fatalf("events %v, want one Halted", res.Events)
	}
	// A halt is final: time passes, the fault goes, nothing moves.
	w.clusters["c001"].UnhealthyMachines = 0
	for range 5 {
		now = now.Add(time.Hour)
		if res := step(); len(res.Move) > 0 || st.GetPhase() != PhaseHalted {
			t.Fatalf("halted rollout moved %v (phase %s)", res.Move, st.GetPhase())
		}
	}
	if len(moved) != 2 {
		t.Fatalf("%d clusters moved while halted, want the 2 canaries", len(moved))
	}
	spec.Resume = 1
	for i := 0; i < 20 && st.GetPhase() != PhaseCompleted; i++ {
		step()
		for n := range moved {
			w.clusters[n].Ready = true
		}
		now = now.Add(6 * time.Minute)
	}
	if st.GetPhase() != PhaseCompleted || len(moved) != 100 {
		t.Fatalf("phase %s with %d moved, want Completed with 100", st.GetPhase(), len(moved))
	}
	var sizes []int
	for _, wv := range st.GetWaves() {
		sizes = append(sizes, len(wv.GetClusters()))
	}
	if want := []int{2, 8, 40, 50}; !slices.Equal(sizes, want) {
		t.Fatalf("wave sizes %v, want %v", sizes, want)
	}
}

func TestNotReadyInTimeHalts(t *testing.T) {
	w := newWorld(4, func(int) bool { return false })
	spec := &capnv1.RolloutSpec{Waves: []string{"1"}, ReadyTimeout: durationpb.New(10 * time.Minute)}
	res := Plan(Input{Spec: spec, Clusters: w.list(), Now: t0})
	w.move(res.Move)
	if !res.RecheckAt.Equal(t0.Add(10 * time.Minute)) {
		t.Fatalf("RecheckAt %v, want the ready deadline", res.RecheckAt)
	}
	res = Plan(Input{Spec: spec, Status: res.Status, Clusters: w.list(), Now: t0.Add(10 * time.Minute)})
	if res.Status.GetPhase() != PhaseHalted || !strings.Contains(res.Status.GetHaltReason(), "c000 not Ready at the change within 10m0s") {
		t.Fatalf("phase %s halt %q", res.Status.GetPhase(), res.Status.GetHaltReason())
	}
}

// A cluster that stops being Ready during the soak waits again with a
// fresh deadline and the soak starts over; if it stays down past the
// deadline the rollout halts.
func TestNotReadyAgainRestartsTheSoak(t *testing.T) {
	w := newWorld(3, func(int) bool { return false })
	spec := &capnv1.RolloutSpec{Waves: []string{"1", "100%"}, Soak: durationpb.New(10 * time.Minute), ReadyTimeout: durationpb.New(5 * time.Minute)}
	plan := func(st *capnv1.RolloutStatus, now time.Time) Result {
		res := Plan(Input{Spec: spec, Status: st, Clusters: w.list(), Now: now})
		w.move(res.Move)
		return res
	}
	res := plan(nil, t0)
	w.clusters["c000"].Ready = true
	res = plan(res.Status, t0.Add(time.Minute)) // Ready: soak until +11m
	if wv := res.Status.GetWaves()[0]; wv.GetState() != WaveSoaking {
		t.Fatalf("wave %s, want Soaking", wv.GetState())
	}
	w.clusters["c000"].Ready = false
	res = plan(res.Status, t0.Add(8*time.Minute))
	if st := res.Status; st.GetPhase() != PhaseProgressing || stateOf(st, "c000") != ClusterMoving || st.GetWaves()[0].GetSoakUntil() != nil {
		t.Fatalf("after a flap: phase %s, c000 %s, soak %v", st.GetPhase(), stateOf(st, "c000"), st.GetWaves()[0].GetSoakUntil())
	}
	w.clusters["c000"].Ready = true
	res = plan(res.Status, t0.Add(9*time.Minute))
	res = plan(res.Status, t0.Add(18*time.Minute)) // the old soak end: not yet
	if res.Status.GetCurrentWave() != 0 || len(res.Move) != 0 {
		t.Fatal("the soak did not start over")
	}
	res = plan(res.Status, t0.Add(19*time.Minute))
	if res.Status.GetCurrentWave() != 1 || len(res.Move) != 2 {
		t.Fatalf("wave %d, moved %v after the new soak", res.Status.GetCurrentWave(), res.Move)
	}
	// Down for longer than the ready timeout: halt.
	w.clusters["c001"].Ready = true
	w.clusters["c002"].Ready = true
	res = plan(res.Status, t0.Add(20*time.Minute))
	w.clusters["c001"].Ready = false
	res = plan(res.Status, t0.Add(21*time.Minute))
	res = plan(res.Status, t0.Add(26*time.Minute))
	if res.Status.GetPhase() != PhaseHalted || !strings.Contains(res.Status.GetHaltReason(), "c001 not Ready") {
		t.Fatalf("phase %s halt %q", res.Status.GetPhase(), res.Status.GetHaltReason())
	}
}

func TestWindowHoldsMoves(t *testing.T) {
	w := newWorld(3, func(int) bool { return false })
	opens := t0.Add(3 * time.Hour)
	closed := func(c string, now time.Time) (bool, time.Time) { return !now.Before(opens), opens }
	spec := &capnv1.RolloutSpec{Waves: []string{"100%"}}
	res := Plan(Input{Spec: spec, Clusters: w.list(), Now: t0, Window: closed})
	if len(res.Move) != 0 || !res.Status.GetNextWindow().AsTime().Equal(opens) || !res.RecheckAt.Equal(opens) {
		t.Fatalf("moved %v, next window %v, recheck %v; want none moved until %v", res.Move, res.Status.GetNextWindow(), res.RecheckAt, opens)
	}
	res = Plan(Input{Spec: spec, Status: res.Status, Clusters: w.list(), Now: opens, Window: closed})
	if len(res.Move) != 3 {
		t.Fatalf("moved %v once the window opened, want all 3", res.Move)
	}
}

// TestPlanProperties drives random rollouts through random observations,
// pauses, resumes, aborts and time, and checks after every step:
//   - never more clusters moved than the waves so far allow, and none of a
//     later wave; never more in flight than the current wave holds;
//   - a cluster is moved at most once, and only a Pending one;
//   - a halt is final until resumed: a halted rollout whose resume was
//     not bumped moves nothing and stays Halted;
//   - abort changes nothing pending: after it nothing moves, ever, and
//     every Pending cluster stays Pending;
//   - Completed means every cluster of the waves moved.
func TestPlanProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 30).Draw(rt, "n")
		pre := rapid.SliceOfN(rapid.Bool(), n, n).Draw(rt, "atChange")
		w := newWorld(n, func(i int) bool { return pre[i] && i%4 == 0 })
		spec := &capnv1.RolloutSpec{
			Waves:                rapid.SliceOfN(rapid.SampledFrom([]string{"1", "2", "3", "10%", "25%", "50%", "100%"}), 0, 5).Draw(rt, "waves"),
			Soak:                 durationpb.New(time.Duration(rapid.IntRange(0, 3).Draw(rt, "soak")) * time.Minute),
			ReadyTimeout:         durationpb.New(10 * time.Minute),
			MaxUnhealthyMachines: rapid.SampledFrom([]string{"", "0", "1", "50%"}).Draw(rt, "maxUnhealthy"),
		}
		now := t0
		var st *capnv1.RolloutStatus
		moved := map[string]bool{}
		for step := range 120 {
			switch rapid.IntRange(0, 12).Draw(rt, fmt.Sprint("action", step)) {
			case 0:
				spec.Paused = !spec.Paused
			case 1:
				if rapid.IntRange(0, 4).Draw(rt, fmt.Sprint("abort", step)) == 0 {
					spec.Aborted = true
				}
			case 2:
				spec.Resume++
			case 3, 4: // a moved cluster changes: a fault, or healed
				if len(moved) > 0 {
					names := sortedSet(moved)
					c := w.clusters[rapid.SampledFrom(names).Draw(rt, fmt.Sprint("fault", step))]
					c.Ready = rapid.Bool().Draw(rt, fmt.Sprint("ready", step))
					c.UnhealthyMachines = rapid.IntRange(0, 3).Draw(rt, fmt.Sprint("unhealthy", step))
					c.RemediationBlocked = rapid.IntRange(0, 5).Draw(rt, fmt.Sprint("blocked", step)) == 0
				}
			default: // time passes; moved clusters come up healthy
				now = now.Add(time.Duration(rapid.IntRange(0, 6).Draw(rt, fmt.Sprint("dt", step))) * time.Minute)
				for name := range moved {
					if rapid.Bool().Draw(rt, fmt.Sprint("up", step, name)) {
						c := w.clusters[name]
						c.Ready, c.UnhealthyMachines, c.RemediationBlocked = true, 0, false
					}
				}
			}
			prev := st
			res := Plan(Input{Spec: spec, Status: prev, Clusters: w.list(), Now: now})
			checkStep(rt, prev, spec, res, moved)
			w.move(res.Move)
			for _, m := range res.Move {
				moved[m] = true
			}
			st = res.Status
		}
	})
}

func checkStep(rt *rapid.T, prev *capnv1.RolloutStatus, spec *capnv1.RolloutSpec, res Result, moved map[string]bool) {
	st := res.Status
	if prev.GetPhase() == PhaseCompleted {
		if len(res.Move) > 0 || st.GetPhase() != PhaseCompleted {
			rt.Fatalf("completed rollout moved %v (phase %s)", res.Move, st.GetPhase())
		}
		return
	}
	if prev.GetPhase() == PhaseAborted || spec.GetAborted() {
		if len(res.Move) > 0 || st.GetPhase() != PhaseAborted {
			rt.Fatalf("aborted rollout moved %v (phase %s)", res.Move, st.GetPhase())
		}
		for _, c := range prev.GetClusters() {
			if c.GetState() == ClusterPending && stateOf(st, c.GetName()) != ClusterPending {
				rt.Fatalf("abort changed pending cluster %s to %s", c.GetName(), stateOf(st, c.GetName()))
			}
		}
	}
	if prev.GetPhase() == PhaseHalted && spec.GetResume() <= prev.GetObservedResume() {
		if len(res.Move) > 0 || (st.GetPhase() != PhaseHalted && st.GetPhase() != PhaseAborted) {
			rt.Fatalf("halted rollout, not resumed, moved %v and went %s", res.Move, st.GetPhase())
		}
	}
	prevState := map[string]string{}
	for _, c := range prev.GetClusters() {
		prevState[c.GetName()] = c.GetState()
	}
	for _, m := range res.Move {
		if moved[m] {
			rt.Fatalf("cluster %s moved twice", m)
		}
		if s, ok := prevState[m]; ok && s != ClusterPending {
			rt.Fatalf("cluster %s moved from state %s", m, s)
		}
		if wv := waveOf(st, m); wv > st.GetCurrentWave() {
			rt.Fatalf("cluster %s of wave %d moved during wave %d", m, wv, st.GetCurrentWave())
		}
	}
	total := 0
	for _, w := range st.GetWaves() {
		total += len(w.GetClusters())
	}
	allowed := 0
	for _, w := range st.GetWaves()[:min(len(st.GetWaves()), int(st.GetCurrentWave())+1)] {
		allowed += len(w.GetClusters())
	}
	if got := len(moved) + len(res.Move); got > allowed {
		rt.Fatalf("%d clusters moved by wave %d, the waves allow %d", got, st.GetCurrentWave(), allowed)
	}
	inFlight := 0
	for _, c := range st.GetClusters() {
		if c.GetState() == ClusterMoving || c.GetState() == ClusterReady {
			inFlight++
			if c.GetWave() != st.GetCurrentWave() {
				rt.Fatalf("cluster %s in flight in wave %d, current %d", c.GetName(), c.GetWave(), st.GetCurrentWave())
			}
		}
	}
	if w := len(st.GetWaves()); w > 0 && inFlight > len(st.GetWaves()[st.GetCurrentWave()].GetClusters()) {
		rt.Fatalf("%d clusters in flight, wave holds %d", inFlight, len(st.GetWaves()[st.GetCurrentWave()].GetClusters()))
	}
	if st.GetPhase() == PhaseCompleted {
		for _, c := range st.GetClusters() {
			if c.GetState() == ClusterPending || c.GetState() == ClusterMoving {
				rt.Fatalf("completed with cluster %s %s", c.GetName(), c.GetState())
			}
		}
		_ = total
	}
}

// TestPlanConverges: with no fault, no pause and time passing beyond the
// soak, every rollout completes and moves every cluster of its waves.
func TestPlanConverges(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 50).Draw(rt, "n")
		w := newWorld(n, func(i int) bool { return i%7 == 3 })
		spec := &capnv1.RolloutSpec{
			Waves: rapid.SliceOfN(rapid.SampledFrom([]string{"1", "2", "10%", "50%", "100%"}), 0, 4).Draw(rt, "waves"),
			Soak:  durationpb.New(5 * time.Minute),
		}
		now := t0
		var st *capnv1.RolloutStatus
		moved := map[string]bool{}
		for i := 0; i < 3*n+5 && st.GetPhase() != PhaseCompleted; i++ {
			res := Plan(Input{Spec: spec, Status: st, Clusters: w.list(), Now: now})
			w.move(res.Move)
			for _, m := range res.Move {
				moved[m] = true
				w.clusters[m].Ready = true
			}
			st = res.Status
			now = now.Add(5 * time.Minute)
		}
		want := 0
		for _, c := range w.clusters {
			if c.Name != "" && !(st != nil && stateOf(st, c.Name) == ClusterSkipped) {
				want++
			}
		}
		if st.GetPhase() != PhaseCompleted || len(moved) != want {
			rt.Fatalf("phase %s, moved %d of %d", st.GetPhase(), len(moved), want)
		}
	})
}

func TestPlanDeterministic(t *testing.T) {
	w := newWorld(20, func(i int) bool { return i == 5 })
	spec := &capnv1.RolloutSpec{Waves: []string{"2", "50%"}}
	a := Plan(Input{Spec: spec, Clusters: w.list(), Now: t0})
	b := Plan(Input{Spec: spec, Clusters: w.list(), Now: t0})
	if !slices.Equal(a.Move, b.Move) || fmt.Sprint(a.Status) != fmt.Sprint(b.Status) {
		t.Fatalf("two plans of one input differ:\n%v\n%v", a.Status, b.Status)
	}
}

func stateOf(st *capnv1.RolloutStatus, name string) string {
	for _, c := range st.GetClusters() {
		if c.GetName() == name {
			return c.GetState()
		}
	}
	return ""
}

func waveOf(st *capnv1.RolloutStatus, name string) int32 {
	for _, c := range st.GetClusters() {
		if c.GetName() == name {
			return c.GetWave()
		}
	}
	return -1
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
