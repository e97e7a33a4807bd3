package store

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/internal/testkit"
)

// startCache starts c with a logger that writes to the test log and stops
// it when the test ends.
func startCache(t testing.TB, c *Cache) {
	t.Helper()
	lg := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	ctx, cancel := context.WithCancel(lg.WithContext(context.Background()))
	t.Cleanup(func() {
		cancel()
		<-c.Done()
	})
	if err := c.Start(ctx); err != nil {
		t.Fatalf("start cache: %v", err)
	}
}

// recorder collects what a subscription delivers.
type recorder struct {
	mu      sync.Mutex
	changes []Change
	closed  chan struct{}
}

func record(s *Subscription) *recorder {
	r := &recorder{closed: make(chan struct{})}
	go func() {
		defer close(r.closed)
		for ch := range s.C() {
			r.mu.Lock()
			r.changes = append(r.changes, ch)
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *recorder) get() []Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.changes)
}

// has reports whether a change with revision rev was delivered.
func (r *recorder) has(rev uint64) bool {
	return slices.ContainsFunc(r.get(), func(ch Change) bool { return !ch.Resync && ch.Revision == rev })
}

// checkIncreasing fails unless the key changes have strictly increasing
// revisions.
func checkIncreasing(t testing.TB, changes []Change) {
	t.Helper()
	var last uint64
	for _, ch := range changes {
		if ch.Resync {
			continue
		}
		if ch.Revision <= last {
			t.Fatalf("revision %d (%s %s) after %d", ch.Revision, ch.Op, ch.Key, last)
		}
		last = ch.Revision
	}
}

// checkMatchesServer fails unless the cache holds exactly the bucket's
// current entries.
func checkMatchesServer(t testing.TB, c *Cache, kv jetstream.KeyValue) {
	t.Helper()
	want, err := NewBucket(kv, newPool).List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	got := c.List("")
	if len(got) != len(want) {
		t.Fatalf("cache has %d entries, server %d", len(got), len(want))
	}
	for i, w := range want {
		v, err := Decode(got[i].Value, newPool)
		if err != nil {
			t.Fatal(err)
		}
		if got[i].Key != w.Key || got[i].Revision != w.Revision || !proto.Equal(v, w.Value) {
			t.Errorf("cache %s@%d %v, server %s@%d %v", got[i].Key, got[i].Revision, v, w.Key, w.Revision, w.Value)
		}
	}
}

// TestCacheSeesEveryUpdateInOrder writes a known sequence of puts and
// deletes and checks that a prefix subscriber gets exactly the ones under
// its prefix, in revision order, after a replay of what existed before.
func TestCacheSeesEveryUpdateInOrder(t *testing.T) {
	kv := newKV(t)
	ctx := testCtx(t)
	preRev := put(t, kv, "machine.pre", 1)
	put(t, kv, "other.pre", 1)

	c := NewCache(kv, CacheOptions{})
	startCache(t, c)
	if c.Revision() < preRev {
		t.Fatalf("revision %d after start, want >= %d", c.Revision(), preRev)
	}
	sub := c.Subscribe("machine.")
	rec := record(sub)
	all := record(c.Subscribe(""))

	type op struct {
		key string
		rev uint64
		del bool
	}
	var want []op // under "machine."
	want = append(want, op{key: "machine.pre", rev: preRev})
	rev := c.Revision()
	const writes = 300
	for i := range writes {
		key := fmt.Sprintf("machine.k%d", i%5)
		switch {
		case i%7 == 3:
			key = "other.x"
			rev = put(t, kv, key, int32(i))
		case i%50 == 49: // machine.k4 exists: it was put at i-5
			if err := kv.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			rev++ // the only writer: revisions are consecutive
		default:
			next := put(t, kv, key, int32(i))
			if next != rev+1 {
				t.Fatalf("revision %d, want %d: another writer?", next, rev+1)
			}
			rev = next
		}
		if key != "other.x" {
			want = append(want, op{key: key, rev: rev, del: i%50 == 49})
		}
	}

	natstest.WaitFor(t, 10*time.Second, "subscriber sees the last write", func() bool { return rec.has(want[len(want)-1].rev) })
	natstest.WaitFor(t, 10*time.Second, "all-keys subscriber sees the last write", func() bool { return all.has(rev) })
	got := rec.get()
	checkIncreasing(t, got)
	if len(got) != len(want) {
		t.Fatalf("got %d changes, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Key != w.key || g.Revision != w.rev || (g.Op == OpDelete) != w.del || g.Resync {
			t.Fatalf("change %d: %s %s@%d, want %s@%d (delete %v)", i, g.Op, g.Key, g.Revision, w.key, w.rev, w.del)
		}
	}
	checkIncreasing(t, all.get())
	if n := len(all.get()); n != 2+writes { // the replay of the two keys, then every write
		t.Errorf("all-keys subscriber got %d changes, want %d", n, 2+writes)
	}
	if c.Revision() != rev {
		t.Errorf("cache revision %d, want %d", c.Revision(), rev)
	}
	checkMatchesServer(t, c, kv)
}

