package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
)

// Cache defaults; see [CacheOptions].
const (
	DefaultResyncEvery     = 5 * time.Minute
	DefaultStallCheckEvery = 2 * time.Second
	DefaultLoadTimeout     = time.Minute
	DefaultSubscriberQueue = 1024

	// NoResync, as CacheOptions.ResyncEvery, disables the periodic resync;
	// as CacheOptions.StallCheckEvery, the stall check.
	NoResync time.Duration = -1
)

// CacheOptions configures a [Cache]. The zero value gives the defaults.
type CacheOptions struct {
	// ResyncEvery is how often the cache re-lists the bucket, repairs any
	// difference from what it holds and sends every subscriber a Resync
	// marker: each wait is ResyncEvery plus up to half of it at random, so
	// that caches started together do not resync together. 0 means
	// DefaultResyncEvery; a negative value (NoResync) disables it.
	ResyncEvery time.Duration
	// StallCheckEvery is how often an idle cache asks the server for the
	// bucket's last revision, to find out whether its watcher stalled (for
	// example after a server restart) and must be re-created. 0 means
	// DefaultStallCheckEvery; negative disables the check (nats.go's own
	// heartbeat check still recovers, after about 20s in our tests).
	StallCheckEvery time.Duration
	// Timeout bounds each request the cache makes (bucket status, creating
	// a watcher). 0 means DefaultTimeout.
	Timeout time.Duration
	// LoadTimeout bounds the initial load in Start and each resync listing.
	// 0 means DefaultLoadTimeout.
	LoadTimeout time.Duration
	// SubscriberQueue is how many changes may wait for a subscriber before
	// its queue is compacted to the latest change per key. 0 means
	// DefaultSubscriberQueue.
	SubscriberQueue int
	// Prefixes, when not empty, are the only keys the cache holds (set
	// them with [Keep]). Each must end with a dot ("machine."). The
	// watcher is filtered by the server to those prefixes, so changes to
	// other keys never reach the process at all: that saves a service the
	// memory of records it never reads and the server a delivery per write
	// to each of them. Revision then counts the writes under the prefixes
	// (and, after each load, everything the bucket held). List and
	// Subscribe of "" mean every key the cache holds; Get, List, KeysUnder
	// and Subscribe of any other key or prefix no entry covers panic: it is
	// a programming error that would otherwise read as "absent".
	Prefixes []string

	// js finds the bucket's stream for a filtered cache's stall check,
	// which asks for the last revision under each prefix.
	js jetstream.JetStream
}

// Keep returns o keeping only the keys under prefixes
// (CacheOptions.Prefixes); js is the JetStream the bucket was opened
// with.
func Keep(o CacheOptions, js jetstream.JetStream, prefixes ...string) CacheOptions {
	o.Prefixes, o.js = prefixes, js
	return o
}

// Validate reports every invalid option at once.
func (o CacheOptions) Validate() error {
	var errs []error
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %s is negative", o.Timeout))
	}
	if o.LoadTimeout < 0 {
		errs = append(errs, fmt.Errorf("load timeout %s is negative", o.LoadTimeout))
	}
	if o.SubscriberQueue < 0 {
		errs = append(errs, fmt.Errorf("subscriber queue %d is negative", o.SubscriberQueue))
	}
	for i, p := range o.Prefixes {
		switch {
		case p == "":
			errs = append(errs, fmt.Errorf("prefixes[%d] is empty; leave Prefixes empty to keep every key", i))
		case !strings.HasSuffix(p, "."):
			errs = append(errs, fmt.Errorf("prefixes[%d] %q does not end with a dot; a prefix is whole key tokens (\"machine.\")", i, p))
		}
	}
	if len(o.Prefixes) > 0 && o.js == nil {
		errs = append(errs, errors.New("prefixes set without the JetStream handle; set them with store.Keep"))
	}
	return errors.Join(errs...)
}

