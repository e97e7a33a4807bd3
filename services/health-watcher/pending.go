package healthwatcher

import (
	"sync"
	"time"
)

// pending remembers, per cluster, what changed since the cluster was last
// evaluated, so that a change to one machine's records re-evaluates that
// machine and not its whole cluster. A fleet create changes each machine's
// records about a dozen times; evaluating the whole cluster each time cost
// the health-watcher ten evaluations per change at ten machines a cluster.
//
// The whole cluster is evaluated when something cluster-wide changed (the
// spec and its policies, the control plane's initialisation, a resync, the
// Nodes read from the workload cluster), when the time-based verdict of
// some machine may have changed (the wake the last evaluations asked for),
// after a failed evaluation, and whenever nothing is recorded (a run the
// queue made for an Add that an earlier run already took).
type pending struct {
	mu       sync.Mutex
	machines map[string]map[string]struct{} // by cluster
	whole    map[string]bool
	wake     map[string]time.Time // by cluster: the earliest a verdict may change by time alone
	// leases are, by cluster, what its evaluations said of time (see
	// renew): a settled cluster's wake comes when its nodes' heartbeat
	// graces would run out, which their heartbeats keep moving.
	leases map[string]lease
	// controlPlane is, by cluster, the last control-plane initialisation
	// seen in its observed status: the only part of a status the
	// evaluation reads, so the other status writes (a machine's phase
	// counted, many per machine) change nothing here.
	controlPlane map[string]controlPlaneInit
	// infraDeleted holds the infrastructure records (by key) last seen
	// marked Deleted, the only state of one the evaluation reads: the
	// provider's other writes (two or three per machine in a create)
	// change nothing here.
	infraDeleted map[string]struct{}
}

// lease is what a cluster's evaluations said of time: until other (zero:
// no such time), and while each listed machine's latest heartbeat is
// younger than its grace, no verdict of the cluster changes by time alone.
type lease struct {
	other  time.Time
	graces map[string]time.Duration
}

type controlPlaneInit struct {
	initialized bool
	at          time.Time
}

func newPending() *pending {
	return &pending{machines: map[string]map[string]struct{}{}, whole: map[string]bool{},
		wake: map[string]time.Time{}, leases: map[string]lease{}, controlPlane: map[string]controlPlaneInit{}, infraDeleted: map[string]struct{}{}}
}

// mark records a change to machine of cluster ("": to the whole cluster).
func (p *pending) mark(cluster, machine string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if machine == "" {
		p.whole[cluster] = true
		return
	}
	m := p.machines[cluster]
	if m == nil {
		m = map[string]struct{}{}
		p.machines[cluster] = m
	}
	m[machine] = struct{}{}
}

// controlPlaneChanged records the control-plane initialisation of
// cluster's status and reports whether it differs from the last seen.
func (p *pending) controlPlaneChanged(cluster string, c controlPlaneInit) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, seen := p.controlPlane[cluster]
	p.controlPlane[cluster] = c
	return !seen || old.initialized != c.initialized || !old.at.Equal(c.at)
}

// infraDeletedChanged records whether the infrastructure record key is
// marked Deleted and reports whether that differs from the last seen (a
// record never seen counts as not Deleted: the evaluation reads a missing
// record and one not Deleted alike).
func (p *pending) infraDeletedChanged(key string, deleted bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, was := p.infraDeleted[key]
	if deleted {
		p.infraDeleted[key] = struct{}{}
	} else {
		delete(p.infraDeleted, key)
	}
	return was != deleted
}

// take returns and forgets what changed in cluster: the machines to
// evaluate, or nil for all of them. renewable reports that nothing changed
// and the wake has come: a lease may make the evaluation unnecessary.
func (p *pending) take(cluster string, now time.Time) (only map[string]struct{}, renewable bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, whole := p.machines[cluster], p.whole[cluster]
	delete(p.machines, cluster)
	delete(p.whole, cluster)
	w, ok := p.wake[cluster]
	due := ok && !now.Before(w)
	if whole || len(m) == 0 || due {
		return nil, !whole && len(m) == 0 && due
	}
	return m, false
}

// renew re-arms the wake of a cluster whose wake came with nothing
// changed, without evaluating it, when its lease still holds: its other
// time has not come and every leased machine has been heard from within
// its grace since (lastBeat: a machine's latest heartbeat, zero if none).
// The new wake is the soonest of the lease's times and limit.
func (p *pending) renew(cluster string, now, limit time.Time, lastBeat func(machine string) time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.leases[cluster]
	if !ok || (!l.other.IsZero() && !now.Before(l.other)) {
		return time.Time{}, false
	}
	next := limit
	if !l.other.IsZero() && l.other.Before(next) {
		next = l.other
	}
	for m, g := range l.graces {
		d := lastBeat(m).Add(g)
		if !now.Before(d) {
			return time.Time{}, false
		}
		if d.Before(next) {
			next = d
		}
	}
	p.wake[cluster] = next
	return next, true
}

// evaluated records an evaluation of the machines in only (nil: of the
// whole cluster) and the wake it asks for (at, zero: none), and returns
// the cluster's next wake: at itself after a whole evaluation, the sooner
// of at and the wake already set after a partial one. The cluster's lease
// becomes r after a whole evaluation; a partial one updates the machines
// it evaluated (a cluster with no lease gets none from a partial one).
func (p *pending) evaluated(cluster string, only map[string]struct{}, at time.Time, r Recheck) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	whole := only == nil
	if whole {
		p.leases[cluster] = lease{other: r.Other, graces: r.Graces}
	} else if l, ok := p.leases[cluster]; ok {
		if !r.Other.IsZero() && (l.other.IsZero() || r.Other.Before(l.other)) {
			l.other = r.Other
		}
		for m := range only {
			delete(l.graces, m)
			if g, ok := r.Graces[m]; ok {
				l.graces[m] = g
			}
		}
		p.leases[cluster] = l
	}
	if w, ok := p.wake[cluster]; !whole && ok && (at.IsZero() || w.Before(at)) {
		at = w
	}
	if at.IsZero() {
		delete(p.wake, cluster)
	} else {
		p.wake[cluster] = at
	}
	return at
}

// forget drops a cluster that is gone.
func (p *pending) forget(cluster string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.machines, cluster)
	delete(p.whole, cluster)
	delete(p.wake, cluster)
	delete(p.leases, cluster)
	delete(p.controlPlane, cluster)
}
