package bootstrapper

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/capn-dev/capn/events/store"
)

// A cluster is listed at its first pass, not again while it stays clean,
// and again after one of its machines is deleted, a resync, or its
// removal.
func TestGoneMemo(t *testing.T) {
	s := &Service{}
	changed := s.desiredMachineChanged(func() []string { return []string{"c1", "c2"} })
	begin := func(c string) bool { return s.gone.begin(c) }
	if !begin("c1") || begin("c1") {
		t.Fatal("want a listing at the first pass only")
	}
	if got := changed(store.Change{Key: "machine.c1.m1", Op: store.OpPut}); !slices.Equal(got, []string{"c1"}) || begin("c1") {
		t.Fatalf("a machine written: passes %v; want c1, without a listing", got)
	}
	if got := changed(store.Change{Key: "machine.c1.m1", Op: store.OpDelete}); !slices.Equal(got, []string{"c1"}) || !begin("c1") {
		t.Fatalf("a machine deleted: passes %v; want c1, with a listing", got)
	}
	begin("c2")
	if got := changed(store.Change{Resync: true}); !slices.Equal(got, []string{"c1", "c2"}) || !begin("c1") || !begin("c2") {
		t.Fatalf("a resync: passes %v; want every cluster, listed", got)
	}
	s.gone.forget("c1")
	if !begin("c1") {
		t.Fatal("a removed cluster was taken as clean")
	}
	if got := changed(store.Change{Key: "machine.garbage", Op: store.OpDelete}); got != nil {
		t.Fatalf("a key of no cluster: passes %v", got)
	}
}

// After a start or a resync, one audit of every cluster's stored data is
// made, by the first pass (the others wait for it): only the clusters it
// suspects, and those dirtied since, are listed on their own. A failed
// audit lists every cluster.
func TestGoneAudit(t *testing.T) {
	ctx := context.Background()
	s := &Service{}
	changed := s.desiredMachineChanged(func() []string { return []string{"c1", "c2", "c3"} })
	audits := 0
	list := func(suspect map[string]bool, err error) func(context.Context) (map[string]bool, error) {
		return func(context.Context) (map[string]bool, error) {
			audits++
			return suspect, err
		}
	}
	pass := func(c string, l func(context.Context) (map[string]bool, error)) bool {
		t.Helper()
		if err := s.gone.audited(ctx, l); err != nil {
			t.Fatal(err)
		}
		return s.gone.begin(c)
	}
	l := list(map[string]bool{"c2": true}, nil)
	if pass("c1", l) || !pass("c2", l) || pass("c3", l) || audits != 1 {
		t.Fatalf("after the start: %d audits, want 1 listing c2 alone", audits)
	}
	s.gone.dirty("c3")
	if !pass("c3", l) || pass("c2", l) || audits != 1 {
		t.Fatal("a cluster dirtied after the audit is not listed, or a listed one again")
	}
	changed(store.Change{Resync: true})
	l = list(nil, errors.New("no responders"))
	if !pass("c1", l) || !pass("c2", l) || !pass("c3", l) || audits != 2 {
		t.Fatalf("after a resync whose audit failed: %d audits, want 2 and every cluster listed", audits)
	}

	// Passes during the audit wait for it; a cluster dirtied meanwhile is
	// listed.
	changed(store.Change{Resync: true})
	started, release := make(chan struct{}), make(chan struct{})
	slow := func(context.Context) (map[string]bool, error) {
		close(started)
		<-release
		return map[string]bool{}, nil
	}
	first := make(chan bool)
	go func() { first <- pass("c1", slow) }()
	<-started
	s.gone.dirty("c2")
	second := make(chan bool)
	go func() { second <- pass("c2", list(nil, nil)) }()
	close(release)
	if <-first || !<-second || pass("c3", l) {
		t.Fatal("want only c2, dirtied during the audit, listed")
	}
}