func (o CacheOptions) withDefaults() CacheOptions {
	if o.ResyncEvery == 0 {
		o.ResyncEvery = DefaultResyncEvery
	}
	if o.StallCheckEvery == 0 {
		o.StallCheckEvery = DefaultStallCheckEvery
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.LoadTimeout == 0 {
		o.LoadTimeout = DefaultLoadTimeout
	}
	if o.SubscriberQueue == 0 {
		o.SubscriberQueue = DefaultSubscriberQueue
	}
	return o
}

// RawEntry is a cached value: the encoded bytes as stored in KV and the
// revision of the write. Value is shared: do not modify it.
type RawEntry struct {
	Key      string
	Value    []byte
	Revision uint64
}

// Op is what happened to a key.
type Op uint8

// The operations a [Change] reports. A purge is reported as OpDelete.
const (
	OpPut Op = iota + 1
	OpDelete
)

// String returns "put" or "delete".
func (o Op) String() string {
	switch o {
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Change is one event delivered to a [Subscription].
//
// A change to a key has Key, Op, Revision and, for OpPut, Value (shared: do
// not modify it). A resync marker has Resync true and nothing but Revision
// (the cache's revision at that time): after it, re-examine everything.
type Change struct {
	Key      string
	Value    []byte
	Revision uint64
	Op       Op
	Resync   bool
}

// Cache keeps a whole KV bucket in memory, fed by ONE watcher, and fans its
// changes out to subscribers. Make one Cache per bucket per process and
// share it: a watcher is a server-side consumer, and a watcher per key or
// per reconciler is what leaks under reconnect storms.
//
// Get, List, Revision, Subscribe and Unsubscribe are safe for concurrent use
// and never do I/O. The cache is filled by [Cache.Start] and stops when the
// ctx given to Start is cancelled.
//
// Recovery: the cache remembers the last revision it applied. If its
// watcher's channel closes, or the watcher stalls (an idle cache polls the
// bucket's last revision every StallCheckEvery and re-creates a watcher
// that did not deliver a revision the server had one check earlier, as
// happens after a server restart), it re-creates the watcher from the next
// revision with the full history, so nothing the server still holds is
// skipped, and drops any revision it has already applied, so nothing is
// repeated. A revision the bucket no longer holds (superseded beyond its
// History) cannot be replayed: across such a gap a subscriber sees each
// key's latest value, not every step — enough for level-driven
// reconcilers. nats.go's ordered consumer also resets itself this way
// under bursts of writes, which is why capn's reconcilers never depend on
// seeing intermediate revisions.
//
// Resync: every ResyncEvery (plus up to half, at random) it lists the bucket through a second,
// short-lived watcher, repairs any key where the listing disagrees with the
// cache (delivering the repair as an ordinary change) and sends every
// subscriber a Resync marker.
type Cache struct {
	kv   jetstream.KeyValue
	opts CacheOptions

	mu      sync.RWMutex
	entries map[string]RawEntry
	// groups indexes keys by their first two tokens ("machine.c1."), the
	// prefix reconcilers list by, so List of such a prefix costs the size
	// of the group, not of the bucket.
	groups map[string]map[string]struct{}
	// kinds indexes the same by their first token ("addonset."): its
	// members are the kind's groups ("machine.c1.", ending in a dot) and
	// its keys of two tokens ("cluster.c1"), so List of a kind costs the
	// number of its groups and short keys, not the bucket's size (a
	// planner listing the add-on sets for every plan of every cluster).
	kinds   map[string]map[string]struct{}
	rev     uint64 // last applied revision
	subs    map[*Subscription]struct{}
	stopped bool
	// syncs are the Sync calls waiting for the cache to reach a revision.
	syncs []syncWaiter

	started   atomic.Bool
	done      chan struct{}
	resyncReq chan struct{}

	// dropEntry, set by tests before Start, makes the watcher lose an entry
	// (its revision counts as applied) to simulate a missed change.
	dropEntry func(jetstream.KeyValueEntry) bool
	// stopWatcher, set by tests before Start, stops the watcher's NATS
	// subscription underneath the loop, as nats.go does when it gives up on
	// an ordered consumer, so that its channel closes.
	stopWatcher chan struct{}
}

// NewCache returns a cache over kv; call Start to fill and run it.
func NewCache(kv jetstream.KeyValue, opts CacheOptions) *Cache {
	return &Cache{
		kv:        kv,
		opts:      opts,
		entries:   make(map[string]RawEntry),
		groups:    make(map[string]map[string]struct{}),
		kinds:     make(map[string]map[string]struct{}),
		subs:      make(map[*Subscription]struct{}),
		done:      make(chan struct{}),
		resyncReq: make(chan struct{}, 1),
	}
}

// Start loads the bucket and returns once the cache holds every current
// value (the watcher's end-of-initial-values marker), or LoadTimeout has
// passed, or ctx is cancelled. It then keeps the cache up to date in the
// background until ctx is cancelled; at that point every subscription's
// channel is closed and [Cache.Done] closes. Start may be called once;
// an error means the cache is stopped and holds nothing usable.
//
// The logger is zerolog.Ctx(ctx), enriched with the bucket name.
func (c *Cache) Start(ctx context.Context) error {
	if err := c.opts.Validate(); err != nil {
		return fmt.Errorf("cache %s: %w", c.kv.Bucket(), err)
	}
	if !c.started.CompareAndSwap(false, true) {
		return fmt.Errorf("cache %s: already started", c.kv.Bucket())
	}
	lg := zerolog.Ctx(ctx).With().Str("bucket", c.kv.Bucket()).Logger()
	l := &watchLoop{c: c, opts: c.opts.withDefaults(), log: &lg, snapCh: make(chan snapshot, 1)}
	// The first load is retried while JetStream cannot answer (a new
	// cluster may still be electing the bucket's leader); only the end of
	// ctx or a closed connection stops it.
	err := events.Retry(ctx, lg, "load the cache", events.DefaultSetupRetryFirst, events.DefaultSetupRetryMax,
		func(ctx context.Context) error {
			err := l.load(ctx)
			if err != nil {
				l.stopWatcher()
			}
			return err
		})
	if err != nil {
		l.stopWatcher()
		c.shutdown()
		close(c.done)
		return fmt.Errorf("cache %s: %w", c.kv.Bucket(), err)
	}
	go l.run(ctx)
	return nil
}

// Done is closed once the cache has stopped: its watchers are stopped and
// its goroutines and subscriptions are finished.
func (c *Cache) Done() <-chan struct{} { return c.done }

// Resync asks for a resync now (see [Cache]) and returns at once, without
// waiting for it. Requests made while one is pending fold into it; one made
// while a resync runs starts another after it. Safe for concurrent use; does nothing on a stopped cache.
func (c *Cache) Resync() {
	select {
	case c.resyncReq <- struct{}{}:
	default:
	}
}

// keeps reports whether the cache holds key (CacheOptions.Prefixes).
func (c *Cache) keeps(key string) bool {
	if len(c.opts.Prefixes) == 0 {
		return true
	}
	for _, p := range c.opts.Prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// mustCover panics unless every key under prefix is kept ("": every key
// the cache holds).
func (c *Cache) mustCover(prefix string) {
	if len(c.opts.Prefixes) == 0 || prefix == "" {
		return
	}
	for _, p := range c.opts.Prefixes {
		if strings.HasPrefix(prefix, p) {
			return
		}
	}
	panic(fmt.Sprintf("cache %s: %q is outside the prefixes it keeps %q", c.kv.Bucket(), prefix, c.opts.Prefixes))
}

// Get returns the cached entry for key, if the key exists.
func (c *Cache) Get(key string) (RawEntry, bool) {
	c.mustCover(key)
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.entries[key]
	return e, ok
}

// List returns the cached entries whose keys start with prefix, sorted by
// key. A prefix of one or two tokens and a dot ("addonset.",
// "machine.c1.") is served from an index; any other scans the whole cache.
func (c *Cache) List(prefix string) []RawEntry {
	c.mustCover(prefix)
	c.mu.RLock()
	out := c.list(prefix)
	c.mu.RUnlock()
	slices.SortFunc(out, func(a, b RawEntry) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// groupOf is the key's first two tokens with their dots ("machine.c1."),
// or "" for a key of fewer than three tokens.
func groupOf(key string) string {
	i := strings.IndexByte(key, '.')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(key[i+1:], '.')
	if j < 0 {
		return ""
	}
	return key[:i+1+j+1]
}

// kindOf is the key's first token with its dot ("machine."), or "" for a
// key without a dot.
func kindOf(key string) string {
	if i := strings.IndexByte(key, '.'); i >= 0 {
		return key[:i+1]
	}
	return ""
}

// set and unset change an entry and its group and kind indexes. c.mu must
// be held.
func (c *Cache) set(e RawEntry) {
	_, had := c.entries[e.Key]
	c.entries[e.Key] = e
	if had {
		return // indexed already
	}
	member := e.Key
	if g := groupOf(e.Key); g != "" {
		m := c.groups[g]
		if m != nil {
			m[e.Key] = struct{}{}
			return // the group is in its kind already
		}
		c.groups[g] = map[string]struct{}{e.Key: {}}
		member = g
	}
	if k := kindOf(e.Key); k != "" {
		m := c.kinds[k]
		if m == nil {
			m = map[string]struct{}{}
			c.kinds[k] = m
		}
		m[member] = struct{}{}
	}
}

func (c *Cache) unset(key string) {
	if _, had := c.entries[key]; !had {
		return
	}
	delete(c.entries, key)
	member := key
	if g := groupOf(key); g != "" {
		delete(c.groups[g], key)
		if len(c.groups[g]) > 0 {
			return
		}
		delete(c.groups, g)
		member = g
	}
	if k := kindOf(key); k != "" {
		delete(c.kinds[k], member)
		if len(c.kinds[k]) == 0 {
			delete(c.kinds, k)
		}
	}
}

// list collects the entries under prefix, unsorted. c.mu must be held.
func (c *Cache) list(prefix string) []RawEntry {
	var out []RawEntry
	if prefix != "" && groupOf(prefix) == prefix {
		for k := range c.groups[prefix] {
			out = append(out, c.entries[k])
		}
		return out
	}
	if prefix != "" && kindOf(prefix) == prefix {
		for m := range c.kinds[prefix] {
			if !strings.HasSuffix(m, ".") {
				out = append(out, c.entries[m])
				continue
			}
			for k := range c.groups[m] {
				out = append(out, c.entries[k])
			}
		}
		return out
	}
	for k, e := range c.entries {
		if strings.HasPrefix(k, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// Revision returns the last revision the cache applied: every write to the
// bucket up to it is reflected in Get and List.
func (c *Cache) Revision() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.rev
}

// Sync returns once the cache has applied every write the bucket held
// under the cache's prefixes (every write, for an unfiltered cache) when
// Sync was called, or with an error when ctx ends, the server cannot be
// asked, or the cache stops. A decision that stays after the state behind
// it changes (a rollout halted until someone resumes it) is made on what
// the bucket holds, not on a cache that may lag behind a write another
// service made a moment ago. It costs one request to the server per prefix.
func (c *Cache) Sync(ctx context.Context) error {
	if !c.started.Load() {
		return fmt.Errorf("cache %s: sync before Start", c.kv.Bucket())
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.withDefaults().Timeout)
	defer cancel()
	last, err := lastWritten(ctx, c.kv, c.opts)
	if err != nil {
		return fmt.Errorf("cache %s: sync: %w", c.kv.Bucket(), err)
	}
	c.mu.Lock()
	if c.rev >= last {
		c.mu.Unlock()
		return nil
	}
	if c.stopped {
		c.mu.Unlock()
		return fmt.Errorf("cache %s: sync: the cache has stopped", c.kv.Bucket())
	}
	w := syncWaiter{rev: last, done: make(chan struct{})}
	c.syncs = append(c.syncs, w)
	c.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
		return fmt.Errorf("cache %s: sync to revision %d (at %d): %w", c.kv.Bucket(), last, c.Revision(), ctx.Err())
	}
	if c.Revision() < last {
		return fmt.Errorf("cache %s: sync: the cache has stopped", c.kv.Bucket())
	}
	return nil
}

// syncWaiter is a Sync call waiting for revision rev.
type syncWaiter struct {
	rev  uint64
	done chan struct{}
}

// advance sets the cache's revision and releases the Sync calls it
// satisfies. c.mu must be held.
func (c *Cache) advance(rev uint64) {
	c.rev = rev
	if len(c.syncs) == 0 {
		return
	}
	c.syncs = slices.DeleteFunc(c.syncs, func(w syncWaiter) bool {
		if w.rev > rev {
			return false
		}
		close(w.done)
		return true
	})
}

// lastWritten is the revision of the bucket's last write under o's
// prefixes (of its last write, without prefixes); 0 when there is none.
func lastWritten(ctx context.Context, kv jetstream.KeyValue, o CacheOptions) (uint64, error) {
	if len(o.Prefixes) == 0 {
		st, err := kv.Status(ctx)
		if err != nil {
			return 0, err
		}
		bs, ok := st.(*jetstream.KeyValueBucketStatus)
		if !ok {
			return 0, fmt.Errorf("bucket status is a %T, not a stream", st)
		}
		return bs.StreamInfo().State.LastSeq, nil
	}
	stream, err := o.js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		return 0, err
	}
	return lastUnder(ctx, stream, kv.Bucket(), o.Prefixes)
}

// lastUnder is the sequence of the stream's last message under any of the
// bucket's key prefixes (one direct get each); 0 when there is none.
func lastUnder(ctx context.Context, stream jetstream.Stream, bucket string, prefixes []string) (uint64, error) {
	var last uint64
	for _, p := range prefixes {
		m, err := stream.GetLastMsgForSubject(ctx, "$KV."+bucket+"."+p+">")
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return 0, err
		default:
			last = max(last, m.Sequence)
		}
	}
	return last, nil
}

// Subscribe returns a subscription to the changes of keys under prefix (""
// for all). Its channel first replays every current entry under prefix as
// an OpPut, in revision order, then delivers each later change in the order
// the cache applied it, so revisions strictly increase. The exception is a
// repair found by a resync (delivered just before the Resync marker): it
// carries the revision of the state it restores, which may be older than
// changes already delivered, or, for a key that vanished with no delete
// marker left, the cache's revision. Replay and registration are atomic: no
// change falls between them.
//
// Each subscription has its own queue, so a slow reader never blocks the
// watcher or other subscribers and never loses a key's final state: while
// more than SubscriberQueue changes wait, the queue is compacted to the
// latest change per key (and one Resync marker), keeping revision order.
// A reader that keeps up sees every revision.
//
// The channel is closed after Unsubscribe or when the cache stops; a
// subscription made on a stopped cache is closed at once. Subscribing
// before Start is allowed: the initial load then arrives as changes. Each
// subscription runs one goroutine until it is closed.
func (c *Cache) Subscribe(prefix string) *Subscription {
	c.mustCover(prefix)
	limit := c.opts.SubscriberQueue
	if limit <= 0 {
		limit = DefaultSubscriberQueue
	}
	s := newSubscription(c, prefix, limit)
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		s.stop()
		return s
	}
	replay := c.list(prefix)
	slices.SortFunc(replay, func(a, b RawEntry) int { return cmp.Compare(a.Revision, b.Revision) })
	for _, e := range replay {
		s.push(Change{Key: e.Key, Value: e.Value, Revision: e.Revision, Op: OpPut})
	}
	c.subs[s] = struct{}{}
	c.mu.Unlock()
	return s
}

// emit queues ch for every subscriber whose prefix matches. c.mu must be
// held (for writing), which orders emits with Subscribe's replay.
func (c *Cache) emit(ch Change) {
	for s := range c.subs {
		if ch.Resync || strings.HasPrefix(ch.Key, s.prefix) {
			s.push(ch)
		}
	}
}

func (c *Cache) unsubscribe(s *Subscription) {
	c.mu.Lock()
	delete(c.subs, s)
	c.mu.Unlock()
}

// shutdown marks the cache stopped and closes every subscription.
func (c *Cache) shutdown() {
	c.mu.Lock()
	c.stopped = true
	subs := c.subs
	c.subs = make(map[*Subscription]struct{})
	for _, w := range c.syncs {
		close(w.done)
	}
	c.syncs = nil
	c.mu.Unlock()
	for s := range subs {
		s.stop()
	}
}
