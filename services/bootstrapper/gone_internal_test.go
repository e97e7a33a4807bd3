package bootstrapper

import (
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
