package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/schemas/keys"
)

// Ingest stream: every event accepted on POST /v1/events, whatever its type.
const (
	StreamIngest  = "CAPN_INGEST"
	SubjectIngest = keys.IngestRoot
)

// publishTimeout bounds storing one request's events in JetStream.
const publishTimeout = 5 * time.Second

// Topology is what the gateway declares in JetStream on top of capn's
// default topology: the CAPN_INGEST stream (subjects capn.ingest.>, limits
// retention for 7 days or 1 GiB, the usual duplicate window).
func Topology(replicas int) events.Topology {
	return events.Topology{Streams: []jetstream.StreamConfig{{
		Name: StreamIngest, Subjects: []string{SubjectIngest + ".>"},
		Description: "CloudEvents received by the gateway from external systems",
		Retention:   jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Replicas: max(replicas, 1),
		MaxAge: 7 * 24 * time.Hour, MaxBytes: 1 << 30, Duplicates: events.DuplicateWindow,
		Discard: jetstream.DiscardOld,
	}}}
}

// ingest is POST /v1/events (scope ingest). Every event of the request is
// validated first (all or nothing: one invalid event refuses the request,
// nothing is stored) and authorized (a health event about a cluster outside
// the token's clusters is a 403; every event is stamped with the token's
// name, authorizeIngest), then stored on CAPN_INGEST under
// capn.ingest.<type>, capn's health events also on
// capn.health.<cluster>.<machine>.<kind> (CAPN_HEALTH) for the
// health-watcher, both in binary mode with Nats-Msg-Id a digest of
// (source, id) so a repeat within the duplicate window is stored once.
// Before anything is stored every copy is checked against the limits the
// NATS server applies (ingest_limits.go): a request with an event JetStream
// would refuse is a 413 naming it, with nothing stored. 202 once JetStream
// acknowledged every copy; 503 with Retry-After when it does not answer in
// time — retry the whole request: what was stored is de-duplicated; 422
// when it refuses an event for a reason no retry changes.
func (s *server) ingest(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	items, err := decodeIngest(r.Header, body, s.limits.IngestEventBytes)
	if err != nil {
		s.metrics.ingest("invalid", 1)
		return err
	}
	if err := s.authorizeIngest(r.Context(), principalFrom(r.Context()), items); err != nil {
		s.metrics.ingest("forbidden", len(items))
		return err
	}
	// After the stamp: the limits are checked on what will be published.
	batch := isBatch(r.Header)
	msgs, err := s.messages(items, batch)
	if err != nil {
		s.metrics.ingest("invalid", 1)
		return err
	}
	res, err := s.store(r.Context(), items, msgs)
	if err != nil {
		s.metrics.ingest("failed", len(items))
		zerolog.Ctx(r.Context()).Warn().Err(err).Int("events", len(items)).Msg("ingest: JetStream did not store the events")
		if p := storeProblem(err, batch); p != nil {
			return p
		}
		return err
	}
	s.metrics.ingest("stored", res.Accepted-res.Duplicates)
	s.metrics.ingest("duplicate", res.Duplicates)
	writeJSON(w, http.StatusAccepted, res)
	return nil
}

// store publishes every message (messages checked them) asynchronously
// and waits for every acknowledgement.
func (s *server) store(ctx context.Context, items []ingestItem, msgs []outMsg) (*api.IngestResult, error) {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		var err error
		if futures[i], err = s.js.PublishMsgAsync(m.msg); err != nil {
			return nil, &publishError{item: m.item, id: items[m.item].e.ID(), err: err}
		}
	}
	res := &api.IngestResult{Events: make([]api.IngestedEvent, len(items))}
	for i, m := range msgs {
		it := items[m.item]
		ack, err := waitAck(ctx, futures[i])
		if err != nil {
			return nil, &publishError{item: m.item, id: it.e.ID(), err: err}
		}
		if m.stream != StreamIngest {
			continue
		}
		res.Events[m.item] = api.IngestedEvent{
			ID: it.e.ID(), Source: it.e.Source(), Type: it.e.Type(),
			Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate, RoutedTo: it.health,
		}
		res.Accepted++
		if ack.Duplicate {
			res.Duplicates++
		}
	}
	return res, nil
}

func waitAck(ctx context.Context, f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	select {
	case ack := <-f.Ok():
		return ack, nil
	case err := <-f.Err():
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
