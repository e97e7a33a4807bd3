package events

import (
	"context"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// Publisher publishes CloudEvents to JetStream. It is safe for concurrent use.
type Publisher struct {
	js      jetstream.JetStream
	source  string
	timeout time.Duration
}

// NewPublisher returns a publisher whose events carry source (a URI
// reference naming the service, e.g. "capn/bootstrapper").
func NewPublisher(js jetstream.JetStream, source string) *Publisher {
	return &Publisher{js: js, source: source, timeout: 5 * time.Second}
}

// Source is the CloudEvents source of this publisher's events.
func (p *Publisher) Source() string { return p.source }

// Publish sends msg as a CloudEvent of type typ and id id on subject. The id
// becomes the Nats-Msg-Id, so JetStream stores a repeated publish of the
// same id within DuplicateWindow once (the ack then says Duplicate). It
// returns only after JetStream has stored the event, or with an error: a
// publish nobody answers (no stream, or a denied subject) fails at ctx's
// deadline, 5 seconds by default.
func (p *Publisher) Publish(ctx context.Context, subject, typ, id string, msg proto.Message, opts ...PublishOption) (*jetstream.PubAck, error) {
	e, err := New(p.source, typ, id, msg)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(&e)
	}
	return p.PublishEvent(ctx, subject, &e)
}

// PublishAsync sends msg like Publish but does not wait for JetStream's
// acknowledgement: done, if not nil, gets the outcome (nil once stored, or
// the error) from another goroutine. It is for best-effort events off a
// handler's critical path, such as timelines: events published on one
// connection keep their order either way.
func (p *Publisher) PublishAsync(subject, typ, id string, msg proto.Message, done func(error)) {
	if done == nil {
		done = func(error) {}
	}
	e, err := New(p.source, typ, id, msg)
	if err != nil {
		done(err)
		return
	}
	m, err := ToMsg(subject, &e)
	if err != nil {
		done(err)
		return
	}
	f, err := p.js.PublishMsgAsync(m, jetstream.WithMsgID(id))
	if err != nil {
		done(fmt.Errorf("publish %s to %s: %w", id, subject, err))
		return
	}
	go func() {
		t := time.NewTimer(p.timeout)
		defer t.Stop()
		select {
		case <-f.Ok():
			done(nil)
		case err := <-f.Err():
			done(fmt.Errorf("publish %s to %s: %w", id, subject, err))
		case <-t.C:
			done(fmt.Errorf("publish %s to %s: no acknowledgement within %s", id, subject, p.timeout))
		}
	}()
}

// PublishEvent sends an already built event (e.g. one received at the
// gateway) in binary mode.
func (p *Publisher) PublishEvent(ctx context.Context, subject string, e *event.Event) (*jetstream.PubAck, error) {
	m, err := ToMsg(subject, e)
	if err != nil {
		return nil, err
	}
	return p.publishMsg(ctx, m, e.ID())
}

func (p *Publisher) publishMsg(ctx context.Context, m *nats.Msg, id string) (*jetstream.PubAck, error) {
	ctx, cancel := withDefaultTimeout(ctx, p.timeout)
	defer cancel()
	ack, err := p.js.PublishMsg(ctx, m, jetstream.WithMsgID(id))
	if err != nil {
		return nil, fmt.Errorf("publish %s to %s: %w", id, m.Subject, err)
	}
	return ack, nil
}

// PublishOption changes an event before it is sent.
type PublishOption func(*event.Event)

// WithSubject sets the CloudEvents subject attribute (the object the event
// is about, e.g. a machine name).
func WithSubject(s string) PublishOption { return func(e *event.Event) { e.SetSubject(s) } }

// WithExtension sets a CloudEvents extension attribute.
func WithExtension(name, value string) PublishOption {
	return func(e *event.Event) { e.SetExtension(name, value) }
}

// WithTime sets the event time (default: now).
func WithTime(t time.Time) PublishOption { return func(e *event.Event) { e.SetTime(t) } }
