package events

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Content types of event data.
const (
	ContentTypeProtobuf = "application/protobuf"
	ContentTypeJSON     = "application/json"
	// DataSchemaPrefix precedes a protobuf message's full name in the
	// dataschema attribute: urn:capn:proto:capn.v1alpha1.BootstrapReady.
	DataSchemaPrefix = "urn:capn:proto:"
	headerPrefix     = "ce-"
	// contentTypeHeader carries the structured-mode media type.
	contentTypeHeader = "Content-Type"
	// contentTypeHeaderLower is contentTypeHeader as newNATSMessage
	// compares header names (a constant: lowering it per header of every
	// message received made 7 of its decoding's 32 allocations).
	contentTypeHeaderLower = "content-type"
)

// ErrMalformed wraps every decoding failure: a message that is not a valid
// CloudEvent, or whose data does not match its declared schema. Consumers
// terminate such messages instead of retrying them.
var ErrMalformed = errors.New("malformed event")

var specs = spec.WithPrefix(headerPrefix)

// New builds a CloudEvent (spec 1.0) carrying msg as protobuf data, with
// dataschema naming the message. id should be deterministic for the fact or
// command it describes, so that a repeated publish is dropped by JetStream.
func New(source, typ, id string, msg proto.Message) (event.Event, error) {
	e := event.New(event.CloudEventsVersionV1)
	e.SetID(id)
	e.SetSource(source)
	e.SetType(typ)
	e.SetTime(time.Now().UTC())
	if msg != nil {
		data, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
		if err != nil {
			return e, fmt.Errorf("encode %s: %w", msg.ProtoReflect().Descriptor().FullName(), err)
		}
		e.SetDataSchema(DataSchemaPrefix + string(msg.ProtoReflect().Descriptor().FullName()))
		if err := e.SetData(ContentTypeProtobuf, data); err != nil {
			return e, err
		}
	}
	if err := e.Validate(); err != nil {
		return e, fmt.Errorf("invalid event: %w", err)
	}
	return e, nil
}

// DataAs decodes the event's data into msg. Protobuf data must name msg's
// type in dataschema; JSON data (from external systems) is read as protojson.
// Every failure wraps ErrMalformed.
func DataAs(e *event.Event, msg proto.Message) error {
	want := string(msg.ProtoReflect().Descriptor().FullName())
	if ds := e.DataSchema(); ds != "" && ds != DataSchemaPrefix+want {
		return fmt.Errorf("%w: dataschema %q, want %q", ErrMalformed, ds, DataSchemaPrefix+want)
	}
	ct := e.DataContentType()
	switch ct {
	case "", ContentTypeProtobuf: // what capn publishes: nothing to parse
		ct = ContentTypeProtobuf
	default:
		parsed, _, err := mime.ParseMediaType(ct)
		if err != nil {
			return fmt.Errorf("%w: datacontenttype %q: %v", ErrMalformed, ct, err)
		}
		ct = parsed
	}
	switch ct {
	case ContentTypeProtobuf, "application/x-protobuf":
		if err := proto.Unmarshal(e.Data(), msg); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrMalformed, want, err)
		}
	case ContentTypeJSON, "text/json":
		if err := protojson.Unmarshal(e.Data(), msg); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrMalformed, want, err)
		}
	default:
		return fmt.Errorf("%w: datacontenttype %q not supported for %s (use %s or %s)", ErrMalformed, ct, want, ContentTypeProtobuf, ContentTypeJSON)
	}
	return nil
}

// ToMsg encodes e in binary content mode per the CloudEvents NATS binding:
// every attribute as a percent-encoded ce- header, the data as the body.
func ToMsg(subject string, e *event.Event) (*nats.Msg, error) {
	m := &nats.Msg{Subject: subject, Header: nats.Header{}}
	w := &headerWriter{msg: m}
	if _, err := binding.Write(binding.WithForceBinary(context.Background()), (*binding.EventMessage)(e), nil, w); err != nil {
		return nil, fmt.Errorf("encode event %s: %w", e.ID(), err)
	}
	return m, nil
}

// FromMsg decodes a CloudEvent from a NATS message in binary mode (ce-
// headers, matched case-insensitively) or structured mode (a JSON event with
// Content-Type application/cloudevents+json). Failures wrap ErrMalformed.
func FromMsg(h nats.Header, data []byte) (*event.Event, error) {
	m := newNATSMessage(h, data)
	if m.ReadEncoding() == binding.EncodingUnknown {
		return nil, fmt.Errorf("%w: neither binary (%sspecversion header) nor structured (%s %s) mode", ErrMalformed, headerPrefix, contentTypeHeader, event.ApplicationCloudEventsJSON)
	}
	e, err := binding.ToEvent(context.Background(), m)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return e, nil
}

