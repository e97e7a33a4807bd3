package store

import (
	"context"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
)

func TestView(t *testing.T) {
	kv := newKV(t)
	revs := []uint64{put(t, kv, "k.b", 1), put(t, kv, "k.a", 2), put(t, kv, "x.c", 3)}
	garbage, err := kv.Put(context.Background(), "k.bad", []byte{0xff, 0xff})
	if err != nil {
		t.Fatal(err)
	}
	c := NewCache(kv, CacheOptions{})
	startCache(t, c)
	natstest.WaitFor(t, 5*time.Second, "load", func() bool { return c.Revision() >= garbage })
	v := NewView(c, newPool)

	tests := []struct {
		key      string
		replicas int32
		rev      uint64
		ok       bool
	}{
		{key: "k.a", replicas: 2, rev: revs[1], ok: true},
		{key: "x.c", replicas: 3, rev: revs[2], ok: true},
		{key: "k.nope"},
		{key: "k.bad", rev: garbage}, // there, but garbage: absent, with its revision
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			got, rev, ok := v.Get(tt.key)
			if ok != tt.ok || rev != tt.rev || got.GetReplicas() != tt.replicas {
				t.Errorf("Get = %v@%d %v, want replicas %d@%d %v", got, rev, ok, tt.replicas, tt.rev, tt.ok)
			}
		})
	}

	// Each Get decodes afresh: the caller owns what it gets.
	a, _, _ := v.Get("k.a")
	a.Replicas = 99
	if again, _, _ := v.Get("k.a"); again.Replicas != 2 {
		t.Errorf("a change to a returned value reached the cache: %v", again)
	}

	list, bad := v.List("k.")
	if len(list) != 2 || list[0].Key != "k.a" || list[0].Revision != revs[1] || list[1].Key != "k.b" || list[1].Value.Replicas != 1 {
		t.Errorf("List values %+v, want k.a@%d then k.b (1 replica)", list, revs[1])
	}
	if len(bad) != 1 || bad[0].Key != "k.bad" || bad[0].Revision != garbage || bad[0].Err == nil {
		t.Errorf("List undecodable %+v, want k.bad@%d with its error", bad, garbage)
	}
	if v.Cache() != c {
		t.Error("Cache() is not the cache the view reads")
	}
}
