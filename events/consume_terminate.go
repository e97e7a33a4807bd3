package events

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as one that retrying cannot fix.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err was marked Permanent or is a malformed event.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p) || errors.Is(err, ErrMalformed)
}

// exhausted reports whether a failed delivery was the last one allowed:
// the message is then terminated as dead-lettered rather than naked.
func exhausted(delivery uint64, maxDeliver int) bool {
	return delivery >= uint64(maxDeliver)
}

// term terminates a message that can never succeed (poison: undecodable,
// a Permanent error) or ran out of deliveries (dead), logged and counted.
func (c *Consumer) term(jm jetstream.Msg, log zerolog.Logger, reason string, dead bool) {
	log.Error().Str("reason", reason).Bool("dead_letter", dead).Msg("terminating message")
	if err := jm.TermWithReason(reason); err != nil {
		log.Warn().Err(err).Msg("term failed")
	}
	c.terminated.Add(1)
	outcome := "term"
	if dead {
		c.dead.Add(1)
		outcome = "dead_letter"
	}
	c.opts.metrics.count(c.spec.Durable, outcome)
}
