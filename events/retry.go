package events

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Retry calls f until it returns nil, ctx ends, or the NATS connection is
// closed for good, waiting first between the first attempts and doubling
// up to longest, with a warning per failed attempt naming what. It is for
// start-up steps that need JetStream while a cluster may still be electing
// stream leaders (no responders, timeouts) or another job is still
// provisioning the topology.
//
// It returns nil when f succeeded, ctx's error when ctx ended first, and
// f's error when the connection is closed.
func Retry(ctx context.Context, log zerolog.Logger, what string, first, longest time.Duration, f func(context.Context) error) error {
	wait := first
	for attempt := 1; ; attempt++ {
		err := f(ctx)
		if err == nil {
			if attempt > 1 {
				log.Info().Int("attempts", attempt).Msg(what + ": done")
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			return err
		}
		log.Warn().Err(err).Int("attempt", attempt).Dur("retry_in", wait).Msg("cannot " + what + "; retrying")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, longest)
	}
}
