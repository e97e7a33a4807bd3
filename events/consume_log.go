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
	meta, err := jm.Metadata()
	if err != nil {
		return nil, base.With().Str("subject", jm.Subject()).Logger(), errors.New("no metadata: " + err.Error())
	}
	ev, err := FromMsg(jm.Headers(), jm.Data())
	if err != nil {
		return nil, base.With().Str("subject", jm.Subject()).Uint64("stream_seq", meta.Sequence.Stream).Uint64("delivery", meta.NumDelivered).Logger(), err
	}
	// One child logger per message (each With copies the context).
	log := base.With().Str("subject", jm.Subject()).Uint64("stream_seq", meta.Sequence.Stream).Uint64("delivery", meta.NumDelivered).
		Str("event_id", ev.ID()).Str("event_type", ev.Type()).Logger()
	return &Message{Event: ev, Subject: jm.Subject(), Delivery: meta.NumDelivered, Metadata: meta, msg: jm}, log, nil
}
