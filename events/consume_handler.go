package events

import (
	"context"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// Message is one delivered event.
type Message struct {
	Event   *event.Event
	Subject string
	// Delivery counts deliveries of this message, from 1.
	Delivery uint64
	Metadata *jetstream.MsgMetadata

	msg jetstream.Msg // for the loop's pieces (keep-alive); handlers never ack
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

// middleware wraps a Handler with one concern of the consumer loop
// (watermill's HandlerMiddleware): panic recovery, keep-alive, timing.
// It returns the handler's error, or one it made of a panic; it never
// acks — the loop settles the message from the error (settle).
type middleware func(Handler) Handler

// wrap applies mws to h, the first outermost.
func wrap(h Handler, mws ...middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}
