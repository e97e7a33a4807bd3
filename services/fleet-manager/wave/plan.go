// Package wave is the fleet-manager's pure rollout planner: from a
// rollout's spec, its last status, what is observed of the clusters it
// picks and the time, it computes the next status, the clusters to move
// now and the events to publish. No I/O, no clock: Plan(Input) Result.
//
//	Pending ─► Progressing ─┬─► Completed
//	               ▲  │     ├─► Aborted   (spec.aborted; final)
//	      resume   │  ▼     └─► Paused    (spec.paused; until cleared)
//	               Halted     (a regression; final until spec.resume is bumped)
//
// Waves are frozen when the rollout starts: the clusters it picks that do
// not yet have the change, sorted by name, cut at the cumulative sizes of
// spec.waves. A wave's clusters are moved (as their maintenance windows
// allow), must each be Ready at the change within ready_timeout, then all
// stay Ready and healthy for the soak before the next wave starts (a
// cluster that stops being Ready waits again, with a fresh deadline, and
// the soak starts over). See README.md.
package wave

import (
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

// Rollout phases.
const (
	PhasePending     = "Pending"
	PhaseProgressing = "Progressing"
	PhasePaused      = "Paused"
	PhaseHalted      = "Halted"
	PhaseAborted     = "Aborted"
	PhaseCompleted   = "Completed"
)

// Wave states.
const (
	WavePending     = "Pending"
	WaveProgressing = "Progressing"
	WaveSoaking     = "Soaking"
	WaveDone        = "Done"
)

// Cluster states in a rollout.
const (
	ClusterPending = "Pending"
	ClusterMoving  = "Moving"
	ClusterReady   = "Ready"
	ClusterDone    = "Done"
	ClusterSkipped = "Skipped"
)

// Event types.
const (
	EventWaveStarted  = "WaveStarted"
	EventWaveFinished = "WaveFinished"
	EventHalted       = "Halted"
	EventResumed      = "Resumed"
	EventAborted      = "Aborted"
	EventCompleted    = "Completed"
)

// Defaults.
const (
	DefaultReadyTimeout = 30 * time.Minute
)

// DefaultWaves: one canary, then the rest.
var DefaultWaves = []string{"1", "100%"}

// Cluster is what the fleet-manager observes of one cluster the rollout
// picks.
type Cluster struct {
	Name string
	// AtChange: the desired cluster already has the change.
	AtChange bool
	// Ready: AtChange, and the observed cluster is Ready at that spec
	// (phase Ready, its generation observed).
	Ready bool
	// Machines and UnhealthyMachines count the cluster's machines and
	// those its health policy judges unhealthy.
	Machines, UnhealthyMachines int
	// RemediationBlocked: a pool's repair is blocked (too many unhealthy).
	RemediationBlocked bool
}

// Window says whether a cluster's maintenance window is open at now, and
// when it next opens if not. The planner moves a cluster only in an open
// window; AlwaysOpen is the default.
type Window func(cluster string, now time.Time) (open bool, nextOpen time.Time)

// AlwaysOpen is the Window of clusters without maintenance windows.
func AlwaysOpen(string, time.Time) (bool, time.Time) { return true, time.Time{} }

// Input is one planning snapshot.
type Input struct {
	Spec       *capnv1.RolloutSpec
	Generation int64
	// Status is the last status (nil before the first plan); Plan never
	// changes it.
	Status *capnv1.RolloutStatus
	// Clusters are the clusters the selector picks and the change applies
	// to, in any order; a cluster of the rollout missing here went away.
	Clusters []Cluster
	Now      time.Time
	Window   Window
}

// Event is one thing to tell users (a CloudEvent of the rollout).
type Event struct {
	Type    string
	Wave    int32
	Message string
}

// Result is the plan.
type Result struct {
	Status *capnv1.RolloutStatus
	// Move are the clusters to write the change to now, sorted.
	Move   []string
	Events []Event
	// RecheckAt is when the plan may change with nothing observed
	// changing (a soak ends, a ready deadline passes, a window opens);
	// zero for never.
	RecheckAt time.Time
}

// Boundaries are the cumulative cluster counts after each wave of a
// rollout of n clusters: non-decreasing, the last n, waves that add no
// cluster dropped. An entry that does not parse counts as 100%.
func Boundaries(waves []string, n int) []int {
	if len(waves) == 0 {
		waves = DefaultWaves
	}
	var out []int
	prev := 0
	for _, w := range waves {
		c, err := manifest.ResolveIntOrPercent(w, n, true)
		if err != nil || c > n {
			c = n
		}
		if c <= prev {
			continue
		}
		out = append(out, c)
		prev = c
	}
	if prev < n {
		out = append(out, n)
	}
	return out
}

// planner holds one Plan call's state.
type planner struct {
	in     Input
	st     *capnv1.RolloutStatus
	obs    map[string]Cluster
	res    Result
	now    *timestamppb.Timestamp
	recalc time.Time
}

// Plan computes the next status, moves and events. It is deterministic:
// the same input gives the same result.
func Plan(in Input) Result {
	if in.Window == nil {
		in.Window = AlwaysOpen
	}
	p := &planner{in: in, obs: map[string]Cluster{}, now: timestamppb.New(in.Now)}
	for _, c := range in.Clusters {
		p.obs[c.Name] = c
	}
	p.st = proto.CloneOf(in.Status)
	if p.st == nil {
		p.st = &capnv1.RolloutStatus{}
	}
	p.run()
	p.st.ObservedGeneration = in.Generation
	if !proto.Equal(p.st, in.Status) {
		p.st.Updated = p.now
	}
	p.res.Status = p.st
	slices.Sort(p.res.Move)
	p.res.RecheckAt = p.recalc
	return p.res
}

func (p *planner) event(typ string, wave int32, format string, args ...any) {
	p.res.Events = append(p.res.Events, Event{Type: typ, Wave: wave, Message: fmt.Sprintf(format, args...)})
}

func (p *planner) recheck(t time.Time) {
	if !t.IsZero() && t.After(p.in.Now) && (p.recalc.IsZero() || t.Before(p.recalc)) {
		p.recalc = t
	}
}

func (p *planner) run() {
	st, spec := p.st, p.in.Spec
	switch st.GetPhase() {
	case PhaseCompleted, PhaseAborted:
		return
	}
	if len(st.GetWaves()) == 0 && st.GetPhase() == "" {
		p.start()
	}
	if spec.GetAborted() {
		st.Phase = PhaseAborted
		st.HaltReason = ""
		p.event(EventAborted, st.GetCurrentWave(), "rollout aborted at wave %d: moved clusters stay as they are, pending ones are not touched", st.GetCurrentWave())
		return
	}
	if spec.GetResume() > st.GetObservedResume() {
		st.ObservedResume = spec.GetResume()
		if st.GetPhase() == PhaseHalted {
			p.resume()
		}
	}
	if st.GetPhase() == PhaseHalted {
		return // final until resumed
	}
	if st.GetPhase() == PhaseCompleted {
		return
	}
	for {
		if p.observe() {
			return
		}
		if spec.GetPaused() {
			st.Phase = PhasePaused
			return
		}
		st.Phase = PhaseProgressing
		if !p.advance() {
			return
		}
		if st.GetPhase() == PhaseCompleted {
			return
		}
	}
}

// start freezes the waves: the picked clusters without the change, by
// name, cut at the wave boundaries; those with it are Skipped.
func (p *planner) start() {
	st := p.st
	names := make([]string, 0, len(p.in.Clusters))
	for _, c := range p.in.Clusters {
		if c.AtChange {
			st.Clusters = append(st.Clusters, &capnv1.RolloutCluster{Name: c.Name, Wave: -1, State: ClusterSkipped, Message: "already has the change"})
			continue
		}
		names = append(names, c.Name)
	}
	slices.Sort(names)
	slices.SortFunc(st.Clusters, func(a, b *capnv1.RolloutCluster) int { return compare(a.GetName(), b.GetName()) })
	lo := 0
	for i, hi := range Boundaries(p.in.Spec.GetWaves(), len(names)) {
		w := &capnv1.RolloutWave{Index: int32(i), State: WavePending, Clusters: slices.Clone(names[lo:hi])}
		st.Waves = append(st.Waves, w)
		for _, n := range names[lo:hi] {
			st.Clusters = append(st.Clusters, &capnv1.RolloutCluster{Name: n, Wave: int32(i), State: ClusterPending})
		}
		lo = hi
	}
	slices.SortFunc(st.Clusters, func(a, b *capnv1.RolloutCluster) int { return compare(a.GetName(), b.GetName()) })
	st.Phase = PhasePending
	if len(st.Waves) == 0 {
		st.Phase = PhaseCompleted
		p.event(EventCompleted, 0, "rollout completed: no cluster needed the change")
	}
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// resume clears a halt: the current wave's clusters get a fresh ready
// deadline and soak.
func (p *planner) resume() {
	st := p.st
	reason := st.GetHaltReason()
	st.Phase = PhaseProgressing
	st.HaltReason = ""
	st.HaltedAt = nil
	for _, c := range p.waveClusters(st.GetCurrentWave()) {
		switch c.GetState() {
		case ClusterMoving:
			c.MovedAt = p.now
			c.Message = ""
		case ClusterReady:
			c.ReadySince = p.now
			c.Message = ""
		}
	}
	if w := p.wave(); w != nil && w.GetState() == WaveSoaking {
		w.State = WaveProgressing
		w.SoakUntil = nil
	}
	p.event(EventResumed, st.GetCurrentWave(), "rollout resumed at wave %d (it had halted: %s)", st.GetCurrentWave(), reason)
}

func (p *planner) wave() *capnv1.RolloutWave {
	i := int(p.st.GetCurrentWave())
	if i < 0 || i >= len(p.st.GetWaves()) {
		return nil
	}
	return p.st.GetWaves()[i]
}

func (p *planner) waveClusters(i int32) []*capnv1.RolloutCluster {
	var out []*capnv1.RolloutCluster
	for _, c := range p.st.GetClusters() {
		if c.GetWave() == i {
			out = append(out, c)
		}
	}
	return out
}

// observe updates the current wave's moved clusters from what is
// observed; true when a regression halted the rollout.
func (p *planner) observe() bool {
	spec := p.in.Spec
	timeout := p.readyTimeout()
	for _, c := range p.waveClusters(p.st.GetCurrentWave()) {
		if c.GetState() != ClusterMoving && c.GetState() != ClusterReady {
			continue
		}
		o, ok := p.obs[c.GetName()]
		if !ok {
			c.State = ClusterSkipped
			c.Message = "the cluster went away or no longer matches the rollout"
			continue
		}
		// Machines of a cluster still rolling are unhealthy for a while;
		// health counts once the cluster is Ready at the change (or its
		// repair is blocked).
		if reason := unhealthy(o, spec.GetMaxUnhealthyMachines()); reason != "" && (o.Ready || o.RemediationBlocked) {
			return p.halt(c, reason)
		}
		switch c.GetState() {
		case ClusterMoving:
			if o.Ready {
				c.State = ClusterReady
				c.ReadySince = p.now
				c.Message = ""
				continue
			}
			deadline := c.GetMovedAt().AsTime().Add(timeout)
			if !p.in.Now.Before(deadline) {
				return p.halt(c, fmt.Sprintf("cluster %s not Ready at the change within %s", c.GetName(), timeout))
			}
			p.recheck(deadline)
		case ClusterReady:
			if !o.Ready {
				// Not Ready again (a status between two steps of its
				// roll, or trouble): back to Moving with a fresh ready
				// deadline, and the wave's soak starts over once all are
				// Ready again. Trouble that lasts halts at the deadline.
				c.State = ClusterMoving
				c.MovedAt = p.now
				c.ReadySince = nil
				c.Message = "not Ready at the change again; waiting up to the ready timeout"
				if w := p.wave(); w != nil && w.GetState() == WaveSoaking {
					w.State = WaveProgressing
					w.SoakUntil = nil
				}
				p.recheck(p.in.Now.Add(timeout))
			}
		}
	}
	return false
}

func (p *planner) readyTimeout() time.Duration {
	if d := p.in.Spec.GetReadyTimeout(); d != nil && d.AsDuration() > 0 {
		return d.AsDuration()
	}
	return DefaultReadyTimeout
}

// unhealthy is why o's health halts a rollout, or "".
func unhealthy(o Cluster, maxUnhealthy string) string {
	if o.RemediationBlocked {
		return fmt.Sprintf("cluster %s: remediation is blocked", o.Name)
	}
	if maxUnhealthy == "" {
		maxUnhealthy = "0"
	}
	limit, err := manifest.ResolveIntOrPercent(maxUnhealthy, o.Machines, false)
	if err != nil {
		limit = 0
	}
	if o.UnhealthyMachines > limit {
		return fmt.Sprintf("cluster %s: %d of %d machines unhealthy (at most %s allowed)", o.Name, o.UnhealthyMachines, o.Machines, maxUnhealthy)
	}
	return ""
}

func (p *planner) halt(c *capnv1.RolloutCluster, reason string) bool {
	st := p.st
	c.Message = reason
	st.Phase = PhaseHalted
	st.HaltReason = reason
	st.HaltedAt = p.now
	p.event(EventHalted, st.GetCurrentWave(), "rollout halted at wave %d: %s", st.GetCurrentWave(), reason)
	return true
}

// advance moves the current wave's pending clusters whose window is open
// and finishes the wave once its soak is over; true when the next wave
// started (plan it in the same call).
func (p *planner) advance() bool {
	st := p.st
	w := p.wave()
	if w == nil {
		return false
	}
	if w.GetState() == WavePending {
		w.State = WaveProgressing
		w.Started = p.now
		p.event(EventWaveStarted, w.GetIndex(), "wave %d of %d started: %d clusters", w.GetIndex()+1, len(st.GetWaves()), len(w.GetClusters()))
	}
	st.NextWindow = nil
	settled := true
	for _, c := range p.waveClusters(w.GetIndex()) {
		switch c.GetState() {
		case ClusterPending:
			o, ok := p.obs[c.GetName()]
			if !ok {
				c.State = ClusterSkipped
				c.Message = "the cluster went away or no longer matches the rollout"
				continue
			}
			settled = false
			if open, next := p.in.Window(c.GetName(), p.in.Now); !open {
				c.Message = "waiting for its maintenance window"
				if !next.IsZero() && (st.NextWindow == nil || next.Before(st.NextWindow.AsTime())) {
					st.NextWindow = timestamppb.New(next)
				}
				p.recheck(next)
				continue
			}
			c.State = ClusterMoving
			c.MovedAt = p.now
			c.Message = ""
			p.recheck(p.in.Now.Add(p.readyTimeout()))
			if !o.AtChange {
				p.res.Move = append(p.res.Move, c.GetName())
			}
		case ClusterMoving:
			settled = false
		}
	}
	if !settled {
		return false
	}
	if w.GetSoakUntil() == nil {
		soak := p.in.Spec.GetSoak().AsDuration()
		w.State = WaveSoaking
		w.SoakUntil = timestamppb.New(p.in.Now.Add(soak))
	}
	if p.in.Now.Before(w.GetSoakUntil().AsTime()) {
		p.recheck(w.GetSoakUntil().AsTime())
		return false
	}
	for _, c := range p.waveClusters(w.GetIndex()) {
		if c.GetState() == ClusterReady {
			c.State = ClusterDone
		}
	}
	w.State = WaveDone
	w.Finished = p.now
	p.event(EventWaveFinished, w.GetIndex(), "wave %d of %d finished", w.GetIndex()+1, len(st.GetWaves()))
	st.CurrentWave++
	if int(st.GetCurrentWave()) >= len(st.GetWaves()) {
		st.CurrentWave = int32(len(st.GetWaves()) - 1)
		st.Phase = PhaseCompleted
		p.event(EventCompleted, w.GetIndex(), "rollout completed: %d waves", len(st.GetWaves()))
		return false
	}
	return true
}
