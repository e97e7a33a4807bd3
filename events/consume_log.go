package events

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// correlate decodes a delivered message and returns the logger its handler
// (through zerolog.Ctx) and its settlement log with: base with subject,
// stream_seq, delivery, event_id and event_type — as many as are known when
// the message cannot be decoded, which is then the error (a poison message).
func correlate(base zerolog.Logger, jm jetstream.Msg) (*Message, zerolog.Logger, error) {
	f := &msgFields{subject: jm.Subject()}
	meta, err := jm.Metadata()
	if err != nil {
		return nil, base.Hook(f), errors.New("no metadata: " + err.Error())
	}
	f.seq, f.delivery = meta.Sequence.Stream, meta.NumDelivered
	ev, err := FromMsg(jm.Headers(), jm.Data())
	if err != nil {
		return nil, base.Hook(f), err
	}
	f.id, f.typ = ev.ID(), ev.Type()
	return &Message{Event: ev, Subject: jm.Subject(), Delivery: meta.NumDelivered, Metadata: meta, msg: jm}, base.Hook(f), nil
}

// msgFields are a message's correlation fields, added to each line logged
// while it is handled. As a hook they are formatted only when a line is
// written — most messages log nothing — instead of into a child logger's
// context for every message.
type msgFields struct {
	subject       string
	seq, delivery uint64 // 0: no metadata
	id, typ       string // "": not decoded
}

func (f *msgFields) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str("subject", f.subject)
	if f.seq != 0 {
		e.Uint64("stream_seq", f.seq).Uint64("delivery", f.delivery)
	}
	if f.id != "" {
		e.Str("event_id", f.id).Str("event_type", f.typ)
	}
}