// TestCacheRecoversAfterRestart restarts the server under a running cache:
// the cache must resume from its last revision without losing or repeating
// a change.
func TestCacheRecoversAfterRestart(t *testing.T) {
	for _, filtered := range []bool{false, true} {
		t.Run(fmt.Sprintf("filtered=%v", filtered), func(t *testing.T) {
			srv := natstest.Start(t)
			_, js := srv.Connect(t)
			kv := createKV(t, js)
			opts := CacheOptions{StallCheckEvery: 100 * time.Millisecond, Timeout: time.Second, ResyncEvery: NoResync}
			if filtered {
				opts = Keep(opts, js, "pool.")
			}
			c := NewCache(kv, opts)
			startCache(t, c)
			rec := record(c.Subscribe(""))

			var written []uint64
			write := func(i int) {
				t.Helper()
				data, _ := Encode(pool("p", int32(i)))
				natstest.WaitFor(t, 15*time.Second, "a write succeeds", func() bool {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					if filtered { // a key the cache does not keep, written last
						defer func() { _, _ = kv.Put(ctx, fmt.Sprintf("other.k%d", i%3), data) }()
					}
					rev, err := kv.Put(ctx, fmt.Sprintf("pool.k%d", i%3), data)
					if err == nil {
						written = append(written, rev)
					}
					return err == nil
				})
			}
			for i := range 10 {
				write(i)
			}
			natstest.WaitFor(t, 5*time.Second, "cache sees the writes before restart", func() bool { return c.Revision() == written[len(written)-1] })

			srv.Restart()
			restarted := time.Now()
			for i := 10; i < 20; i++ {
				write(i)
			}
			last := written[len(written)-1]
			natstest.WaitFor(t, 20*time.Second, "cache catches up after restart", func() bool { return c.Revision() >= last && rec.has(last) })
			t.Logf("caught up %s after the restart", time.Since(restarted).Round(time.Millisecond))

			got := rec.get()
			checkIncreasing(t, got)
			for _, rev := range written {
				if !rec.has(rev) {
					t.Errorf("revision %d was written but not delivered", rev)
				}
			}
			for _, ch := range got {
				if !strings.HasPrefix(ch.Key, "pool.") {
					t.Errorf("delivered %s, which the cache does not keep", ch.Key)
				}
			}
			if !filtered {
				checkMatchesServer(t, c, kv)
			}
		})
	}
}

// TestFilteredCacheStallCheck checks that writes under prefixes a cache
// does not keep never make it think its watcher stalled: the server
// filters them out, so they never arrive, and the stall check must not
// mistake that for a watcher that stopped delivering.
func TestFilteredCacheStallCheck(t *testing.T) {
	ctx := testCtx(t)
	js, kv := newJSKV(t)
	var logs testkit.Buffer
	ctx = zerolog.New(&logs).Level(zerolog.InfoLevel).WithContext(ctx)
	c := NewCache(kv, Keep(CacheOptions{StallCheckEvery: 20 * time.Millisecond, ResyncEvery: NoResync}, js, "machine."))
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	kept := put(t, kv, "machine.c1.a", 1)
	for i := range 20 {
		put(t, kv, fmt.Sprintf("node.c1.m%d", i), 1)
		time.Sleep(10 * time.Millisecond) //sleep-ok: spread the writes across stall checks (every 20ms)
	}
	time.Sleep(200 * time.Millisecond) //sleep-ok: ten stall checks with nothing new to deliver; a check that does nothing shows nothing to wait for
	if c.Revision() != kept {
		t.Errorf("cache revision %d, want %d (the last kept write)", c.Revision(), kept)
	}
	if strings.Contains(logs.String(), "stalled") || strings.Contains(logs.String(), "re-creating watcher") {
		t.Errorf("the stall check re-created the watcher for writes the cache does not keep:\n%s", logs.String())
	}
	// A kept write after all that still arrives.
	last := put(t, kv, "machine.c1.b", 2)
	natstest.WaitFor(t, 5*time.Second, "the next kept write", func() bool { return c.Revision() == last })
}

