package events

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Stats counts what a consumer did with its messages.
type Stats struct {
	Acked, Naked, Terminated, DeadLettered, Panics, InProgress uint64
	// Bursts counts the fetches of a consumer with BatchEvery.
	Bursts uint64
}

// Consumer runs a Handler over a durable pull consumer.
type Consumer struct {
	js   jetstream.JetStream
	spec ConsumerSpec
	// handler is the service's handler inside the loop's middlewares.
	handler Handler
	opts    consumeOptions

	acked, naked, terminated, dead, panics, inProgress, bursts atomic.Uint64
}

type consumeOptions struct {
	concurrency          int
	log                  zerolog.Logger
	metrics              *Metrics
	inProgressEvery      time.Duration
	retryFirst, retryMax time.Duration
}

// Waits between attempts to set a consumer up (Consumer.Run).
const (
	DefaultSetupRetryFirst = 250 * time.Millisecond
	DefaultSetupRetryMax   = 10 * time.Second
)

// WithSetupRetry sets the first and the longest wait between attempts to
// set the consumer up (default 250ms doubling up to 10s).
func WithSetupRetry(first, longest time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.retryFirst, o.retryMax = first, longest }
}

// ConsumeOption configures a Consumer.
type ConsumeOption func(*consumeOptions)

// WithConcurrency sets how many handlers run at once (default 1).
func WithConcurrency(n int) ConsumeOption { return func(o *consumeOptions) { o.concurrency = n } }

// WithLogger sets the logger; handlers get it, enriched, through zerolog.Ctx.
func WithLogger(l zerolog.Logger) ConsumeOption { return func(o *consumeOptions) { o.log = l } }

// WithMetrics reports outcomes to Prometheus metrics.
func WithMetrics(m *Metrics) ConsumeOption { return func(o *consumeOptions) { o.metrics = m } }

// WithInProgressEvery sets how often a running handler's message is marked
// in progress (default AckWait/3).
func WithInProgressEvery(d time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.inProgressEvery = d }
}

// NewConsumer prepares a consumer; Run starts it.
func NewConsumer(js jetstream.JetStream, spec ConsumerSpec, h Handler, opts ...ConsumeOption) *Consumer {
	spec = spec.withDefaults()
	o := consumeOptions{concurrency: 1, log: zerolog.Nop(), retryFirst: DefaultSetupRetryFirst, retryMax: DefaultSetupRetryMax}
	for _, f := range opts {
		f(&o)
	}
	if o.concurrency < 1 {
		o.concurrency = 1
	}
	if o.retryFirst <= 0 {
		o.retryFirst = DefaultSetupRetryFirst
	}
	o.retryMax = max(o.retryMax, o.retryFirst)
	if o.inProgressEvery == 0 {
		o.inProgressEvery = spec.AckWait / 3
	}
	o.log = o.log.With().Str("consumer", spec.Durable).Logger()
	c := &Consumer{js: js, spec: spec, opts: o}
	c.handler = wrap(h,
		o.metrics.timed(spec.Durable),
		keepAlive(o.inProgressEvery, func() { c.inProgress.Add(1) }),
		recoverPanics(func() { c.panics.Add(1); o.metrics.count(spec.Durable, "panic") }),
	)
	return c
}

// Stats returns the counts so far.
func (c *Consumer) Stats() Stats {
	return Stats{
		Acked: c.acked.Load(), Naked: c.naked.Load(), Terminated: c.terminated.Load(),
		DeadLettered: c.dead.Load(), Panics: c.panics.Load(), InProgress: c.inProgress.Load(),
		Bursts: c.bursts.Load(),
	}
}

// Run ensures the durable consumer exists and handles messages until ctx is
// cancelled; then it stops fetching, waits for running handlers and returns
// nil.
//
// Setting the consumer up is retried until it works or ctx ends, waiting
// 250ms doubling up to 10s (WithSetupRetry) with a warning per attempt:
// the stream may not be provisioned yet (another job provisions it), or
// the cluster may be electing leaders after losing a node. When the
// message stream ends while ctx is live (the consumer was deleted, or its
// leader lost), the consumer is set up again the same way. Run returns an
// error only when the NATS connection is closed for good.
func (c *Consumer) Run(ctx context.Context) error {
	for {
		cons, err := c.setup(ctx)
		if err != nil || cons == nil {
			return err
		}
		c.consume(ctx, cons)
		if ctx.Err() != nil {
			return nil
		}
		c.opts.log.Warn().Msg("consumer's message stream ended; setting it up again")
	}
}

