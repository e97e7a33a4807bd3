package events

import (
	"context"
	"time"
)

// keepAlive marks the message in progress every so often while its
// handler runs, so a long handler is not redelivered to another worker
// after AckWait; marked is told of every mark JetStream took.
func keepAlive(every time.Duration, marked func()) middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			if m.msg == nil {
				return next(ctx, m)
			}
			done := make(chan struct{})
			defer close(done)
			go func() {
				t := time.NewTicker(every)
				defer t.Stop()
				for {
					select {
					case <-done:
						return
					case <-ctx.Done():
						return
					case <-t.C:
						if err := m.msg.InProgress(); err == nil {
							marked()
						}
					}
				}
			}()
			return next(ctx, m)
		}
	}
}
