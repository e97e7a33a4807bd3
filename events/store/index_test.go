package store

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
)

// The group index must answer exactly what a full scan answers.
func TestListIndexMatchesScan(t *testing.T) {
	kv := newKV(t)
	ctx := testCtx(t)
	c := NewCache(kv, CacheOptions{})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		put(t, kv, fmt.Sprintf("machine.c%d.m%d", i%4, i), int32(i))
	}
	put(t, kv, "machine.c1", 1) // two tokens: no group
	put(t, kv, "cluster.c1", 1)
	for i := 0; i < 60; i += 7 {
		if err := kv.Delete(ctx, fmt.Sprintf("machine.c%d.m%d", i%4, i)); err != nil {
			t.Fatal(err)
		}
	}
	// A group that empties leaves its kind; one that fills again is back.
	put(t, kv, "node.c5.a", 1)
	put(t, kv, "node.c6.a", 1)
	put(t, kv, "addonset.x", 1)
	for _, k := range []string{"node.c5.a", "node.c6.a", "addonset.x"} {
		if err := kv.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	put(t, kv, "node.c5.b", 1)
	natstest.WaitFor(t, 5*time.Second, "the cache at the last write", func() bool { return c.Revision() >= 62+9+7 })
	for _, prefix := range []string{"machine.c1.", "machine.c2.", "machine.c9.", "machine.", "machine.c1", "cluster.", "node.", "node.c6.", "addonset.", "nothing.", ""} {
		got := keysOf(c.List(prefix))
		var want []string
		for _, e := range c.List("") {
			if strings.HasPrefix(e.Key, prefix) {
				want = append(want, e.Key)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("List(%q) = %v, want %v", prefix, got, want)
		}
	}
	if n := len(c.List("machine.c1.")); n == 0 {
		t.Fatal("index returned nothing for a populated group")
	}
	if got := keysOf(c.List("node.")); !slices.Equal(got, []string{"node.c5.b"}) {
		t.Errorf("List(node.) = %v, want [node.c5.b]", got)
	}
	if got := len(c.List("machine.")); got != 60-9+1 {
		t.Errorf("List(machine.) has %d keys, want %d", got, 60-9+1)
	}
}

func keysOf(es []RawEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Key)
	}
	return out
}
