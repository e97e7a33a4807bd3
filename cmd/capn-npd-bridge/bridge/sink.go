package bridge

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events"
)

// Report is one health report of the bridge: a CloudEvent to be.
type Report struct {
	// Subject is the NATS subject, capn.health.<cluster>.<machine>.<kind>;
	// a sink that goes through the gateway may ignore it (the gateway
	// derives it from the data).
	Subject string
	// Type is the CloudEvents type (events.TypeNodeConditions or
	// events.TypeProblemEvent); ID is deterministic for the fact.
	Type, ID string
	// Machine is the CloudEvents subject attribute.
	Machine string
	Time    time.Time
	Data    proto.Message
}

// Sink delivers reports. The bridge calls Send from one goroutine, one
// report at a time. Send returns nil once the report is stored (for NATS:
// JetStream acknowledged it), or an error; the bridge then sends the same
// report, with the same id, at the next scrape. ctx bounds the call.
type Sink interface {
	Send(ctx context.Context, r Report) error
}

// NATSSink publishes reports to JetStream with capn's events.Publisher
// (binary CloudEvents, the id as Nats-Msg-Id).
type NATSSink struct {
	Publisher *events.Publisher
}

// Send implements Sink.
func (s NATSSink) Send(ctx context.Context, r Report) error {
	_, err := s.Publisher.Publish(ctx, r.Subject, r.Type, r.ID, r.Data, events.WithSubject(r.Machine), events.WithTime(r.Time))
	return err
}
