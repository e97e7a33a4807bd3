package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/gateway/api"
)

// watchReadyTimeout bounds how long a watch waits for the hub's initial
// sync before it answers 503.
const watchReadyTimeout = 10 * time.Second

// watch is GET /v1/watch[?cluster=NAME][&kind=Cluster|Machine]: a
// Server-Sent Events stream of changes to clusters and machines.
//
// Without Last-Event-ID it sends the current state as ADDED events, then
// SYNCED, then every change as ADDED, MODIFIED or DELETED with the merged
// object (spec and status; for DELETED its last state). Every event's id is
// a cursor "<desired revision>-<observed revision>"; a client that
// reconnects with Last-Event-ID gets only what it missed, then SYNCED — or,
// when that cursor is too old for the gateway's ring of recent events (or
// came from before the gateway started), RESET followed by the current
// state. BOOKMARK events advance the id while a filter lets nothing
// through; a comment every 15s keeps the connection alive. A client too
// slow to keep up has its stream closed and resumes. Streams are capped
// per token and in total (streams.go): over a cap, 429 with Retry-After.
func (s *server) watch(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := watchFilter{cluster: q.Get("cluster"), kind: q.Get("kind")}
	if f.cluster != "" {
		if err := checkName("cluster", f.cluster); err != nil {
			return err
		}
	}
	if f.kind != "" && f.kind != api.KindCluster && f.kind != api.KindMachine {
		return badRequest("kind is not valid").withField("kind", "must be Cluster or Machine", f.kind)
	}
	release, err := s.openStream(r)
	if err != nil {
		return err
	}
	defer release()
	ctx := r.Context()
	t := time.NewTimer(watchReadyTimeout)
	defer t.Stop()
	select {
	case <-s.hub.ready:
	case <-t.C:
		return unavailable("the watch is still loading the current state; retry")
	case <-ctx.Done():
		return nil
	}
	s.awaitDesired(ctx, t.C)
	initial, reset, at, sub := s.hub.subscribe(r.Header.Get("Last-Event-ID"), f)
	defer s.hub.unsubscribe(sub)
	defer s.metrics.stream("watch")()

	sse, err := startSSE(w)
	if err != nil {
		return nil
	}
	if reset {
		if err := sse.send("", api.WatchReset, []byte(`{"type":"RESET"}`)); err != nil {
			return nil
		}
	}
	for _, ev := range initial {
		if err := sse.send(ev.at.String(), ev.typ, ev.data); err != nil {
			return nil
		}
	}
	if err := sse.send(at.String(), api.WatchSynced, []byte(`{"type":"SYNCED"}`)); err != nil {
		return nil
	}
	tick := time.NewTicker(s.heartbeat)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-sub.ch:
			if !ok {
				return nil
			}
			if err := sse.send(ev.at.String(), ev.typ, ev.data); err != nil {
				return nil
			}
		case <-tick.C:
			if err := sse.comment("heartbeat"); err != nil {
				return nil
			}
		case <-ctx.Done():
			return nil
		case <-s.stopping:
			return nil
		}
	}
}

// awaitDesired waits, until timeout fires, for the hub to have applied
// every desired write made before the watch opened, so that a client
// that applies and then watches sees its object among the initial ADDED
// events (as a Kubernetes watch from a consistent list does). If the
// revision cannot be read, or the wait runs out, the stream starts from
// what the hub has: a later write still arrives as its own event.
func (s *server) awaitDesired(ctx context.Context, timeout <-chan time.Time) {
	st, err := s.desiredKV.Status(ctx)
	if err != nil {
		return
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return
	}
	last := bs.StreamInfo().State.LastSeq
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for s.hub.desiredRevision() < last {
		select {
		case <-tick.C:
		case <-timeout:
			return
		case <-ctx.Done():
			return
		}
	}
}
