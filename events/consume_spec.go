package events

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ConsumerSpec declares a durable pull consumer. Zero fields take defaults.
type ConsumerSpec struct {
	Stream      string
	Durable     string
	Filters     []string
	Description string
	// MaxDeliver bounds deliveries of one message (default 10); the last
	// failed delivery terminates the message and counts it as dead.
	MaxDeliver int
	// Backoff is the nak delay by delivery attempt; the last entry repeats
	// (default 250ms, 1s, 5s, 15s, 30s).
	Backoff []time.Duration
	// AckWait is how long a delivered message may go without an ack or an
	// InProgress before JetStream redelivers it (default 30s).
	AckWait       time.Duration
	MaxAckPending int
	// DeliverNew starts a new consumer at new messages instead of the start
	// of the stream.
	DeliverNew bool
	// BatchEvery, when set, takes messages in bursts: what is pending is
	// fetched at once (up to MaxAckPending, no pull request left open at
	// the server), then again at once if that was a full burst, else after
	// BatchEvery. The process wakes once per burst instead of once per
	// message, and a message waits up to BatchEvery: for a stream of many
	// small reports that tolerate the delay (heartbeats).
	BatchEvery time.Duration
}

var defaultBackoff = []time.Duration{250 * time.Millisecond, time.Second, 5 * time.Second, 15 * time.Second, 30 * time.Second}

func (s ConsumerSpec) withDefaults() ConsumerSpec {
	if s.MaxDeliver == 0 {
		s.MaxDeliver = 10
	}
	if len(s.Backoff) == 0 {
		s.Backoff = defaultBackoff
	}
	if s.AckWait == 0 {
		s.AckWait = 30 * time.Second
	}
	if s.MaxAckPending == 0 {
		s.MaxAckPending = 1000
	}
	return s
}

// Config is the JetStream consumer configuration of s.
func (s ConsumerSpec) Config() jetstream.ConsumerConfig {
	s = s.withDefaults()
	cfg := jetstream.ConsumerConfig{
		Durable:       s.Durable,
		Description:   s.Description,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.AckWait,
		MaxDeliver:    s.MaxDeliver,
		MaxAckPending: s.MaxAckPending,
	}
	if s.DeliverNew {
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	if len(s.Filters) == 1 {
		cfg.FilterSubject = s.Filters[0]
	} else {
		cfg.FilterSubjects = s.Filters
	}
	return cfg
}

// EnsureConsumer creates or updates the durable consumer s (idempotent).
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, s ConsumerSpec) (jetstream.Consumer, error) {
	ctx, cancel := withDefaultTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := js.CreateOrUpdateConsumer(ctx, s.Stream, s.Config())
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", s.Durable, s.Stream, err)
	}
	return c, nil
}
