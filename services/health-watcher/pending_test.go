package healthwatcher

import (
	"maps"
	"slices"
	"testing"
	"time"
)

func TestPending(t *testing.T) {
	now := t0
	names := func(m map[string]struct{}) []string { return slices.Sorted(maps.Keys(m)) }

	p := newPending()
	if got := p.take("c1", now); got != nil {
		t.Fatalf("nothing marked: take = %v, want nil (every machine)", names(got))
	}
	p.mark("c1", "m1")
	p.mark("c1", "m2")
	p.mark("c2", "m9")
	if got := names(p.take("c1", now)); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Fatalf("take = %v, want the machines marked", got)
	}
	if got := p.take("c1", now); got != nil {
		t.Fatalf("take again = %v, want nil: what was taken is forgotten", names(got))
	}
	p.mark("c1", "m1")
	p.mark("c1", "")
	if got := p.take("c1", now); got != nil {
		t.Fatalf("whole cluster marked: take = %v, want nil", names(got))
	}

	// Wakes: a whole evaluation sets the wake; a partial one keeps the
	// sooner; a wake that is due makes the next evaluation whole.
	if w := p.evaluated("c1", true, now.Add(time.Minute)); !w.Equal(now.Add(time.Minute)) {
		t.Fatalf("wake after a whole evaluation = %s", w.Sub(now))
	}
	if w := p.evaluated("c1", false, now.Add(5*time.Minute)); !w.Equal(now.Add(time.Minute)) {
		t.Fatalf("a partial evaluation's later wake replaced the sooner: %s", w.Sub(now))
	}
	if w := p.evaluated("c1", false, now.Add(10*time.Second)); !w.Equal(now.Add(10 * time.Second)) {
		t.Fatalf("a partial evaluation's sooner wake not kept: %s", w.Sub(now))
	}
	if w := p.evaluated("c1", true, now.Add(5*time.Minute)); !w.Equal(now.Add(5 * time.Minute)) {
		t.Fatalf("a whole evaluation's wake = %s, want its own", w.Sub(now))
	}
	p.mark("c1", "m1")
	if got := p.take("c1", now.Add(5*time.Minute)); got != nil {
		t.Fatalf("wake due: take = %v, want nil (every machine)", names(got))
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
