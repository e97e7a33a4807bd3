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

type controlPlaneInit struct {
	initialized bool
	at          time.Time
}

func newPending() *pending {
	return &pending{machines: map[string]map[string]struct{}{}, whole: map[string]bool{},
		wake: map[string]time.Time{}, controlPlane: map[string]controlPlaneInit{}, infraDeleted: map[string]struct{}{}}
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
// evaluate, or nil for all of them.
func (p *pending) take(cluster string, now time.Time) map[string]struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, whole := p.machines[cluster], p.whole[cluster]
	delete(p.machines, cluster)
	delete(p.whole, cluster)
	if w, ok := p.wake[cluster]; whole || len(m) == 0 || (ok && !now.Before(w)) {
		return nil
	}
	return m
}

// evaluated records the wake an evaluation asks for (at, zero: none) and
// returns the cluster's next wake: at itself after a whole evaluation, the
// sooner of at and the wake already set after a partial one.
func (p *pending) evaluated(cluster string, whole bool, at time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
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
	delete(p.controlPlane, cluster)
}
