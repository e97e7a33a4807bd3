package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Re-creating a lost watcher backs off from rewatchMin to rewatchMax.
const (
	rewatchMin = 50 * time.Millisecond
	rewatchMax = 5 * time.Second
)

// watchLoop is the one goroutine that owns a Cache's watcher. Only it
// writes to the cache, so applying a change and emitting it are ordered.
type watchLoop struct {
	c    *Cache
	opts CacheOptions
	log  *zerolog.Logger

	w       jetstream.KeyWatcher
	wcancel context.CancelFunc
	// caughtUpTo is the bucket's last revision measured just before the
	// current watcher was created: when the watcher reports the end of its
	// initial values, everything up to it has been delivered, even
	// revisions since purged from the stream.
	caughtUpTo uint64

	// Stall detection: armed is a revision the server had at the previous
	// check that the watcher had not delivered yet.
	armed      uint64
	progressed bool
	// checkedUpTo is, for a filtered cache, the bucket's last revision at
	// the last check that found nothing under the prefixes beyond what the
	// cache applied: until the bucket moves past it, there is nothing to
	// ask.
	checkedUpTo uint64
	stream      jetstream.Stream // the bucket's stream, once looked up

	rewatchC     <-chan time.Time
	rewatchDelay time.Duration

	snapping bool
	again    bool // a resync was asked for while one was running
	snapCh   chan snapshot
	snapWG   sync.WaitGroup
}

// load creates the first watcher and applies the initial values.
func (l *watchLoop) load(ctx context.Context) error {
	if err := l.newWatcher(ctx, 0); err != nil {
		return err
	}
	t := time.NewTimer(l.opts.LoadTimeout)
	defer t.Stop()
	for {
		select {
		case e, ok := <-l.w.Updates():
			if !ok {
				return errors.New("watcher closed during the initial load")
			}
			if e == nil {
				l.log.Debug().Uint64("revision", l.c.Revision()).Msg("cache loaded")
				return nil
			}
			l.apply(e)
		case <-t.C:
			return fmt.Errorf("initial load: not done after %s", l.opts.LoadTimeout)
		case <-ctx.Done():
			return fmt.Errorf("initial load: %w", ctx.Err())
		}
	}
}

func (l *watchLoop) run(ctx context.Context) {
	defer func() {
		l.stopWatcher()
		l.snapWG.Wait()
		l.c.shutdown()
		close(l.c.done)
		l.log.Debug().Msg("cache stopped")
	}()

	var stallC, resyncC <-chan time.Time
	if l.opts.StallCheckEvery > 0 {
		t := time.NewTicker(l.opts.StallCheckEvery)
		defer t.Stop()
		stallC = t.C
	}
	var resyncT *time.Timer
	if l.opts.ResyncEvery > 0 {
		resyncT = time.NewTimer(jitter(l.opts.ResyncEvery))
		defer resyncT.Stop()
		resyncC = resyncT.C
	}

	for {
		var updates <-chan jetstream.KeyValueEntry
		if l.w != nil {
			updates = l.w.Updates()
		}
		select {
		case <-ctx.Done():
			return
		case e, ok := <-updates:
			switch {
			case !ok:
				l.log.Warn().Uint64("revision", l.c.Revision()).Msg("cache watcher closed; resuming")
				l.stopWatcher()
				l.scheduleRewatch()
			case e == nil:
				l.caughtUp()
			default:
				l.apply(e)
			}
		case <-l.rewatchC:
			l.rewatchC = nil
			l.rewatch(ctx)
		case <-stallC:
			l.checkStall(ctx)
		case <-resyncC:
			resyncT.Reset(jitter(l.opts.ResyncEvery))
			l.startSnapshot(ctx)
		case <-l.c.stopWatcher:
			if l.w != nil {
				_ = l.w.Stop()
			}
		case <-l.c.resyncReq:
			l.startSnapshot(ctx)
		case s := <-l.snapCh:
			l.snapping = false
			l.repair(ctx, s)
			if l.again {
				l.again = false
				l.startSnapshot(ctx)
			}
		}
	}
}

// newWatcher replaces the watcher with one that starts at revision from
// with the full history (from 0: the latest value of every key).
func (l *watchLoop) newWatcher(ctx context.Context, from uint64) error {
	l.stopWatcher()
	var opts []jetstream.WatchOpt
	if from > 0 {
		opts = append(opts, jetstream.IncludeHistory(), jetstream.ResumeFromRevision(from))
	}
	w, cancel, err := watchAll(ctx, l.c.kv, l.opts.Prefixes, l.opts.Timeout, opts...)
	if err != nil {
		return err
	}
	l.w, l.wcancel = w, cancel
	l.armed, l.progressed = 0, false
	return nil
}