// TestCacheResumesWhenWatcherCloses stops the watcher's subscription under
// the cache, so its channel closes: the cache must resume from the next
// revision without losing or repeating a change.
func TestCacheResumesWhenWatcherCloses(t *testing.T) {
	kv := newKV(t)
	c := NewCache(kv, CacheOptions{ResyncEvery: NoResync, StallCheckEvery: NoResync})
	c.stopWatcher = make(chan struct{})
	startCache(t, c)
	rec := record(c.Subscribe(""))
	var written []uint64
	for i := range 5 {
		written = append(written, put(t, kv, "k.a", int32(i)))
	}
	c.stopWatcher <- struct{}{}
	for i := range 5 {
		written = append(written, put(t, kv, fmt.Sprintf("k.%d", i), int32(i)))
	}
	last := written[len(written)-1]
	natstest.WaitFor(t, 5*time.Second, "cache catches up after its watcher closed", func() bool { return rec.has(last) })
	got := rec.get()
	checkIncreasing(t, got)
	if len(got) != len(written) {
		t.Errorf("delivered %d changes, want %d", len(got), len(written))
	}
	for _, rev := range written {
		if !rec.has(rev) {
			t.Errorf("revision %d was written but not delivered", rev)
		}
	}
	checkMatchesServer(t, c, kv)
}

// TestCacheResyncRepairs makes the watcher lose a change and checks that a
// resync finds and delivers it.
func TestCacheResyncRepairs(t *testing.T) {
	ctx := testCtx(t)
	tests := []struct {
		name string
		// write makes the changes; drop picks the one the watcher loses.
		write func(t *testing.T, kv jetstream.KeyValue)
		drop  func(e jetstream.KeyValueEntry) bool
		want  map[string]int32 // cache content after the resync
		// wantRepair is the key and op the subscriber must get from the
		// resync.
		wantRepair Change
	}{
		{
			name: "missed create",
			write: func(t *testing.T, kv jetstream.KeyValue) {
				put(t, kv, "k.a", 1)
				put(t, kv, "k.b", 2)
			},
			drop:       func(e jetstream.KeyValueEntry) bool { return e.Key() == "k.b" },
			want:       map[string]int32{"k.a": 1, "k.b": 2},
			wantRepair: Change{Key: "k.b", Op: OpPut},
		},
		{
			name: "missed update",
			write: func(t *testing.T, kv jetstream.KeyValue) {
				put(t, kv, "k.a", 1)
				put(t, kv, "k.a", 2)
			},
			drop:       dropValue(2),
			want:       map[string]int32{"k.a": 2},
			wantRepair: Change{Key: "k.a", Op: OpPut},
		},
		{
			name: "missed delete",
			write: func(t *testing.T, kv jetstream.KeyValue) {
				put(t, kv, "k.a", 1)
				put(t, kv, "k.b", 1)
				if err := kv.Delete(ctx, "k.a"); err != nil {
					t.Fatal(err)
				}
			},
			drop:       func(e jetstream.KeyValueEntry) bool { return e.Operation() == jetstream.KeyValueDelete },
			want:       map[string]int32{"k.b": 1},
			wantRepair: Change{Key: "k.a", Op: OpDelete},
		},
		{
			name: "missed delete whose marker is gone",
			write: func(t *testing.T, kv jetstream.KeyValue) {
				put(t, kv, "k.a", 1)
				put(t, kv, "k.b", 1)
				if err := kv.Delete(ctx, "k.a"); err != nil {
					t.Fatal(err)
				}
				if err := kv.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(-1)); err != nil {
					t.Fatal(err)
				}
			},
			drop:       func(e jetstream.KeyValueEntry) bool { return e.Operation() == jetstream.KeyValueDelete },
			want:       map[string]int32{"k.b": 1},
			wantRepair: Change{Key: "k.a", Op: OpDelete},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kv := newKV(t)
			c := NewCache(kv, CacheOptions{ResyncEvery: NoResync})
			c.dropEntry = tt.drop
			startCache(t, c)
			rec := record(c.Subscribe("k."))
			tt.write(t, kv)
			st, err := kv.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			last := st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
			natstest.WaitFor(t, 20*time.Second, "cache applied every write", func() bool { return c.Revision() >= last })
			if got := cacheContent(t, c); maps.Equal(got, tt.want) {
				t.Fatalf("cache already holds %v before the resync: the drop did not happen", got)
			}

			c.Resync()
			natstest.WaitFor(t, 5*time.Second, "resync marker", func() bool {
				return slices.ContainsFunc(rec.get(), func(ch Change) bool { return ch.Resync })
			})
			if got := cacheContent(t, c); !maps.Equal(got, tt.want) {
				t.Errorf("cache after resync %v, want %v", got, tt.want)
			}
			changes := rec.get()
			marker := slices.IndexFunc(changes, func(ch Change) bool { return ch.Resync })
			repair := slices.IndexFunc(changes, func(ch Change) bool {
				return ch.Key == tt.wantRepair.Key && ch.Op == tt.wantRepair.Op && !ch.Resync
			})
			if repair < 0 || repair > marker {
				t.Errorf("no %s %s before the resync marker in %+v", tt.wantRepair.Op, tt.wantRepair.Key, changes)
			}
			// Live changes increase; a repair restores an older state.
			checkIncreasing(t, changes[:max(repair, 0)])
			checkMatchesServer(t, c, kv)
		})
	}
}

