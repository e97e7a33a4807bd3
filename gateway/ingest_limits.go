package gateway

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/gateway/api"
)

// maxStoredHeader is the largest header JetStream stores with a message:
// its store keeps the header length in 16 bits and refuses a longer one
// (JSStreamHeaderExceedsMaximumError), after the gateway's own limits
// have passed — so the gateway checks it first.
const maxStoredHeader = 1<<16 - 1

// outMsg is one message a request will publish: an event's copy on the
// ingest stream or on the health stream.
type outMsg struct {
	item   int // index of the event in the request
	stream string
	msg    *nats.Msg
}

// publishLimits are the limits the NATS server applies to one published
// message, known before anything is stored.
type publishLimits struct {
	// maxPayload is the server's max_payload: header and data together.
	maxPayload int64
	// maxMsgSize is a stream's max_msg_size where it sets one (the
	// topology declares; the server checks header and data together).
	maxMsgSize map[string]int64
}

// publishLimitsOf reads the connection's max_payload (it can change with
// the server the connection is on) and the streams' limits of the
// declared topology (streamMsgSizes).
func publishLimitsOf(nc *nats.Conn) publishLimits {
	l := publishLimits{maxPayload: 1 << 20, maxMsgSize: streamMsgSizes()} // nats-server's default
	if nc != nil && nc.MaxPayload() > 0 {
		l.maxPayload = nc.MaxPayload()
	}
	return l
}

// streamMsgSizes are the max_msg_size of the declared streams that set
// one, worked out once: the topology does not change while the gateway
// runs.
var streamMsgSizes = sync.OnceValue(func() map[string]int64 {
	m := map[string]int64{}
	for _, t := range []events.Topology{events.DefaultTopology(1), Topology(1)} {
		for _, sc := range t.Streams {
			if sc.MaxMsgSize > 0 {
				m[sc.Name] = int64(sc.MaxMsgSize)
			}
		}
	}
	return m
})

// messages encodes every item's messages (its ingest copy, and its health
// copy) with their JetStream headers and checks each against the limits
// the server will apply, so that a request is refused whole, before
// anything is stored, rather than half stored. A violation is a 413
// naming every event at fault by index and id.
func (s *server) messages(items []ingestItem, batch bool) ([]outMsg, error) {
	lim := publishLimitsOf(s.nc)
	out := make([]outMsg, 0, len(items))
	big := tooLarge(0)
	for i, it := range items {
		copies := []struct{ subject, stream string }{{it.subject, StreamIngest}}
		if it.health != "" {
			copies = append(copies, struct{ subject, stream string }{it.health, events.StreamHealth})
		}
		for _, c := range copies {
			m, err := events.ToMsg(c.subject, it.e)
			if err != nil {
				return nil, err
			}
			m.Header.Set(jetstream.MsgIDHeader, it.msgID)
			m.Header.Set(jetstream.ExpectedStreamHeader, c.stream)
			if why := lim.check(c.stream, m); why != "" {
				big.withField(eventPath(i, batch), why, it.e.ID())
				break
			}
			out = append(out, outMsg{item: i, stream: c.stream, msg: m})
		}
	}
	if len(big.Errors) > 0 {
		big.Title = "Event too large to store"
		big.Detail = fmt.Sprintf("%d of %d events exceed what JetStream stores; none was stored", len(big.Errors), len(items))
		return nil, big
	}
	return out, nil
}

// check returns why m cannot be stored on stream, or "".
func (l publishLimits) check(stream string, m *nats.Msg) string {
	hdr := headerSize(m.Header)
	total := int64(hdr + len(m.Data))
	switch {
	case hdr > maxStoredHeader:
		return fmt.Sprintf("its attributes and extensions take %d bytes as NATS headers; JetStream stores at most %d (move large values into data)", hdr, maxStoredHeader)
	case total > l.maxPayload:
		return fmt.Sprintf("it takes %d bytes as a NATS message; the server's max_payload is %d", total, l.maxPayload)
	case l.maxMsgSize[stream] > 0 && total > l.maxMsgSize[stream]:
		return fmt.Sprintf("it takes %d bytes as a NATS message; stream %s stores at most %d", total, stream, l.maxMsgSize[stream])
	}
	return ""
}

// headerSize is the length of h as NATS sends it: "NATS/1.0\r\n", a
// "Key: value\r\n" line per value, and a blank line.
func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n") + 2
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// eventPath names event i in a problem: "[i]" in a batch, "(event)" alone.
func eventPath(i int, batch bool) string {
	if !batch {
		return "(event)"
	}
	return "[" + strconv.Itoa(i) + "]"
}

// publishError is a publish of event item that failed after the checks.
type publishError struct {
	item int
	id   string
	err  error
}

func (e *publishError) Error() string { return fmt.Sprintf("event %d (%s): %v", e.item, e.id, e.err) }
func (e *publishError) Unwrap() error { return e.err }

// storeProblem answers a failed store: 503 for what a retry can fix (NATS
// or JetStream unreachable or slow), 422 naming the event JetStream
// refused for a reason of its own (a limit it applies that the checks do
// not know), 500 otherwise.
func storeProblem(err error, batch bool) *problemError {
	if isTransient(err) {
		return unavailable("JetStream did not store the events (%v); retry the request: events already stored are de-duplicated by source and id", err)
	}
	var pe *publishError
	var ae *jetstream.APIError
	if errors.As(err, &pe) && errors.As(err, &ae) {
		return problem(http.StatusUnprocessableEntity, api.ProblemInvalidEvent, "Event refused by JetStream",
			"JetStream refused an event (%s); a retry will not help", ae.Description).
			withField(eventPath(pe.item, batch), ae.Error(), pe.id)
	}
	return nil
}

// isBatch tells whether a request is in CloudEvents batch mode.
func isBatch(h http.Header) bool {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return strings.EqualFold(mt, api.MediaCloudBatch)
}
