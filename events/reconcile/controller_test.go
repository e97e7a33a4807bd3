package reconcile_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// seen records the keys a reconcile was called with.
type seen struct {
	mu   sync.Mutex
	keys []string
}

func (s *seen) reconcile(_ context.Context, key string) (reconcile.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append(s.keys, key)
	return reconcile.Result{}, nil
}

func (s *seen) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.keys, key)
}

func (s *seen) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, k := range s.keys {
		if k == key {
			n++
		}
	}
	return n
}

// TestControllersShareACacheAndWireEverySource runs two controllers over one
// cache (started once: a second Start fails, and Run with it) and checks
// that each source wakes its own reconcile: a watched prefix mapped by Key,
// a resync by Resync, a consumer's handler through Queue.
func TestControllersShareACacheAndWireEverySource(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	cache := store.NewCache(kv, store.CacheOptions{ResyncEvery: store.NoResync})
	clusterOf := func(k string) string { return strings.Split(k, ".")[1] }

	var clusters, machines seen
	queue := reconcile.NewQueue()
	first := &reconcile.Controller{
		Watches: []reconcile.Source{{Cache: cache, Prefixes: []string{"cluster.", "machine."}, Key: clusterOf}},
		Resync:  func() []string { return []string{"resynced"} },
		Consumers: []reconcile.Consumer{{
			Spec: events.ConsumerSpec{Stream: events.StreamCommands, Durable: "controller-test", Filters: []string{"capn.cmd.>"}},
			Handler: events.Typed(func(_ context.Context, _ *events.Message, e *capnv1.MachineEvent) error {
				queue.Add(e.GetCluster())
				return nil
			}),
		}},
		Reconcile: clusters.reconcile,
		Queue:     queue,
	}
	second := &reconcile.Controller{
		Watches: []reconcile.Source{{Cache: cache, Prefixes: []string{"machine."}, Key: func(k string) string {
			return strings.TrimPrefix(k, "machine.")
		}}},
		Reconcile: machines.reconcile,
		Workers:   2,
	}
	ready := make(chan bool, 1)
	done := make(chan error, 1)
	go func() {
		done <- reconcile.Run(ctx, reconcile.Env{JS: js, Log: zerolog.Nop(), Ready: func(r bool) { ready <- r }}, first, second)
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run returned before it was ready: %v", err)
	}

	for _, k := range []string{"cluster.a", "machine.b.m1", "other.c"} {
		if _, err := kv.Put(ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, 5*time.Second, "watched keys reconciled", func() bool {
		return clusters.has("a") && clusters.has("b") && machines.has("b.m1")
	})
	cache.Resync()
	natstest.WaitFor(t, 5*time.Second, "resync keys reconciled", func() bool { return clusters.has("resynced") })
	p := events.NewPublisher(js, "capn/test")
	if _, err := p.Publish(ctx, events.CommandSubject("w", "v", "from-event", "m"), "t", "id1", &capnv1.MachineEvent{Cluster: "from-event"}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, "the consumer's key reconciled", func() bool { return clusters.has("from-event") })
	if clusters.has("c") || machines.has("") || machines.count("b.m1") != 1 {
		t.Fatalf("unexpected reconciles: clusters %v, machines %v", clusters.keys, machines.keys)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancel")
	}
}

// TestSourceChangedTickInitialAndStartedCaches checks the extensions a
// service with state in its watch needs: a Source's Changed sees the op,
// the value and the resync marker (the Controller's Resync is not called
// for it) and may return several keys; Tick enqueues on its period;
// Initial enqueues once at start; and a cache the caller started and
// names in Env.Started is not started again (which would fail Run).
func TestSourceChangedTickInitialAndStartedCaches(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "provider.before", []byte("x")); err != nil {
		t.Fatal(err)
	}
	cache := store.NewCache(kv, store.CacheOptions{ResyncEvery: store.NoResync})
	if err := cache.Start(ctx); err != nil {
		t.Fatal(err)
	}

	var got seen
	c := &reconcile.Controller{
		Watches: []reconcile.Source{{
			Cache: cache, Prefixes: []string{"provider."},
			Changed: func(ch store.Change) []string {
				switch {
				case ch.Resync:
					return []string{"resync-marker"}
				case ch.Op == store.OpDelete:
					return []string{"deleted:" + ch.Key}
				}
				return strings.Split(string(ch.Value), ",")
			},
			Every: 10 * time.Millisecond,
			Tick:  func() []string { return []string{"ticked"} },
		}},
		Resync:    func() []string { return []string{"resynced"} },
		Initial:   func() []string { return []string{"initial"} },
		Reconcile: got.reconcile,
	}
	ready := make(chan bool, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, reconcile.Env{JS: js, Log: zerolog.Nop(), Ready: func(r bool) { ready <- r }, Started: []*store.Cache{cache}})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run returned before it was ready: %v", err)
	}

	if _, err := kv.Put(ctx, "provider.p", []byte("a,b")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "provider.p"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, "changes, ticks and initial keys reconciled", func() bool {
		return got.has("initial") && got.has("x") && got.has("a") && got.has("b") &&
			got.has("deleted:provider.p") && got.has("ticked")
	})
	cache.Resync()
	natstest.WaitFor(t, 5*time.Second, "the resync marker seen by Changed", func() bool { return got.has("resync-marker") })
	if got.has("resynced") || got.count("initial") != 1 {
		t.Fatalf("unexpected reconciles: %v", got.keys)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancel")
	}
}