func dropValue(replicas int32) func(jetstream.KeyValueEntry) bool {
	return func(e jetstream.KeyValueEntry) bool {
		v, err := Decode(e.Value(), newPool)
		return err == nil && v.Replicas == replicas
	}
}

func cacheContent(t testing.TB, c *Cache) map[string]int32 {
	t.Helper()
	out := make(map[string]int32)
	for _, e := range c.List("") {
		v, err := Decode(e.Value, newPool)
		if err != nil {
			t.Fatal(err)
		}
		out[e.Key] = v.Replicas
	}
	return out
}

// TestCachePeriodicResync relies on the timer alone to repair a lost
// change and send markers.
func TestCachePeriodicResync(t *testing.T) {
	kv := newKV(t)
	c := NewCache(kv, CacheOptions{ResyncEvery: 50 * time.Millisecond})
	c.dropEntry = func(e jetstream.KeyValueEntry) bool { return e.Key() == "k.lost" }
	startCache(t, c)
	rec := record(c.Subscribe(""))
	rev := put(t, kv, "k.lost", 7)
	natstest.WaitFor(t, 5*time.Second, "periodic resync repairs the lost write", func() bool {
		e, ok := c.Get("k.lost")
		return ok && e.Revision == rev
	})
	natstest.WaitFor(t, 5*time.Second, "two resync markers", func() bool {
		n := 0
		for _, ch := range rec.get() {
			if ch.Resync {
				n++
			}
		}
		return n >= 2
	})
}

// TestSlowSubscriber checks that a subscriber that does not read neither
// blocks the others nor loses a key's final state, and that its queue stays
// bounded.
func TestSlowSubscriber(t *testing.T) {
	kv := newKV(t)
	const queue = 8
	c := NewCache(kv, CacheOptions{SubscriberQueue: queue, ResyncEvery: NoResync})
	startCache(t, c)
	slow := c.Subscribe("")
	fast := record(c.Subscribe(""))

	final := make(map[string]int32)
	var last uint64
	for i := range 200 {
		key := fmt.Sprintf("k.%d", i%3)
		last = put(t, kv, key, int32(i))
		final[key] = int32(i)
	}
	natstest.WaitFor(t, 10*time.Second, "the reading subscriber sees the last write", func() bool { return fast.has(last) })
	checkIncreasing(t, fast.get())
	if n := slow.Pending(); n > queue {
		t.Errorf("slow subscriber has %d pending, want <= %d", n, queue)
	}

	got := make(map[string]int32)
	var changes []Change
	for len(changes) == 0 || changes[len(changes)-1].Revision != last {
		ch := <-slow.C()
		changes = append(changes, ch)
		v, err := Decode(ch.Value, newPool)
		if err != nil {
			t.Fatal(err)
		}
		got[ch.Key] = v.Replicas
	}
	checkIncreasing(t, changes)
	if !maps.Equal(got, final) {
		t.Errorf("slow subscriber ends with %v, want %v", got, final)
	}
	t.Logf("slow subscriber got %d changes for 200 writes", len(changes))
}