// setup ensures the consumer, retrying with capped exponential backoff; it
// returns nil, nil when ctx ends first.
func (c *Consumer) setup(ctx context.Context) (jetstream.Consumer, error) {
	var cons jetstream.Consumer
	log := c.opts.log.With().Str("stream", c.spec.Stream).Logger()
	err := Retry(ctx, log, "set the consumer up", c.opts.retryFirst, c.opts.retryMax, func(ctx context.Context) error {
		var err error
		cons, err = EnsureConsumer(ctx, c.js, c.spec)
		return err
	})
	if ctx.Err() != nil {
		return nil, nil
	}
	return cons, err
}

// consume handles cons's messages until ctx ends or its message stream
// does, and waits for running handlers.
func (c *Consumer) consume(ctx context.Context, cons jetstream.Consumer) {
	if c.spec.BatchEvery > 0 {
		c.consumeBursts(ctx, cons)
		return
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2 * c.opts.concurrency))
	if err != nil {
		c.opts.log.Warn().Err(err).Msg("cannot pull messages")
		select {
		case <-ctx.Done():
		case <-time.After(c.opts.retryFirst):
		}
		return
	}
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
			it.Stop()
		case <-stopped:
		}
	}()
	var wg sync.WaitGroup
	for range c.opts.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				jm, err := it.Next()
				if err != nil {
					if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
						return
					}
					c.opts.log.Warn().Err(err).Msg("fetch failed; retrying")
					continue
				}
				c.handle(ctx, jm)
			}
		}()
	}
	wg.Wait()
	it.Stop()
}

// consumeBursts handles cons's messages in bursts (ConsumerSpec.BatchEvery)
// until ctx ends or the consumer is gone, and waits for running handlers.
func (c *Consumer) consumeBursts(ctx context.Context, cons jetstream.Consumer) {
	work := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for range c.opts.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for jm := range work {
				c.handle(ctx, jm)
			}
		}()
	}
	defer func() {
		close(work)
		wg.Wait()
	}()
	size := c.spec.MaxAckPending
	for ctx.Err() == nil {
		n := 0
		batch, err := cons.FetchNoWait(size)
		if err == nil {
			for jm := range batch.Messages() {
				n++
				work <- jm
			}
			err = batch.Error()
		}
		c.bursts.Add(1)
		switch {
		case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrConsumerDeleted),
			errors.Is(err, nats.ErrConnectionClosed):
			// Nobody serves the consumer's pulls (deleted, or its leader
			// lost): Run sets it up again.
			return
		case err != nil:
			c.opts.log.Warn().Err(err).Msg("fetch failed; retrying")
		case n == size:
			continue // a full burst: more may be pending
		}
		select {
		case <-ctx.Done():
		case <-time.After(c.spec.BatchEvery):
		}
	}
}

// Consume is NewConsumer(...).Run(ctx).
func Consume(ctx context.Context, js jetstream.JetStream, spec ConsumerSpec, h Handler, opts ...ConsumeOption) error {
	return NewConsumer(js, spec, h, opts...).Run(ctx)
}

// handle runs one message through the handler and its middlewares, then
// settles it.
func (c *Consumer) handle(ctx context.Context, jm jetstream.Msg) {
	m, log, err := correlate(c.opts.log, jm)
	if err != nil {
		c.term(jm, log, err.Error(), false)
		return
	}
	hctx, cancel := context.WithCancel(log.WithContext(ctx))
	err = c.handler(hctx, m)
	cancel()
	c.settle(ctx, jm, log, m.Delivery, err)
}

// settle is the one place a message is acked, naked or terminated, by the
// handler's error: nil acks; a Permanent error terminates; any other naks
// with backoff (consume_retry.go) until the last allowed delivery, which
// terminates as dead-lettered (consume_terminate.go). On shutdown a failed
// message is handed back at once.
func (c *Consumer) settle(ctx context.Context, jm jetstream.Msg, log zerolog.Logger, delivery uint64, err error) {
	switch {
	case err == nil:
		if aerr := jm.Ack(); aerr != nil {
			log.Warn().Err(aerr).Msg("ack failed; the message will be redelivered")
		}
		c.acked.Add(1)
		c.opts.metrics.count(c.spec.Durable, "ack")
	case IsPermanent(err):
		c.term(jm, log, err.Error(), false)
	case ctx.Err() != nil:
		c.handBack(jm)
	case exhausted(delivery, c.spec.MaxDeliver):
		c.term(jm, log, fmt.Sprintf("gave up after %d deliveries: %v", delivery, err), true)
	default:
		c.retryLater(jm, log, err, delivery)
	}
}
