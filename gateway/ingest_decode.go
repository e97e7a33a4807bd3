package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
)

// maxTypeLength bounds the type attribute: it becomes the ingest subject.
const maxTypeLength = 256

// healthTypes are the event types capn acts on, the message their data
// must decode into, and their kind token on the health subject.
var healthTypes = map[string]struct {
	kind   string
	newMsg func() proto.Message
}{
	events.TypeNodeHeartbeat:  {keys.HealthHeartbeat, func() proto.Message { return new(capnv1.NodeHeartbeat) }},
	events.TypeNodeConditions: {keys.HealthConditions, func() proto.Message { return new(capnv1.NodeConditions) }},
	events.TypeProblemEvent:   {keys.HealthProblem, func() proto.Message { return new(capnv1.ProblemEvent) }},
}

// ingestItem is one accepted event and where it goes.
type ingestItem struct {
	e *event.Event
	// subject on the ingest stream: capn.ingest.<sanitized type>.
	subject string
	// health is the capn.health.<cluster>.<machine>.<kind> subject of a
	// capn health event, else "".
	health string
	// cluster is the cluster a capn health event is about, else "".
	cluster string
	// msgID is the JetStream de-duplication id: CloudEvents identify an
	// event by source and id.
	msgID string
}

// decodeIngest reads a POST /v1/events request per the CloudEvents HTTP
// binding — binary mode (ce- headers, the body as data), structured mode
// (application/cloudevents+json) or batch mode
// (application/cloudevents-batch+json) — and validates every event:
// spec version 1.0, the required attributes, the size limit, and for capn's
// health types data that decodes into their message and names a cluster
// and machine. It is all or nothing: any invalid event refuses the request
// (400, or 413 for an oversized one) with every problem listed by path
// ("id", or "[2].source" in a batch). It is pure (FuzzIngest runs it).
func decodeIngest(h http.Header, body []byte, maxEvent int64) ([]ingestItem, error) {
	for k := range h {
		// sdk-go reads the attribute name after "ce-" without checking
		// there is one, and panics on a bare "Ce-" header.
		if strings.EqualFold(k, "ce-") {
			return nil, invalidEvent("the request is not a valid CloudEvent").
				withField("header "+k, `a CloudEvents attribute header names its attribute after "ce-" (as in ce-id)`, h.Get(k))
		}
	}
	msg := cehttp.NewMessage(h, io.NopCloser(bytes.NewReader(body)))
	ctx := context.Background()
	var evs []event.Event
	batch := false
	switch msg.ReadEncoding() {
	case binding.EncodingBinary, binding.EncodingStructured:
		e, err := binding.ToEvent(ctx, msg)
		if err != nil {
			return nil, decodeProblem(err)
		}
		evs = []event.Event{*e}
	case binding.EncodingBatch:
		var err error
		if evs, err = binding.ToEvents(ctx, msg, msg.BodyReader); err != nil {
			return nil, decodeProblem(err)
		}
		if len(evs) == 0 {
			return nil, invalidEvent("the batch holds no event")
		}
		batch = true
	default:
		return nil, notCloudEvent(h)
	}

	items := make([]ingestItem, 0, len(evs))
	inv := invalidEvent("")
	big := tooLarge(maxEvent)
	for i := range evs {
		e := &evs[i]
		prefix := ""
		if batch {
			prefix = "[" + strconv.Itoa(i) + "]."
		}
		if n := eventSize(e); n > maxEvent {
			path := "(event)"
			if batch {
				path = strings.TrimSuffix(prefix, ".")
			}
			big.withField(path, fmt.Sprintf("the event is %d bytes; at most %d are accepted", n, maxEvent), nil)
			continue
		}
		it, violations := checkEvent(e, prefix)
		inv.Errors = append(inv.Errors, violations...)
		items = append(items, it)
	}
	switch {
	case len(big.Errors) > 0:
		big.Detail = fmt.Sprintf("events are limited to %d bytes each", maxEvent)
		return nil, big
	case len(inv.Errors) > 0:
		inv.Detail = "the event is invalid; it was not stored"
		if batch {
			inv.Detail = fmt.Sprintf("%d of %d events are invalid; none was stored", countEvents(inv.Errors, batch), len(evs))
		}
		return nil, inv
	}
	return items, nil
}

