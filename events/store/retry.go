package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// DefaultAttempts is how many times [RetryOnConflict] and [Bucket.Mutate]
// try a compare-and-set before giving up.
const DefaultAttempts = 10

// Backoff between attempts: full jitter over an exponentially growing
// window, so that writers that lost together do not retry in lockstep.
const (
	backoffBase = 2 * time.Millisecond
	backoffMax  = 100 * time.Millisecond
)

// RetryOnConflict calls fn until it returns nil, returns an error that is not
// a lost compare-and-set, or has been called attempts times (attempts <= 0
// means [DefaultAttempts]). fn must start from a fresh read each time it is
// called: it is the whole read-modify-write, not just the write.
//
// A lost compare-and-set is [ErrConflict], jetstream.ErrKeyRevisionMismatch
// or jetstream.ErrKeyExists, so fn may call the raw KeyValue too. Between
// attempts it waits a short jittered backoff (2ms doubling to 100ms).
//
// fn receives ctx unchanged. If ctx ends while waiting, RetryOnConflict
// returns an error wrapping both ctx.Err() and fn's last error. When the
// attempts run out the returned error wraps fn's last error, so it still
// matches ErrConflict. Safe for concurrent use; it holds no state.
func RetryOnConflict(ctx context.Context, attempts int, fn func(ctx context.Context) error) error {
	if attempts <= 0 {
		attempts = DefaultAttempts
	}
	var err error
	for i := range attempts {
		if i > 0 {
			t := time.NewTimer(backoff(i))
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("retry on conflict: %w: %w", ctx.Err(), err)
			case <-t.C:
			}
		}
		err = fn(ctx)
		if !isConflict(err) {
			return err
		}
	}
	return fmt.Errorf("retry on conflict: gave up after %d attempts: %w", attempts, err)
}

// backoff is the wait before attempt i (i >= 1): uniformly random in
// [0, min(backoffBase<<(i-1), backoffMax)].
func backoff(i int) time.Duration {
	window := backoffMax
	if i <= 10 {
		window = min(backoffBase<<(i-1), backoffMax)
	}
	return rand.N(window + 1)
}
