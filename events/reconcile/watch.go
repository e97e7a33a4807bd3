package reconcile

import (
	"context"
	"time"

	"github.com/capn-dev/capn/events/store"
)

// watch turns a cache subscription into work: keysOf maps every change
// (resync markers included) to the keys to reconcile, each given to add.
// It returns when ctx is cancelled or the subscription ends, and
// unsubscribes. Every controller's watch-to-queue loop is this one.
// A coalesce window > 0 adds each key with Queue.AddCoalesced.
func watch(ctx context.Context, q *Queue, sub *store.Subscription, coalesce time.Duration, keysOf func(ch store.Change, add func(string))) {
	add := q.Add
	if coalesce > 0 {
		add = func(k string) { q.AddCoalesced(k, coalesce) }
	}
	sub.Each(ctx, func(ch store.Change) { keysOf(ch, add) })
}

// tick enqueues the keys f returns every d until ctx is cancelled.
func tick(ctx context.Context, q *Queue, d time.Duration, f func() []string) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, k := range f() {
				q.Add(k)
			}
		}
	}
}

// keysOf is how w maps a change: its Changed, else its Key with all for
// a resync marker.
func (w Source) keysOf(all func() []string) func(store.Change, func(string)) {
	if w.Changed != nil {
		return func(ch store.Change, add func(string)) {
			for _, k := range w.Changed(ch) {
				add(k)
			}
		}
	}
	return func(ch store.Change, add func(string)) {
		if ch.Resync {
			for _, k := range all() {
				add(k)
			}
			return
		}
		if k := w.Key(ch.Key); k != "" {
			add(k)
		}
	}
}