// watchAll starts a watcher on the whole bucket, or on the keys under
// prefixes if there are any (filtered by the server). nats.go ties a watcher's
// life to the ctx it was made with, so that ctx cannot carry the creation
// timeout: the timeout cancels it only if creation has not finished. The
// caller must call the returned cancel after stopping the watcher.
func watchAll(ctx context.Context, kv jetstream.KeyValue, prefixes []string, timeout time.Duration, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, context.CancelFunc, error) {
	wctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(timeout, cancel)
	var filters []string
	for _, p := range prefixes {
		filters = append(filters, p+">")
	}
	w, err := kv.WatchFiltered(wctx, filters, opts...)
	if !timer.Stop() && err == nil {
		// The timer fired and cancelled the new watcher.
		_ = w.Stop()
		drain(w)
		err = fmt.Errorf("watch: not created within %s", timeout)
	}
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("watch: %w", err)
	}
	return w, cancel, nil
}

func (l *watchLoop) stopWatcher() {
	if l.w == nil {
		return
	}
	_ = l.w.Stop()
	drain(l.w)
	l.wcancel()
	l.w, l.wcancel, l.caughtUpTo = nil, nil, 0
}

func (l *watchLoop) scheduleRewatch() {
	if l.rewatchDelay == 0 {
		l.rewatchDelay = rewatchMin
	}
	l.rewatchC = time.After(l.rewatchDelay)
	l.rewatchDelay = min(2*l.rewatchDelay, rewatchMax)
}

// rewatch re-creates the watcher from the revision after the last applied.
func (l *watchLoop) rewatch(ctx context.Context) {
	last, err := l.lastRevision(ctx)
	if err != nil {
		l.log.Debug().Err(err).Msg("cache: bucket status")
	}
	from := l.c.Revision() + 1
	l.log.Info().Uint64("from_revision", from).Msg("cache: re-creating watcher")
	if err := l.newWatcher(ctx, from); err != nil {
		if ctx.Err() == nil {
			l.log.Warn().Err(err).Dur("retry_in", l.rewatchDelay).Msg("cache: re-create watcher")
			l.scheduleRewatch()
		}
		return
	}
	l.caughtUpTo = last
	l.rewatchDelay = 0
}

// caughtUp handles a watcher's end-of-initial-values marker.
func (l *watchLoop) caughtUp() {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	if l.caughtUpTo > l.c.rev {
		l.c.advance(l.caughtUpTo)
	}
	l.caughtUpTo = 0
}

// lastRevision asks the server for the bucket's last revision.
func (l *watchLoop) lastRevision(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	return lastWritten(ctx, l.c.kv, CacheOptions{})
}

// lastKeptRevision is the last revision of a write the watcher should
// deliver: the bucket's last revision for an unfiltered cache; for a
// filtered one, the last revision under its prefixes, asked (one direct
// get per prefix) only when the bucket has moved past both what the cache
// applied and the previous such check.
func (l *watchLoop) lastKeptRevision(ctx context.Context, applied uint64) (uint64, error) {
	last, err := l.lastRevision(ctx)
	if err != nil || len(l.opts.Prefixes) == 0 || last <= applied {
		return last, err
	}
	if last <= l.checkedUpTo {
		return applied, nil // nothing under the prefixes since that check
	}
	ctx, cancel := context.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	if l.stream == nil {
		if l.stream, err = l.opts.js.Stream(ctx, "KV_"+l.c.kv.Bucket()); err != nil {
			return 0, err
		}
	}
	kept, err := lastUnder(ctx, l.stream, l.c.kv.Bucket(), l.opts.Prefixes)
	if err != nil {
		return 0, err
	}
	if kept <= applied {
		l.checkedUpTo = last
	}
	return kept, nil
}

// checkStall re-creates a watcher that has delivered nothing since the
// previous check although the server then had a revision it lacks.
func (l *watchLoop) checkStall(ctx context.Context) {
	if l.w == nil {
		return // a rewatch is already scheduled
	}
	if l.progressed {
		l.progressed, l.armed = false, 0
		return
	}
	rev := l.c.Revision()
	if l.armed > rev {
		l.log.Warn().Uint64("revision", rev).Uint64("server_revision", l.armed).Msg("cache watcher stalled; resuming")
		l.stopWatcher()
		l.rewatch(ctx)
		return
	}
	last, err := l.lastKeptRevision(ctx, rev)
	if err != nil {
		l.log.Debug().Err(err).Msg("cache: bucket status")
		return
	}
	l.armed = 0
	if last > rev {
		l.armed = last
	}
}

// apply applies one watched entry, unless its revision is already applied.
func (l *watchLoop) apply(e jetstream.KeyValueEntry) {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	rev := e.Revision()
	if rev <= c.rev {
		return
	}
	c.advance(rev)
	l.progressed = true
	if c.dropEntry != nil && c.dropEntry(e) {
		return
	}
	key := e.Key()
	if !c.keeps(key) {
		return
	}
	switch e.Operation() {
	case jetstream.KeyValuePut:
		c.set(RawEntry{Key: key, Value: e.Value(), Revision: rev})
		c.emit(Change{Key: key, Value: e.Value(), Revision: rev, Op: OpPut})
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		if _, ok := c.entries[key]; ok {
			c.unset(key)
			c.emit(Change{Key: key, Revision: rev, Op: OpDelete})
		}
	}
}

