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
	natstest.WaitFor(t, 5*time.Second, "the cache at the last delete", func() bool { return c.Revision() >= 62+9 })
	for _, prefix := range []string{"machine.c1.", "machine.c2.", "machine.c9.", "machine.", "machine.c1", "cluster.", ""} {
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
}

func keysOf(es []RawEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Key)
	}
	return out
}
