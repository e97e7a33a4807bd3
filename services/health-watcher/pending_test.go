package healthwatcher

import (
	"maps"
	"slices"
	"testing"
	"time"
)

func TestPending(t *testing.T) {
	now := t0
	names := func(m map[string]struct{}, _ bool) []string { return slices.Sorted(maps.Keys(m)) }
	only := func(m map[string]struct{}, _ bool) map[string]struct{} { return m }

	p := newPending()
	if got := only(p.take("c1", now)); got != nil {
		t.Fatalf("nothing marked: take = %v, want nil (every machine)", names(got, false))
	}
	p.mark("c1", "m1")
	p.mark("c1", "m2")
	p.mark("c2", "m9")
	if got := names(p.take("c1", now)); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Fatalf("take = %v, want the machines marked", got)
	}
	if got := only(p.take("c1", now)); got != nil {
		t.Fatalf("take again = %v, want nil: what was taken is forgotten", names(got, false))
	}
	p.mark("c1", "m1")
	p.mark("c1", "")
	if got := only(p.take("c1", now)); got != nil {
		t.Fatalf("whole cluster marked: take = %v, want nil", names(got, false))
	}

	m1 := map[string]struct{}{"m1": {}}
	// Wakes: a whole evaluation sets the wake; a partial one keeps the
	// sooner; a wake that is due makes the next evaluation whole.
	if w := p.evaluated("c1", nil, now.Add(time.Minute), Recheck{}); !w.Equal(now.Add(time.Minute)) {
		t.Fatalf("wake after a whole evaluation = %s", w.Sub(now))
	}
	if w := p.evaluated("c1", m1, now.Add(5*time.Minute), Recheck{}); !w.Equal(now.Add(time.Minute)) {
		t.Fatalf("a partial evaluation's later wake replaced the sooner: %s", w.Sub(now))
	}
	if w := p.evaluated("c1", m1, now.Add(10*time.Second), Recheck{}); !w.Equal(now.Add(10 * time.Second)) {
		t.Fatalf("a partial evaluation's sooner wake not kept: %s", w.Sub(now))
	}
	if w := p.evaluated("c1", nil, now.Add(5*time.Minute), Recheck{}); !w.Equal(now.Add(5 * time.Minute)) {
		t.Fatalf("a whole evaluation's wake = %s, want its own", w.Sub(now))
	}
	p.mark("c1", "m1")
	if got, renewable := p.take("c1", now.Add(5*time.Minute)); got != nil || renewable {
		t.Fatalf("wake due, a machine marked: take = %v, %v, want nil (every machine), not renewable", names(got, false), renewable)
	}

	// Only a change of the control plane's initialisation counts.
	cp := controlPlaneInit{initialized: true, at: now}
	if !p.controlPlaneChanged("c1", controlPlaneInit{}) {
		t.Error("first status seen: not reported as a change")
	}
	if p.controlPlaneChanged("c1", controlPlaneInit{}) {
		t.Error("same status reported as a change")
	}
	if !p.controlPlaneChanged("c1", cp) || p.controlPlaneChanged("c1", cp) {
		t.Error("initialisation: not reported once")
	}
	p.forget("c1")
	if !p.controlPlaneChanged("c1", cp) {
		t.Error("after forget: not reported as a change")
	}
	if got := names(p.take("c2", now)); !slices.Equal(got, []string{"m9"}) {
		t.Errorf("another cluster's marks: %v", got)
	}
}

// Of a machine's infrastructure record, only its being marked Deleted
// changes an evaluation: the provider's other writes mark nothing.
func TestPendingInfraDeleted(t *testing.T) {
	p := newPending()
	const k = "infra.sim.c1.m1"
	steps := []struct {
		deleted, changed bool
	}{
		{false, false}, // first seen, not Deleted: as if missing
		{false, false}, // another write, still not Deleted
		{true, true},   // marked Deleted
		{true, false},  // rewritten, still Deleted
		{false, true},  // not Deleted again (a new incarnation's record), or removed
		{false, false},
	}
	for i, s := range steps {
		if got := p.infraDeletedChanged(k, s.deleted); got != s.changed {
			t.Errorf("step %d (deleted %v): changed = %v, want %v", i, s.deleted, got, s.changed)
		}
	}
	if len(p.infraDeleted) != 0 {
		t.Errorf("remembered %v after the record stopped being Deleted, want nothing", p.infraDeleted)
	}
}