// checkEvent validates one event and works out where it goes.
func checkEvent(e *event.Event, prefix string) (ingestItem, []api.FieldViolation) {
	var vs []api.FieldViolation
	bad := func(path, reason, value string) {
		vs = append(vs, api.FieldViolation{Path: prefix + path, Reason: reason, Value: value})
	}
	if sv := e.SpecVersion(); sv != event.CloudEventsVersionV1 {
		bad("specversion", "must be 1.0: capn accepts CloudEvents 1.0 only", sv)
	}
	if err := e.Validate(); err != nil {
		var ve event.ValidationError
		if errors.As(err, &ve) {
			for _, k := range slices.Sorted(maps.Keys(ve)) {
				bad(k, ve[k].Error(), "")
			}
		} else {
			bad("(event)", err.Error(), "")
		}
	}
	if len(e.Type()) > maxTypeLength {
		bad("type", fmt.Sprintf("at most %d characters", maxTypeLength), "")
	}
	it := ingestItem{e: e, subject: ingestSubject(e.Type()), msgID: dedupeID(e.Source(), e.ID())}
	if ht, ok := healthTypes[e.Type()]; ok && len(vs) == 0 {
		if e.DataContentType() == "" && !e.DataBase64 && json.Valid(e.Data()) {
			// JSON data without a datacontenttype is JSON, as the
			// CloudEvents JSON format implies.
			e.SetDataContentType(event.ApplicationJSON)
		}
		m := ht.newMsg()
		if err := events.DataAs(e, m); err != nil {
			reason := strings.TrimPrefix(err.Error(), events.ErrMalformed.Error()+": ")
			if !strings.Contains(reason, "datacontenttype") {
				reason += fmt.Sprintf(" (send %s data as protojson with datacontenttype %s, or as protobuf)", m.ProtoReflect().Descriptor().FullName(), events.ContentTypeJSON)
			}
			bad("data", reason, "")
			return it, vs
		}
		node := m.(interface {
			GetCluster() string
			GetMachine() string
		})
		for _, f := range []struct{ name, v string }{{"cluster", node.GetCluster()}, {"machine", node.GetMachine()}} {
			switch {
			case f.v == "":
				bad("data."+f.name, "required: health events name the cluster and machine they are about", "")
			case !manifest.IsDNSLabel(f.v):
				bad("data."+f.name, "must be a DNS-1123 label (a capn "+f.name+" name)", f.v)
			}
		}
		if len(vs) == 0 {
			it.health = events.HealthSubject(node.GetCluster(), node.GetMachine(), ht.kind)
			it.cluster = node.GetCluster()
		}
	}
	return it, vs
}

// countEvents counts the distinct events the violations are about.
func countEvents(vs []api.FieldViolation, batch bool) int {
	if !batch {
		return 1
	}
	seen := map[string]bool{}
	for _, v := range vs {
		i, _, _ := strings.Cut(v.Path, "]")
		seen[i] = true
	}
	return len(seen)
}

// attributes are the CloudEvents 1.0 context attributes, which sdk-go's
// decoding errors start with.
var attributes = []string{"specversion", "id", "source", "type", "subject", "time", "datacontenttype", "dataschema"}

// decodeProblem reports an event (or batch) that did not parse, with the
// attribute at fault when the error names one.
func decodeProblem(err error) *problemError {
	msg := strings.TrimSpace(err.Error())
	p := invalidEvent("the request is not a valid CloudEvent: %s", msg)
	var ve event.ValidationError
	if errors.As(err, &ve) {
		p.Detail = "the request is not a valid CloudEvent"
		for _, k := range slices.Sorted(maps.Keys(ve)) {
			p.withField(k, ve[k].Error(), nil)
		}
		return p
	}
	for _, a := range attributes {
		if rest, ok := strings.CutPrefix(msg, a); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, ":")) {
			p.withField(a, strings.TrimLeft(rest, ": "), nil)
			break
		}
		if _, v, ok := strings.Cut(msg, "invalid value for "+a+": "); ok {
			p.withField(a, "invalid value", v)
			break
		}
	}
	return p
}

// notCloudEvent explains why a request is in no CloudEvents mode.
func notCloudEvent(h http.Header) *problemError {
	ct := h.Get("Content-Type")
	if sv := h.Get("Ce-Specversion"); sv != "" {
		return invalidEvent("unsupported CloudEvents version").
			withField("specversion", "must be 1.0: capn accepts CloudEvents 1.0 only", sv)
	}
	if format.IsFormat(strings.ToLower(ct)) {
		return problem(http.StatusUnsupportedMediaType, api.ProblemUnsupportedMedia, "Unsupported media type",
			"structured mode takes %s and %s, not %q", api.MediaCloudEvent, api.MediaCloudBatch, ct)
	}
	return invalidEvent("not a CloudEvent: send binary mode (ce-specversion, ce-id, ce-source and ce-type headers, the data as the body), "+
		"structured mode (Content-Type %s) or batch mode (Content-Type %s)", api.MediaCloudEvent, api.MediaCloudBatch).
		withField("specversion", "required (the ce-specversion header in binary mode)", nil)
}

func invalidEvent(format string, args ...any) *problemError {
	return problem(http.StatusBadRequest, api.ProblemInvalidEvent, "Invalid CloudEvent", format, args...)
}

// eventSize is the size of an event: its data and the text of its
// attributes and extensions.
func eventSize(e *event.Event) int64 {
	n := len(e.Data()) + len(e.ID()) + len(e.Source()) + len(e.Type()) + len(e.Subject()) +
		len(e.DataContentType()) + len(e.DataSchema()) + len(e.SpecVersion()) + 32 // time
	for k, v := range e.Extensions() {
		n += len(k) + len(fmt.Sprint(v))
	}
	return int64(n)
}

// ingestSubject is capn.ingest.<type>, each dot-separated token of the type
// kept but for characters NATS subjects cannot carry safely (wildcards,
// white space), which become '_'; an empty token becomes '_'.
func ingestSubject(typ string) string {
	toks := strings.Split(typ, ".")
	for i, t := range toks {
		if t == "" {
			toks[i] = "_"
			continue
		}
		toks[i] = strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
				return r
			}
			return '_'
		}, t)
	}
	return SubjectIngest + "." + strings.Join(toks, ".")
}

// dedupeID is the Nats-Msg-Id of an event: a digest of its source and id,
// which together identify an event in CloudEvents.
func dedupeID(source, id string) string {
	sum := sha256.Sum256([]byte(source + "\x00" + id))
	return hex.EncodeToString(sum[:])
}
