package sim

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// The simulation's only goroutine is the scheduler: one timer and one
// min-heap of due times for every machine (boot, next heartbeat, vanish).
// A machine costs one heap entry, not a goroutine or a ticker, so 10,000
// idle machines cost one wake-up per Resolution at most.

// Resolution is how early the scheduler may handle an entry: each wake-up
// handles everything due within it, so entries close together share one
// wake-up.
const Resolution = 50 * time.Millisecond

type eventKind uint8

const (
	evBoot   eventKind = iota // Creating -> Running, first heartbeat
	evBeat                    // a heartbeat of a running node
	evVanish                  // the machine disappears out of band
)

// entry is one scheduled event. It is stale, and skipped, when its machine
// is gone or its gen (boot, heartbeat) or time (vanish) no longer match.
type entry struct {
	at   time.Time
	key  string
	gen  uint64
	kind eventKind
}

// schedule is a min-heap of entries by time (container/heap).
type schedule []entry

func (s schedule) Len() int           { return len(s) }
func (s schedule) Less(i, j int) bool { return s[i].at.Before(s[j].at) }
func (s schedule) Swap(i, j int)      { s[i], s[j] = s[j], s[i] }
func (s *schedule) Push(x any)        { *s = append(*s, x.(entry)) }
func (s *schedule) Pop() any {
	old := *s
	e := old[len(old)-1]
	*s = old[:len(old)-1]
	return e
}

// work is what one wake-up has to do outside the lock.
type work struct {
	reports  []*capnv1.InfraMachine
	beats    []beat
	vanished [][2]string // cluster, machine
}

// Run is the scheduler: it boots machines, publishes their nodes'
// heartbeats and makes machines vanish, until ctx ends. It is the sdk
// Runner; env.Reporter reports boots, env.JS publishes heartbeats.
func (p *Provider) Run(ctx context.Context, env sdk.Env) error {
	p.env.Store(&env)
	log := env.Log.With().Str("component", "scheduler").Logger()
	log.Debug().Dur("heartbeat_every", p.opts.HeartbeatEvery).Msg("simulation running")
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		w, next := p.due(p.now())
		p.perform(ctx, env, w)
		if next.IsZero() {
			timer.Reset(time.Hour)
		} else {
			timer.Reset(max(time.Until(next), 0))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-p.wake:
		}
	}
}

// due pops every entry due by now+Resolution, applies it to the machines
// and returns the I/O to do and the time of the next entry (zero if none).
func (p *Provider) due(now time.Time) (work, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var w work
	horizon := now.Add(Resolution)
	for len(p.sched) > 0 && !p.sched[0].at.After(horizon) {
		e := heap.Pop(&p.sched).(entry)
		m, ok := p.machines[e.key]
		if !ok {
			continue
		}
		switch e.kind {
		case evBoot:
			if m.gen != e.gen || m.im.GetStateValue() != sdk.StateCreating {
				continue
			}
			p.setState(m, sdk.StateRunning)
			w.reports = append(w.reports, clone(m.im))
			w.beats = append(w.beats, beatOf(m, e.at))
			heap.Push(&p.sched, entry{at: e.at.Add(p.opts.HeartbeatEvery), key: e.key, gen: m.gen, kind: evBeat})
			p.scheduleVanish(m, now)
		case evBeat:
			if m.gen != e.gen || m.im.GetStateValue() != sdk.StateRunning {
				continue
			}
			w.beats = append(w.beats, beatOf(m, e.at))
			next := e.at.Add(p.opts.HeartbeatEvery)
			if next.Before(now) { // far behind (e.g. the process was paused): do not burst
				next = now.Add(p.opts.HeartbeatEvery)
			}
			heap.Push(&p.sched, entry{at: next, key: e.key, gen: m.gen, kind: evBeat})
		case evVanish:
			if !m.vanishAt.Equal(e.at) {
				continue
			}
			delete(p.machines, e.key)
			w.vanished = append(w.vanished, [2]string{m.im.GetCluster(), m.im.GetMachine()})
		}
	}
	if len(p.sched) == 0 {
		return w, time.Time{}
	}
	return w, p.sched[0].at
}

// scheduleVanish decides, once per boot or adoption, whether the machine
// vanishes VanishAfter from now. p.mu must be held.
func (p *Provider) scheduleVanish(m *machine, now time.Time) {
	c, name := m.im.GetCluster(), m.im.GetMachine()
	if p.opts.VanishRate <= 0 || roll(p.opts.Seed, "vanish", c, name) >= p.opts.VanishRate {
		return
	}
	m.vanishAt = now.Add(p.opts.VanishAfter)
	heap.Push(&p.sched, entry{at: m.vanishAt, key: key(c, name), kind: evVanish})
}

// perform does a wake-up's I/O: reports first (a node reports only once
// its machine is recorded Running), then heartbeats, then rechecks of
// vanished machines. Failures are logged; the SDK's reconcile repairs a
// lost report, and a lost heartbeat is followed by the next one.
func (p *Provider) perform(ctx context.Context, env sdk.Env, w work) {
	p.report(ctx, env, w.reports)
	p.publish(ctx, env, w.beats)
	for _, v := range w.vanished {
		env.Log.Info().Str("cluster", v[0]).Str("machine", v[1]).Msg("simulated machine vanished out of band")
		env.Reporter.Recheck(v[0], v[1])
	}
}

// reportWorkers bounds the reports written at once when many machines boot
// in one wake-up (a create storm); each report is a KV round trip or two.
const reportWorkers = 8

// report writes boot reports, a few at a time, and returns when all are
// done. A machine appears at most once per wake-up, so a machine's reports
// stay in order.
func (p *Provider) report(ctx context.Context, env sdk.Env, reports []*capnv1.InfraMachine) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, reportWorkers)
	for _, m := range reports {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := env.Reporter.Report(rctx, m); err != nil && ctx.Err() == nil {
				env.Log.Warn().Err(err).Str("cluster", m.GetCluster()).Str("machine", m.GetMachine()).Msg("cannot report the boot; the drift reconcile will repair it")
			}
		}()
	}
	wg.Wait()
}
