package events

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
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

func (s ConsumerSpec) backoff(delivery uint64) time.Duration {
	i := int(delivery) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(s.Backoff) {
		i = len(s.Backoff) - 1
	}
	return s.Backoff[i]
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

// Message is one delivered event.
type Message struct {
	Event   *event.Event
	Subject string
	// Delivery counts deliveries of this message, from 1.
	Delivery uint64
	Metadata *jetstream.MsgMetadata
}

// Handler handles one message. Returning nil means done (the message is
// acked); a Permanent error means it can never succeed (terminated, not
// retried); any other error means "retry later" (nak with backoff, until
// MaxDeliver). A handler never acks itself. ctx is cancelled when the
// consumer stops; the handler should return promptly, and the message is
// then redelivered. Handlers run concurrently and must be idempotent:
// JetStream delivers at least once.
type Handler func(ctx context.Context, m *Message) error

// TypedHandler receives the event's data decoded once into T.
type TypedHandler[T proto.Message] func(ctx context.Context, m *Message, data T) error

// Typed adapts a TypedHandler: data that does not decode into T is a
// permanent failure (terminated and counted), never a retry.
func Typed[T proto.Message](h TypedHandler[T]) Handler {
	var zero T
	mt := zero.ProtoReflect().Type()
	return func(ctx context.Context, m *Message) error {
		data := mt.New().Interface().(T)
		if err := DataAs(m.Event, data); err != nil {
			return Permanent(err)
		}
		return h(ctx, m, data)
	}
}

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

// ErrPanic wraps a panic recovered from a handler.
var ErrPanic = errors.New("handler panicked")

// Stats counts what a consumer did with its messages.
type Stats struct {
	Acked, Naked, Terminated, DeadLettered, Panics, InProgress uint64
}

// Consumer runs a Handler over a durable pull consumer.
type Consumer struct {
	js      jetstream.JetStream
	spec    ConsumerSpec
	handler Handler
	opts    consumeOptions

	acked, naked, terminated, dead, panics, inProgress atomic.Uint64
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
	return &Consumer{js: js, spec: spec, handler: h, opts: o}
}

// Stats returns the counts so far.
func (c *Consumer) Stats() Stats {
	return Stats{
		Acked: c.acked.Load(), Naked: c.naked.Load(), Terminated: c.terminated.Load(),
		DeadLettered: c.dead.Load(), Panics: c.panics.Load(), InProgress: c.inProgress.Load(),
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

// Consume is NewConsumer(...).Run(ctx).
func Consume(ctx context.Context, js jetstream.JetStream, spec ConsumerSpec, h Handler, opts ...ConsumeOption) error {
	return NewConsumer(js, spec, h, opts...).Run(ctx)
}

func (c *Consumer) handle(ctx context.Context, jm jetstream.Msg) {
	meta, err := jm.Metadata()
	if err != nil {
		c.term(jm, nil, "no metadata: "+err.Error(), false)
		return
	}
	log := c.opts.log.With().Str("subject", jm.Subject()).Uint64("stream_seq", meta.Sequence.Stream).Uint64("delivery", meta.NumDelivered).Logger()
	ev, err := FromMsg(jm.Headers(), jm.Data())
	if err != nil {
		c.term(jm, &log, err.Error(), false)
		return
	}
	log = log.With().Str("event_id", ev.ID()).Str("event_type", ev.Type()).Logger()
	m := &Message{Event: ev, Subject: jm.Subject(), Delivery: meta.NumDelivered, Metadata: meta}

	hctx, cancel := context.WithCancel(log.WithContext(ctx))
	done := make(chan struct{})
	go c.keepAlive(hctx, jm, done)
	start := time.Now()
	err = c.call(hctx, m)
	close(done)
	cancel()
	c.opts.metrics.observe(c.spec.Durable, time.Since(start))

	switch {
	case err == nil:
		if aerr := jm.Ack(); aerr != nil {
			log.Warn().Err(aerr).Msg("ack failed; the message will be redelivered")
		}
		c.acked.Add(1)
		c.opts.metrics.count(c.spec.Durable, "ack")
	case IsPermanent(err):
		c.term(jm, &log, err.Error(), false)
	case ctx.Err() != nil:
		// Shutting down: hand the message back at once for another replica.
		_ = jm.Nak()
		c.naked.Add(1)
	case meta.NumDelivered >= uint64(c.spec.MaxDeliver):
		c.term(jm, &log, fmt.Sprintf("gave up after %d deliveries: %v", meta.NumDelivered, err), true)
	default:
		delay := c.spec.backoff(meta.NumDelivered)
		log.Warn().Err(err).Dur("retry_in", delay).Msg("handler failed; will retry")
		if nerr := jm.NakWithDelay(delay); nerr != nil {
			log.Warn().Err(nerr).Msg("nak failed; JetStream redelivers after AckWait")
		}
		c.naked.Add(1)
		c.opts.metrics.count(c.spec.Durable, "nak")
	}
}

func (c *Consumer) term(jm jetstream.Msg, log *zerolog.Logger, reason string, dead bool) {
	if log == nil {
		l := c.opts.log.With().Str("subject", jm.Subject()).Logger()
		log = &l
	}
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

// call runs the handler, turning a panic into an error.
func (c *Consumer) call(ctx context.Context, m *Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.panics.Add(1)
			c.opts.metrics.count(c.spec.Durable, "panic")
			zerolog.Ctx(ctx).Error().Str("panic", fmt.Sprint(r)).Str("stack", string(debug.Stack())).Msg("handler panicked")
			err = fmt.Errorf("%w: %v", ErrPanic, r)
		}
	}()
	return c.handler(ctx, m)
}

// keepAlive marks the message in progress while its handler runs, so a
// long handler is not redelivered to another worker.
func (c *Consumer) keepAlive(ctx context.Context, jm jetstream.Msg, done <-chan struct{}) {
	t := time.NewTicker(c.opts.inProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			if err := jm.InProgress(); err == nil {
				c.inProgress.Add(1)
			}
		}
	}
}

// Metrics are the Prometheus metrics of every consumer in a process.
type Metrics struct {
	outcomes *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers consumer metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capn_events_handled_total",
			Help: "Messages handled, by consumer and outcome (ack, nak, term, dead_letter, panic).",
		}, []string{"consumer", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "capn_events_handler_seconds",
			Help:    "Time spent in handlers, by consumer.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"consumer"}),
	}
	if reg != nil {
		reg.MustRegister(m.outcomes, m.duration)
	}
	return m
}

func (m *Metrics) count(consumer, outcome string) {
	if m != nil {
		m.outcomes.WithLabelValues(consumer, outcome).Inc()
	}
}

func (m *Metrics) observe(consumer string, d time.Duration) {
	if m != nil {
		m.duration.WithLabelValues(consumer).Observe(d.Seconds())
	}
}