// jitter is d plus up to half of it, at random: the caches of a deployment's
// services start together, and their resyncs — each a listing of a whole
// bucket, then every subscriber's reconcile of everything — should not all
// come at the same moment.
func jitter(d time.Duration) time.Duration {
	return d + rand.N(d/2+1)
}

// snapshot is the revision and operation of every key's latest entry
// (deletes included) as of one moment, read by a separate watcher with
// metadata only: a resync of a bucket of 100,000 machines must not carry
// (and hold) every value again, only the few it repairs are read.
type snapshot struct {
	entries map[string]snapEntry
	horizon uint64 // highest revision seen
	err     error
}

type snapEntry struct {
	rev uint64
	op  jetstream.KeyValueOp
}

func (l *watchLoop) startSnapshot(ctx context.Context) {
	if l.snapping {
		l.again = true
		return
	}
	l.snapping = true
	l.snapWG.Add(1)
	go func() {
		defer l.snapWG.Done()
		l.snapCh <- l.takeSnapshot(ctx)
	}()
}

func (l *watchLoop) takeSnapshot(ctx context.Context) snapshot {
	ctx, cancel := context.WithTimeout(ctx, l.opts.LoadTimeout)
	defer cancel()
	w, wcancel, err := watchAll(ctx, l.c.kv, l.opts.Prefixes, l.opts.Timeout, jetstream.MetaOnly())
	if err != nil {
		return snapshot{err: err}
	}
	defer func() {
		_ = w.Stop()
		drain(w)
		wcancel()
	}()
	s := snapshot{entries: make(map[string]snapEntry)}
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return snapshot{err: errors.New("resync watcher closed")}
			}
			if e == nil {
				return s
			}
			s.entries[e.Key()] = snapEntry{rev: e.Revision(), op: e.Operation()}
			s.horizon = max(s.horizon, e.Revision())
		case <-ctx.Done():
			return snapshot{err: fmt.Errorf("resync listing: %w", ctx.Err())}
		}
	}
}

// repair makes the cache agree with a snapshot wherever the watcher should
// already have brought the snapshot's state, emits each repair as a change,
// then sends every subscriber a Resync marker.
//
// For a key, the snapshot is authoritative unless the watcher is behind it
// (snapshot revision above the last applied: the watcher will deliver it)
// or the cache is ahead of it (cached revision above the snapshot's
// horizon: written after the listing). A key to put again is read from
// the bucket (its latest value; one written since the listing and not yet
// applied is left to the watcher). The loop is the cache's only writer, so
// nothing changes the entries while repair reads them.
func (l *watchLoop) repair(ctx context.Context, s snapshot) {
	if s.err != nil {
		l.log.Warn().Err(s.err).Msg("cache resync")
		return
	}
	c := l.c
	last := c.Revision()
	var repairs []Change
	for key, se := range s.entries {
		if !c.keeps(key) {
			continue
		}
		ce, cached := c.Get(key)
		if se.rev > last || (cached && ce.Revision > s.horizon) {
			continue
		}
		switch se.op {
		case jetstream.KeyValuePut:
			if !cached || ce.Revision != se.rev {
				if ch, ok := l.latest(ctx, key, last, cached); ok {
					repairs = append(repairs, ch)
				}
			}
		default:
			if cached {
				repairs = append(repairs, Change{Key: key, Revision: se.rev, Op: OpDelete})
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Keys gone from the stream altogether (purged delete markers, expiry):
	// the cache has applied everything up to last and the key is gone, so
	// "deleted as of last" is the truth we know.
	for key, ce := range c.entries {
		if _, ok := s.entries[key]; !ok && ce.Revision <= s.horizon {
			repairs = append(repairs, Change{Key: key, Revision: last, Op: OpDelete})
		}
	}
	slices.SortFunc(repairs, func(a, b Change) int { return cmp.Compare(a.Revision, b.Revision) })
	for _, ch := range repairs {
		if ch.Op == OpPut {
			c.set(RawEntry{Key: ch.Key, Value: ch.Value, Revision: ch.Revision})
		} else {
			c.unset(ch.Key)
		}
		c.emit(ch)
	}
	c.emit(Change{Resync: true, Revision: last})
	ev := l.log.Debug()
	if len(repairs) > 0 {
		ev = l.log.Warn()
	}
	ev.Int("keys", len(s.entries)).Int("repaired", len(repairs)).Uint64("revision", last).Msg("cache resynced")
}

// latest reads key's latest entry for a repair: a put, or a delete when
// the key is gone and cached; nothing when it was written after last (the
// watcher brings it) or cannot be read now (the next resync tries again).
func (l *watchLoop) latest(ctx context.Context, key string, last uint64, cached bool) (Change, bool) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	e, err := l.c.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return Change{Key: key, Revision: last, Op: OpDelete}, cached
	case err != nil:
		l.log.Warn().Err(err).Str("key", key).Msg("cache resync: reading a key to repair")
		return Change{}, false
	case e.Revision() > last:
		return Change{}, false
	}
	return Change{Key: key, Value: e.Value(), Revision: e.Revision(), Op: OpPut}, true
}
