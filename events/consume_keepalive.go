package events

import (
	"context"
	"sync"
	"time"
)

// keepAlive marks the message in progress every so often while its
// handler runs, so a long handler is not redelivered to another worker
// after AckWait; marked is told of every mark JetStream took. It arms a
// timer, not a goroutine: almost every handler ends long before the first
// mark, and a goroutine and ticker per message were a visible part of an
// idle health-watcher's heartbeats.
func keepAlive(every time.Duration, marked func()) middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			if m.msg == nil {
				return next(ctx, m)
			}
			var (
				mu   sync.Mutex
				done bool
				t    *time.Timer
			)
			mu.Lock()
			t = time.AfterFunc(every, func() {
				if ctx.Err() != nil {
					return
				}
				if err := m.msg.InProgress(); err == nil {
					marked()
				}
				mu.Lock()
				defer mu.Unlock()
				if !done {
					t.Reset(every)
				}
			})
			mu.Unlock()
			defer func() {
				mu.Lock()
				defer mu.Unlock()
				done = true
				t.Stop()
			}()
			return next(ctx, m)
		}
	}
}
