package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/schemas/keys"
)

// Limits of a timeline read.
const (
	defaultTimelineLimit = 1000
	maxTimelineLimit     = 10000
	// backlogTimeout bounds reading what is stored (a 503 after it).
	backlogTimeout = 30 * time.Second
	// timelinePullBatch bounds the messages a read buffers ahead of
	// what it has sent (the client's default is 500).
	timelinePullBatch = 64
)

// timeline is GET /v1/clusters/{name}/events: the cluster's facts from the
// CAPN_EVENTS stream (subjects capn.evt.*.*.<name>.*), oldest first, read
// with an ordered consumer. ?since=SEQ starts after a stream sequence;
// ?limit=N keeps the latest N (default 1000, at most 10000; truncated says
// older ones were left out). ?follow=true streams them as Server-Sent Events
// instead (TIMELINE events with the sequence as id, then SYNCED, then live
// ones as they are stored, a heartbeat comment every 15s); Last-Event-ID
// resumes after that sequence.
func (s *server) timeline(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	since, err := uintParam(q.Get("since"), "since", 0)
	if err != nil {
		return err
	}
	limit, err := uintParam(q.Get("limit"), "limit", defaultTimelineLimit)
	if err != nil {
		return err
	}
	if limit < 1 || limit > maxTimelineLimit {
		return badRequest("limit is out of range").withField("limit", "must be 1.."+strconv.Itoa(maxTimelineLimit), limit)
	}
	follow := false
	if f := q.Get("follow"); f != "" {
		if follow, err = strconv.ParseBool(f); err != nil {
			return badRequest("follow is not a boolean").withField("follow", "must be true or false", f)
		}
	}
	if id := r.Header.Get("Last-Event-ID"); follow && id != "" {
		if since, err = uintParam(id, "Last-Event-ID", 0); err != nil {
			return err
		}
	}

	ctx := r.Context()
	if follow {
		release, err := s.openStream(r)
		if err != nil {
			return err
		}
		defer release()
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{events.EventSubject("*", "*", name, "*")},
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: time.Minute,
	}
	if since > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, since+1
	}
	cons, err := s.js.OrderedConsumer(ctx, events.StreamEvents, cfg)
	if err != nil {
		return err
	}
	// A bounded pull batch: what one stream buffers from JetStream.
	it, err := cons.Messages(jetstream.PullMaxMessages(timelinePullBatch))
	if err != nil {
		return err
	}
	defer it.Stop()

	// The backlog: everything stored when the consumer was made.
	backlog := newTailRing(int(limit))
	if info := cons.CachedInfo(); info != nil && info.NumPending > 0 {
		bctx, cancel := context.WithTimeout(ctx, backlogTimeout)
		defer cancel()
		for {
			msg, err := it.Next(jetstream.NextContext(bctx))
			if err != nil {
				return err
			}
			if te, ok := s.timelineEvent(ctx, msg); ok {
				backlog.add(te)
			}
			if md, err := msg.Metadata(); err != nil || md.NumPending == 0 {
				break
			}
		}
	}
	if !follow {
		writeJSON(w, http.StatusOK, api.TimelineList{Items: backlog.items(), Truncated: backlog.dropped > 0})
		return nil
	}
	return s.followTimeline(ctx, w, it, backlog.items(), since)
}

