package reconcile

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
)

// Controller declares what a service watches and does, as
// controller-runtime's builder and watermill's router do: the cache
// prefixes that wake its reconcile and how a changed key maps to the key it
// reconciles, the durable consumers it answers, the reconcile itself and how
// many workers run it. Run does the wiring every service used to write by
// hand.
//
//	Watches ─(Key / Changed, Tick)─┐
//	Resync, Initial ───────────────┼─► Queue ─► Workers × Reconcile ─► RequeueAfter / backoff
//	handlers ──────────────────────┘
//	Consumers ─► events.Consumer (ack, nak with backoff, terminate)
type Controller struct {
	// Watches are the cache prefixes whose changes wake the reconcile.
	Watches []Source
	// Resync returns every key to reconcile when a watched cache resyncs
	// (nil: none).
	Resync func() []string
	// Initial returns keys to reconcile once at start, after the caches
	// are loaded (nil: none), for keys no watched change names.
	Initial func() []string
	// Consumers run beside the loop; their handlers may enqueue keys.
	Consumers []Consumer
	// Reconcile makes one step for a key; Workers run it (default 1),
	// retrying a failure after Backoff (default 100ms doubling to 30s),
	// each failure told to OnError.
	Reconcile Func
	Workers   int
	Backoff   Backoff
	OnError   func(key string, err error, failures int)
	// Queue is the loop's queue, for handlers that enqueue keys
	// themselves; nil makes one.
	Queue *Queue
}

// Source wakes a reconcile on changes under some prefixes of a cache
// (controller-runtime's source.Kind).
type Source struct {
	Cache    *store.Cache
	Prefixes []string
	// Key maps a changed KV key to the key to reconcile ("" skips it); a
	// resync marker enqueues the Controller's Resync.
	Key func(kvKey string) string
	// Changed, set instead of Key, sees the whole change — its op and
	// value, and resync markers, for which Resync is not called — and
	// returns the keys to reconcile. It may keep state: it is called from
	// one goroutine per prefix.
	Changed func(store.Change) []string
	// Tick, if set, is called every Every (in a goroutine of its own:
	// guard what it shares with Changed) and returns the keys to
	// reconcile, for what changes with time rather than with a write.
	Tick  func() []string
	Every time.Duration
	// Coalesce, if > 0, is how long a changed key waits for more changes
	// before it is reconciled (Queue.AddCoalesced): the changes of one key
	// within the window are reconciled once. For sources that change
	// often per reconciled key (a cluster's machines), where a reconcile
	// per change would redo the same work from a state that moves on
	// before it is written.
	Coalesce time.Duration
}

// Consumer is a durable consumer a controller runs, with its handler
// (events.Typed decodes the data once) and how many messages it handles
// at once (default 1).
type Consumer struct {
	Spec        events.ConsumerSpec
	Handler     events.Handler
	Concurrency int
}

// Env is what controllers run with (a service has all of it in its
// daemon.Deps).
type Env struct {
	JS     jetstream.JetStream
	Log    zerolog.Logger
	Events *events.Metrics
	// Ready, if set, is told true once every cache is loaded and every
	// watch, worker and consumer started.
	Ready func(bool)
	// Started are caches the caller started before Run (to serve requests
	// from them first); Run does not start them again.
	Started []*store.Cache
}

// Run runs c alone (see Run).
func (c *Controller) Run(ctx context.Context, env Env) error { return Run(ctx, env, c) }

// Run starts every cache the controllers watch, each once however many
// controllers share it (none of env.Started), then their watches, workers and consumers, and
// returns once ctx is cancelled and all of them have stopped. ctx carries
// env.Log to the caches and reconciles. It returns a cache's start error
// at once, else the consumers' errors (a closed NATS connection).
func Run(ctx context.Context, env Env, cs ...*Controller) error {
	ctx = env.Log.WithContext(ctx)
	started := map[*store.Cache]bool{}
	for _, c := range env.Started {
		started[c] = true
	}
	for _, c := range cs {
		for _, w := range c.Watches {
			if started[w.Cache] {
				continue
			}
			started[w.Cache] = true
			if err := w.Cache.Start(ctx); err != nil {
				return err
			}
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, c := range cs {
		c.start(ctx, env, &wg, func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		})
	}
	if env.Ready != nil {
		env.Ready(true)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// start launches c's watches, workers and consumers on wg.
func (c *Controller) start(ctx context.Context, env Env, wg *sync.WaitGroup, failed func(error)) {
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	if c.Queue == nil {
		c.Queue = NewQueue()
	}
	all := func() []string { return nil }
	if c.Resync != nil {
		all = c.Resync
	}
	for _, w := range c.Watches {
		keysOf := w.keysOf(all)
		for _, p := range w.Prefixes {
			sub := w.Cache.Subscribe(p)
			run(func() { watch(ctx, c.Queue, sub, w.Coalesce, keysOf) })
		}
		if w.Tick != nil {
			run(func() { tick(ctx, c.Queue, w.Every, w.Tick) })
		}
	}
	if c.Initial != nil {
		for _, k := range c.Initial() {
			c.Queue.Add(k)
		}
	}
	loop := &Loop{Queue: c.Queue, Reconciler: c.Reconcile, Workers: c.Workers, Backoff: c.Backoff, OnError: c.OnError}
	run(func() { loop.Run(ctx) })
	for _, cc := range c.Consumers {
		cons := events.NewConsumer(env.JS, cc.Spec, cc.Handler, events.WithLogger(env.Log),
			events.WithMetrics(env.Events), events.WithConcurrency(cc.Concurrency))
		run(func() { failed(cons.Run(ctx)) })
	}
}

// LogFailures is an OnError that logs a failed reconcile of the key named
// keyName with msg: at debug level when another writer won a
// compare-and-set (the retry reads afresh), else as a warning.
func LogFailures(log zerolog.Logger, keyName, msg string) func(key string, err error, failures int) {
	return func(key string, err error, n int) {
		lvl := log.Warn()
		if errors.Is(err, store.ErrConflict) {
			lvl = log.Debug()
		}
		lvl.Err(err).Str(keyName, key).Int("failures", n).Msg(msg)
	}
}