func TestSubscribeReplaysCurrentState(t *testing.T) {
	kv := newKV(t)
	revs := []uint64{put(t, kv, "k.b", 1), put(t, kv, "k.a", 2), put(t, kv, "x.c", 3)}
	c := NewCache(kv, CacheOptions{})
	startCache(t, c)
	rec := record(c.Subscribe("k."))
	natstest.WaitFor(t, 5*time.Second, "replay", func() bool { return len(rec.get()) == 2 })
	got := rec.get()
	if got[0].Key != "k.b" || got[0].Revision != revs[0] || got[1].Key != "k.a" || got[1].Revision != revs[1] {
		t.Errorf("replay %+v, want k.b@%d then k.a@%d", got, revs[0], revs[1])
	}

}

func TestCacheOptionsValidate(t *testing.T) {
	err := CacheOptions{Timeout: -1, LoadTimeout: -1, SubscriberQueue: -1, Prefixes: []string{"a.", "", "b"}}.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	// errors.Join reports every problem: three negative durations, an
	// empty prefix, one without its dot, prefixes without store.Keep.
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 6 {
		t.Errorf("%d errors, want 6: %v", n, err)
	}
	if err := NewCache(newKV(t), CacheOptions{Timeout: -1}).Start(context.Background()); err == nil {
		t.Error("start with invalid options: no error")
	}
}

// TestCacheStops checks Unsubscribe, Start twice, and that cancelling the
// ctx stops everything the cache started.
func TestCacheStops(t *testing.T) {
	kv := newKV(t)
	b := NewBucket(kv, newPool)
	put(t, kv, "k.a", 1)
	before := clientGoroutines()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := NewCache(kv, CacheOptions{ResyncEvery: 20 * time.Millisecond, StallCheckEvery: 20 * time.Millisecond})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err == nil {
		t.Error("second Start: no error")
	}
	if _, err := b.List(ctx, ""); err != nil {
		t.Fatal(err)
	}

	gone := c.Subscribe("")
	gone.Unsubscribe()
	gone.Unsubscribe() // idempotent
	for range gone.C() {
		// the replay may or may not have been delivered; the channel closes
	}
	subs := []*Subscription{c.Subscribe(""), c.Subscribe("k."), c.Subscribe("z.")}
	put(t, kv, "k.b", 2)
	natstest.WaitFor(t, 5*time.Second, "the cache applies a write", func() bool { return c.Revision() > 1 })

	cancel()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("cache did not stop")
	}
	for _, s := range subs {
		natstest.WaitFor(t, 5*time.Second, "subscription channel closes", func() bool {
			select {
			case _, ok := <-s.C():
				return !ok
			default:
				return false
			}
		})
	}
	late := c.Subscribe("")
	if _, ok := <-late.C(); ok {
		t.Error("subscription on a stopped cache delivered a change")
	}
	late.Unsubscribe()

	if err := testkit.Poll(5*time.Second, 10*time.Millisecond, func() error {
		if after := clientGoroutines(); len(after) > len(before) {
			return fmt.Errorf("%d client goroutines, want <= %d:\n%s", len(after), len(before), strings.Join(after, "\n\n"))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// clientGoroutines returns the stacks of the goroutines that belong to this
// package or to the NATS client. The in-process nats-server's goroutines
// come and go with its own housekeeping, so they are left out.
func clientGoroutines() []string {
	buf := make([]byte, 4<<20)
	var out []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "nats-server") || strings.Contains(g, "testing.tRunner") {
			continue
		}
		if strings.Contains(g, "capn/events/store.") || strings.Contains(g, "nats-io/nats.go") {
			out = append(out, g)
		}
	}
	return out
}

// TestCacheStartCancelled checks that Start gives up with its ctx.
func TestCacheStartCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := NewCache(newKV(t), CacheOptions{})
	if err := c.Start(ctx); err == nil {
		t.Fatal("start with a cancelled ctx: no error")
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after a failed start")
	}
	if _, ok := <-c.Subscribe("").C(); ok {
		t.Error("subscription on a failed cache delivered a change")
	}
}