// A wake that comes with nothing changed is renewed without an evaluation
// while the lease holds: every leased machine heard from within its grace,
// the other time not come; otherwise the cluster is evaluated.
func TestPendingLease(t *testing.T) {
	now := t0
	grace := 2 * time.Minute
	beats := map[string]time.Time{"m1": now, "m2": now.Add(10 * time.Second)}
	lastBeat := func(m string) time.Time { return beats[m] }
	limit := func(at time.Time) time.Time { return at.Add(time.Minute) }

	p := newPending()
	if _, ok := p.renew("c1", now, limit(now), lastBeat); ok {
		t.Fatal("renewed a cluster never evaluated")
	}
	r := Recheck{At: now.Add(grace), Other: now.Add(10 * time.Minute), Graces: map[string]time.Duration{"m1": grace, "m2": grace}}
	if w := p.evaluated("c1", nil, r.At, r); !w.Equal(now.Add(grace)) {
		t.Fatalf("wake = %s, want the first grace", w.Sub(now))
	}
	// Nothing marked, wake not due: a run for an Add already taken
	// evaluates (not renewable).
	if got, renewable := p.take("c1", now.Add(time.Minute)); got != nil || renewable {
		t.Fatalf("wake not due: take = %v, %v, want nil, not renewable", got, renewable)
	}
	at := now.Add(grace)
	if got, renewable := p.take("c1", at); got != nil || !renewable {
		t.Fatalf("wake due, nothing marked: take = %v, %v, want nil, renewable", got, renewable)
	}
	// Neither node was heard from since: m1's grace ran out.
	if _, ok := p.renew("c1", at, limit(at), lastBeat); ok {
		t.Fatal("renewed with m1's grace run out")
	}
	// Both were: the next wake is the sooner of their graces and the limit.
	beats["m1"], beats["m2"] = at.Add(-30*time.Second), at.Add(-50*time.Second)
	if w, ok := p.renew("c1", at, at.Add(5*time.Minute), lastBeat); !ok || !w.Equal(beats["m2"].Add(grace)) {
		t.Fatalf("renew = %s, %v, want m2's grace (%s)", w.Sub(at), ok, beats["m2"].Add(grace).Sub(at))
	}
	if w, ok := p.renew("c1", at, limit(at), lastBeat); !ok || !w.Equal(limit(at)) {
		t.Fatalf("renew = %s, %v, want the limit", w.Sub(at), ok)
	}
	// A partial evaluation replaces its machines' leases: m2 no longer
	// fresh (no grace), a sooner other time.
	p.evaluated("c1", map[string]struct{}{"m2": {}}, time.Time{}, Recheck{Other: at.Add(20 * time.Second), Graces: map[string]time.Duration{}})
	beats["m1"] = at
	if w, ok := p.renew("c1", at, limit(at), lastBeat); !ok || !w.Equal(at.Add(20*time.Second)) {
		t.Fatalf("renew after the partial evaluation = %s, %v, want its other time", w.Sub(at), ok)
	}
	if _, ok := p.renew("c1", at.Add(20*time.Second), limit(at), lastBeat); ok {
		t.Fatal("renewed at the other time: a verdict may change then")
	}
	// A cluster with no lease gets none from a partial evaluation.
	p.evaluated("c2", map[string]struct{}{"m1": {}}, now.Add(time.Minute), r)
	if _, ok := p.renew("c2", now, limit(now), lastBeat); ok {
		t.Fatal("renewed on a lease made of a partial evaluation")
	}
	p.forget("c1")
	if _, ok := p.renew("c1", at, limit(at), lastBeat); ok {
		t.Fatal("renewed a forgotten cluster")
	}
}
