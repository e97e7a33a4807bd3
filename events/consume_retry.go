package events

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// backoff is the nak delay after the delivery-th failed delivery: the
// spec's Backoff by attempt, its last entry repeating.
func (s ConsumerSpec) backoff(delivery uint64) time.Duration {
	i := min(max(int(delivery)-1, 0), len(s.Backoff)-1)
	return s.Backoff[i]
}

// retryLater naks a message whose handler failed so that JetStream
// redelivers it after the backoff of its delivery count.
func (c *Consumer) retryLater(jm jetstream.Msg, log zerolog.Logger, err error, delivery uint64) {
	delay := c.spec.backoff(delivery)
	log.Warn().Err(err).Dur("retry_in", delay).Msg("handler failed; will retry")
	if nerr := jm.NakWithDelay(delay); nerr != nil {
		log.Warn().Err(nerr).Msg("nak failed; JetStream redelivers after AckWait")
	}
	c.naked.Add(1)
	c.opts.metrics.count(c.spec.Durable, "nak")
}

// handBack naks a message at once on shutdown, for another replica to take.
func (c *Consumer) handBack(jm jetstream.Msg) {
	_ = jm.Nak()
	c.naked.Add(1)
}
