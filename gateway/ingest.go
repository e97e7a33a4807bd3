package gateway

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/gateway/api"
)

// Ingest stream: every event accepted on POST /v1/events, whatever its type.
const (
	StreamIngest  = "CAPN_INGEST"
	SubjectIngest = "capn.ingest"
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
// 202 once JetStream acknowledged every copy; 503 with Retry-After when it
// does not answer in time — retry the whole request: what was stored is
// de-duplicated.
func (s *server) ingest(w http.ResponseWriter, r *http.Request) error {
	body, err := io.ReadAll(r.Body)
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
	res, err := s.store(r.Context(), items)
	if err != nil {
		s.metrics.ingest("failed", len(items))
		zerolog.Ctx(r.Context()).Warn().Err(err).Int("events", len(items)).Msg("ingest: JetStream did not store the events")
		return unavailable("JetStream did not store the events (%v); retry the request: events already stored are de-duplicated by source and id", err)
	}
	s.metrics.ingest("stored", res.Accepted-res.Duplicates)
	s.metrics.ingest("duplicate", res.Duplicates)
	writeJSON(w, http.StatusAccepted, res)
	return nil
}

// store publishes every item (and its health copy) asynchronously and
// waits for every acknowledgement.
func (s *server) store(ctx context.Context, items []ingestItem) (*api.IngestResult, error) {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	type sent struct {
		ingest, health jetstream.PubAckFuture
	}
	futures := make([]sent, len(items))
	for i, it := range items {
		m, err := events.ToMsg(it.subject, it.e)
		if err != nil {
			return nil, err
		}
		if futures[i].ingest, err = s.js.PublishMsgAsync(m, jetstream.WithMsgID(it.msgID), jetstream.WithExpectStream(StreamIngest)); err != nil {
			return nil, err
		}
		if it.health == "" {
			continue
		}
		hm, err := events.ToMsg(it.health, it.e)
		if err != nil {
			return nil, err
		}
		if futures[i].health, err = s.js.PublishMsgAsync(hm, jetstream.WithMsgID(it.msgID), jetstream.WithExpectStream(events.StreamHealth)); err != nil {
			return nil, err
		}
	}
	res := &api.IngestResult{Events: make([]api.IngestedEvent, len(items))}
	for i, it := range items {
		ack, err := waitAck(ctx, futures[i].ingest)
		if err != nil {
			return nil, err
		}
		if futures[i].health != nil {
			if _, err := waitAck(ctx, futures[i].health); err != nil {
				return nil, err
			}
		}
		res.Events[i] = api.IngestedEvent{
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
