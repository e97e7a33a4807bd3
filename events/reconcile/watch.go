package reconcile

import (
	"context"

	"github.com/capn-dev/capn/events/store"
)

// Watch turns a cache subscription into work: every change is mapped by
// keyOf to the key a reconciler works on ("" skips it), and a resync marker
// enqueues every key all returns. It returns when ctx is cancelled or the
// subscription ends, and unsubscribes. Every service's watch-to-queue loop
// is this one.
func Watch(ctx context.Context, q *Queue, sub *store.Subscription, keyOf func(kvKey string) string, all func() []string) {
	defer sub.Unsubscribe()
	for {
		select {
		case <-ctx.Done():
			return
		case ch, ok := <-sub.C():
			if !ok {
				return
			}
			if ch.Resync {
				for _, k := range all() {
					q.Add(k)
				}
				continue
			}
			if k := keyOf(ch.Key); k != "" {
				q.Add(k)
			}
		}
	}
}