// natsMessage adapts NATS headers and data to sdk-go's binding.Message.
type natsMessage struct {
	attrs   map[string]string // lower-cased header name → decoded value
	data    []byte
	version spec.Version
	format  format.Format
	bad     error
}

func newNATSMessage(h nats.Header, data []byte) *natsMessage {
	m := &natsMessage{attrs: map[string]string{}, data: data}
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		lk := strings.ToLower(k)
		if lk == contentTypeHeaderLower {
			if f := format.Lookup(vs[0]); f != nil {
				m.format = f
			}
			continue
		}
		if !strings.HasPrefix(lk, headerPrefix) {
			continue
		}
		v, err := percentDecode(vs[0])
		if err != nil && m.bad == nil {
			m.bad = fmt.Errorf("header %s: %w", k, err)
		}
		m.attrs[lk] = v
	}
	if m.format == nil {
		m.version = specs.Version(m.attrs[specs.PrefixedSpecVersionName()])
	}
	return m
}

func (m *natsMessage) ReadEncoding() binding.Encoding {
	switch {
	case m.version != nil:
		return binding.EncodingBinary
	case m.format != nil:
		return binding.EncodingStructured
	}
	return binding.EncodingUnknown
}

func (m *natsMessage) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	if m.format == nil {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, m.format, bytes.NewReader(m.data))
}

func (m *natsMessage) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	if m.version == nil {
		return binding.ErrNotBinary
	}
	if m.bad != nil {
		return m.bad
	}
	for k, v := range m.attrs {
		var err error
		if attr := m.version.Attribute(k); attr != nil {
			err = w.SetAttribute(attr, v)
		} else {
			err = w.SetExtension(strings.TrimPrefix(k, headerPrefix), v)
		}
		if err != nil {
			return err
		}
	}
	if len(m.data) > 0 {
		return w.SetData(bytes.NewReader(m.data))
	}
	return nil
}

func (m *natsMessage) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	if m.version == nil {
		return nil, nil
	}
	attr := m.version.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	if v, ok := m.attrs[attr.PrefixedName()]; ok {
		return attr, v
	}
	return attr, nil
}

func (m *natsMessage) GetExtension(name string) any {
	if v, ok := m.attrs[headerPrefix+strings.ToLower(name)]; ok {
		return v
	}
	return nil
}

func (m *natsMessage) Finish(error) error { return nil }

// headerWriter writes a binary-mode event into a NATS message.
type headerWriter struct{ msg *nats.Msg }

func (w *headerWriter) Start(context.Context) error { return nil }
func (w *headerWriter) End(context.Context) error   { return nil }

func (w *headerWriter) SetAttribute(attr spec.Attribute, value any) error {
	if value == nil {
		w.msg.Header.Del(headerPrefix + attr.Name())
		return nil
	}
	s, err := types.Format(value)
	if err != nil {
		return err
	}
	w.msg.Header.Set(headerPrefix+attr.Name(), percentEncode(s))
	return nil
}

func (w *headerWriter) SetExtension(name string, value any) error {
	if value == nil {
		w.msg.Header.Del(headerPrefix + name)
		return nil
	}
	s, err := types.Format(value)
	if err != nil {
		return err
	}
	w.msg.Header.Set(headerPrefix+strings.ToLower(name), percentEncode(s))
	return nil
}

func (w *headerWriter) SetData(r io.Reader) error {
	b, err := io.ReadAll(r)
	w.msg.Data = b
	return err
}

// percentEncode encodes, as the CloudEvents HTTP and NATS bindings require,
// space, double quote, percent and every byte outside printable ASCII.
func percentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= 0x20 || c >= 0x7f || c == '"' || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// percentDecode reverses percentEncode; a malformed escape is an error.
func percentDecode(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) || unhex(s[i+1]) < 0 || unhex(s[i+2]) < 0 {
			return "", fmt.Errorf("bad percent-encoding at byte %d of %q", i, s)
		}
		b.WriteByte(byte(unhex(s[i+1])<<4 | unhex(s[i+2])))
		i += 2
	}
	return b.String(), nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}
