package store

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func TestFacts(t *testing.T) {
	kv := newKV(t)
	rev := put(t, kv, "k.a", 2)
	garbage, err := kv.Put(context.Background(), "k.bad", []byte{0xff, 0xff})
	if err != nil {
		t.Fatal(err)
	}
	c := NewCache(kv, CacheOptions{})
	startCache(t, c)
	natstest.WaitFor(t, 5*time.Second, "load", func() bool { return c.Revision() >= garbage })
	var decodes atomic.Int32
	f := DecodedFacts(c, func() *capnv1.PoolStatus { decodes.Add(1); return newPool() },
		func(p *capnv1.PoolStatus) int32 { return p.GetReplicas() })

	check := func(key string, want int32, wantRev uint64, wantOK bool, wantDecodes int32) {
		t.Helper()
		got, r, ok := f.Get(key)
		if got != want || r != wantRev || ok != wantOK {
			t.Errorf("Get(%s) = %d@%d %v, want %d@%d %v", key, got, r, ok, want, wantRev, wantOK)
		}
		if n := decodes.Load(); n != wantDecodes {
			t.Errorf("after Get(%s): %d decodes in all, want %d", key, n, wantDecodes)
		}
	}
	check("k.a", 2, rev, true, 1)
	check("k.a", 2, rev, true, 1) // unchanged: remembered, not decoded again
	check("k.nope", 0, 0, false, 1)
	check("k.bad", 0, garbage, false, 2) // there, but garbage: absent, with its revision
	check("k.bad", 0, garbage, false, 2) // remembered as garbage too

	// A new revision is derived again.
	rev2 := put(t, kv, "k.a", 5)
	natstest.WaitFor(t, 5*time.Second, "the update", func() bool { return c.Revision() >= rev2 })
	check("k.a", 5, rev2, true, 3)
	check("k.a", 5, rev2, true, 3)

	// A key gone from the cache is dropped at its next Get; Forget drops
	// one at once.
	if err := kv.Delete(context.Background(), "k.a"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, "the delete", func() bool { _, ok := c.Get("k.a"); return !ok })
	if n := f.Len(); n != 2 {
		t.Errorf("remembered %d keys before the Get of the deleted one, want 2", n)
	}
	check("k.a", 0, 0, false, 3)
	if n := f.Len(); n != 1 {
		t.Errorf("remembered %d keys after it, want 1 (k.bad)", n)
	}
	f.Forget("k.bad")
	if n := f.Len(); n != 0 {
		t.Errorf("remembered %d keys after Forget, want 0", n)
	}
}