// followTimeline streams the backlog, SYNCED, then live events until the
// client leaves or the server stops.
func (s *server) followTimeline(ctx context.Context, w http.ResponseWriter, it jetstream.MessagesContext, backlog []api.TimelineEvent, since uint64) error {
	defer s.metrics.stream("timeline")()
	sse, err := startSSE(w)
	if err != nil {
		return nil
	}
	last := since
	for _, te := range backlog {
		if err := s.sendTimeline(sse, te); err != nil {
			return nil
		}
		last = te.Sequence
	}
	if err := sse.send(strconv.FormatUint(last, 10), api.TimelineSynced, []byte(`{"type":"SYNCED"}`)); err != nil {
		return nil
	}
	msgs := make(chan jetstream.Msg)
	go func() {
		defer close(msgs)
		for {
			msg, err := it.Next(jetstream.NextContext(ctx))
			if err != nil {
				return
			}
			select {
			case msgs <- msg:
			case <-ctx.Done():
				return
			}
		}
	}()
	tick := time.NewTicker(s.heartbeat)
	defer tick.Stop()
	for {
		select {
		case msg, ok := <-msgs:
			if !ok {
				return nil
			}
			if te, ok := s.timelineEvent(ctx, msg); ok {
				if err := s.sendTimeline(sse, te); err != nil {
					return nil
				}
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

func (s *server) sendTimeline(sse *sseStream, te api.TimelineEvent) error {
	b, err := json.Marshal(te)
	if err != nil {
		return err
	}
	return sse.send(strconv.FormatUint(te.Sequence, 10), api.TimelineEventName, b)
}

// timelineEvent decodes one stored fact. Its data is decoded with the
// protobuf message its dataschema names and shown as protojson; phase,
// reason and message are lifted out of it when it has such fields, and a
// fact without a reason gets its subject's entity and what as one
// (bootstrap.ready: BootstrapReady).
// Undecodable messages are skipped (logged).
func (s *server) timelineEvent(ctx context.Context, msg jetstream.Msg) (api.TimelineEvent, bool) {
	var te api.TimelineEvent
	md, err := msg.Metadata()
	if err != nil {
		return te, false
	}
	e, err := events.FromMsg(msg.Headers(), msg.Data())
	if err != nil {
		zerolog.Ctx(ctx).Debug().Err(err).Uint64("sequence", md.Sequence.Stream).Msg("timeline: undecodable event skipped")
		return te, false
	}
	te = api.TimelineEvent{
		Sequence: md.Sequence.Stream, Time: e.Time(), ID: e.ID(), Source: e.Source(), Type: e.Type(),
		DataSchema: e.DataSchema(),
	}
	if te.Time.IsZero() {
		te.Time = md.Timestamp
	}
	// capn.evt.<entity>.<what>.<cluster>.<object>
	if s, err := keys.ParseSubject(msg.Subject()); err == nil && s.Root == keys.EventsRoot {
		te.Entity, te.What, te.Cluster, te.Object = s.Entity, s.Verb, s.Cluster, s.Object
	}
	name := protoreflect.FullName(strings.TrimPrefix(e.DataSchema(), events.DataSchemaPrefix))
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(name); err == nil && len(e.Data()) > 0 {
		m := mt.New().Interface()
		if err := events.DataAs(e, m); err == nil {
			if b, err := protojson.Marshal(m); err == nil {
				te.Data = b
			}
			pm := m.ProtoReflect()
			te.Phase, te.Reason, te.Message = stringField(pm, "phase"), stringField(pm, "reason"), stringField(pm, "message")
		}
	} else if json.Valid(e.Data()) && len(e.Data()) > 0 {
		te.Data = e.Data()
	}
	if te.Reason == "" && te.Entity != "" {
		// A fact without a reason of its own (bootstrap.ready) is named by
		// its subject, in the CamelCase of every other reason.
		te.Reason = camel(te.Entity) + camel(te.What)
	}
	return te, true
}

// camel is "secrets-deleted" as "SecretsDeleted".
func camel(s string) string {
	var b strings.Builder
	for part := range strings.SplitSeq(s, "-") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

// stringField is a singular string field of m by name, or "".
func stringField(m protoreflect.Message, name string) string {
	fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.Cardinality() == protoreflect.Repeated {
		return ""
	}
	return m.Get(fd).String()
}

// uintParam parses a non-negative integer parameter; "" is def.
func uintParam(v, name string, def uint64) (uint64, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, badRequest("%s is not a number", name).withField(name, "must be a non-negative integer", v)
	}
	return n, nil
}

// tailRing keeps the last limit items added.
type tailRing struct {
	limit   int
	buf     []api.TimelineEvent
	next    int // the oldest item's index once the ring is full
	dropped int
}

func newTailRing(limit int) *tailRing { return &tailRing{limit: max(limit, 1)} }

func (t *tailRing) add(e api.TimelineEvent) {
	if len(t.buf) < t.limit {
		t.buf = append(t.buf, e)
		return
	}
	t.dropped++
	t.buf[t.next] = e
	t.next = (t.next + 1) % t.limit
}

// items returns the kept items, oldest first.
func (t *tailRing) items() []api.TimelineEvent {
	if t.next == 0 {
		return t.buf
	}
	return append(append([]api.TimelineEvent{}, t.buf[t.next:]...), t.buf[:t.next]...)
}