// TestCachePrefixes checks that a cache keeps only the keys under its
// prefixes, through the load, the watch and a resync; and that reading
// outside them panics.
func TestCachePrefixes(t *testing.T) {
	ctx := testCtx(t)
	js, kv := newJSKV(t)
	put(t, kv, "machine.c1.a", 1)
	put(t, kv, "node.c1.a", 1)
	c := NewCache(kv, Keep(CacheOptions{ResyncEvery: 20 * time.Millisecond}, js, "machine.", "cluster."))
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sub := c.Subscribe("machine.")
	defer sub.Unsubscribe()
	put(t, kv, "node.c1.b", 1)
	last := put(t, kv, "machine.c1.b", 2)
	natstest.WaitFor(t, 10*time.Second, "the watched write", func() bool { return c.Revision() >= last })
	put(t, kv, "infra.p.c1.a", 1)
	last = put(t, kv, "cluster.c1", 1)
	natstest.WaitFor(t, 10*time.Second, "the last write", func() bool { return c.Revision() >= last })

	c.mu.RLock()
	var keys []string
	for k := range c.entries {
		keys = append(keys, k)
	}
	c.mu.RUnlock()
	slices.Sort(keys)
	if want := []string{"cluster.c1", "machine.c1.a", "machine.c1.b"}; !slices.Equal(keys, want) {
		t.Errorf("cache holds %q, want %q", keys, want)
	}
	// A resync (every 20ms) must not bring the other keys in: wait for one
	// that listed the bucket after the last write.
	natstest.WaitFor(t, 10*time.Second, "a resync after the last write", func() bool {
		for {
			select {
			case ch, ok := <-sub.C():
				if !ok {
					t.Fatal("subscription closed")
				}
				if ch.Resync && ch.Revision >= last {
					return true
				}
			default:
				return false
			}
		}
	})
	c.mu.RLock()
	n := len(c.entries)
	c.mu.RUnlock()
	if n != 3 {
		t.Errorf("after resyncs the cache holds %d keys, want 3", n)
	}
	for _, f := range []struct {
		name string
		call func()
	}{
		{"Get", func() { c.Get("node.c1.a") }},
		{"List", func() { c.List("node.") }},
		{"KeysUnder", func() { c.KeysUnder("infra.") }},
		{"Subscribe", func() { c.Subscribe("node.") }},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s outside the prefixes did not panic", f.name)
				}
			}()
			f.call()
		}()
	}
	if _, ok := c.Get("machine.c1.a"); !ok {
		t.Error("Get of a kept key: not found")
	}
	if n := len(c.List("")); n != 3 {
		t.Errorf(`List("") = %d entries, want the 3 kept`, n)
	}
}

// TestCacheSync writes while the cache's watcher is gone (it comes back
// after rewatchMin at the earliest): Sync returns only once the cache holds
// the write. A filtered cache's Sync waits only for the writes it keeps; a
// stopped cache's Sync fails instead of waiting.
func TestCacheSync(t *testing.T) {
	ctx := testCtx(t)
	js, kv := newJSKV(t)
	c := NewCache(kv, CacheOptions{ResyncEvery: NoResync, StallCheckEvery: NoResync})
	c.stopWatcher = make(chan struct{})
	startCache(t, c)
	put(t, kv, "machine.c1.a", 1)
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	c.stopWatcher <- struct{}{}
	rev := put(t, kv, "machine.c1.a", 2)
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if e, ok := c.Get("machine.c1.a"); !ok || e.Revision != rev {
		t.Fatalf("after Sync the cache holds %+v (present %v), want revision %d", e, ok, rev)
	}

	fctx, cancel := context.WithCancel(ctx)
	f := NewCache(kv, Keep(CacheOptions{ResyncEvery: NoResync, StallCheckEvery: NoResync}, js, "machine."))
	if err := f.Start(fctx); err != nil {
		t.Fatal(err)
	}
	kept := put(t, kv, "machine.c1.b", 3)
	for i := range 5 {
		put(t, kv, fmt.Sprintf("node.c1.m%d", i), 1)
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if e, ok := f.Get("machine.c1.b"); !ok || e.Revision != kept {
		t.Fatalf("after Sync the filtered cache holds %+v (present %v), want revision %d", e, ok, kept)
	}
	cancel()
	<-f.Done()
	put(t, kv, "machine.c1.b", 4)
	if err := f.Sync(ctx); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("Sync of a stopped cache behind the bucket: %v, want an error saying it stopped", err)
	}
}
