package events

import (
	"errors"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func TestPercentEncoding(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"with space", "with%20space"},
		{`quote"`, "quote%22"},
		{"100%", "100%25"},
		{"Grüße", "Gr%C3%BC%C3%9Fe"},
		{"tab\tnl\n", "tab%09nl%0A"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := percentEncode(tt.in)
			if got != tt.want {
				t.Fatalf("encode(%q) = %q, want %q", tt.in, got, tt.want)
			}
			back, err := percentDecode(got)
			if err != nil || back != tt.in {
				t.Fatalf("decode(%q) = %q, %v; want %q", got, back, err, tt.in)
			}
		})
	}
	for _, bad := range []string{"%", "%4", "%zz", "a%g0"} {
		if _, err := percentDecode(bad); err == nil {
			t.Errorf("decode(%q): want error", bad)
		}
	}
}

func TestBinaryRoundTrip(t *testing.T) {
	data := &capnv1.BootstrapReady{Cluster: "c1", Machine: "m 1", Format: "cloud-config"}
	e, err := New("capn/test", "dev.capn.bootstrap.ready", "id-1", data)
	if err != nil {
		t.Fatal(err)
	}
	e.SetSubject("machine m 1 — ü")
	e.SetExtension("traceparent", "00-abc-def-01")
	m, err := ToMsg("capn.evt.x", &e)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get("ce-subject"); got != "machine%20m%201%20%E2%80%94%20%C3%BC" {
		t.Fatalf("ce-subject header = %q: not percent-encoded", got)
	}
	if got := m.Header.Get("ce-dataschema"); got != DataSchemaPrefix+"capn.v1alpha1.BootstrapReady" {
		t.Fatalf("ce-dataschema = %q", got)
	}
	back, err := FromMsg(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if back.ID() != "id-1" || back.Subject() != "machine m 1 — ü" || back.Source() != "capn/test" {
		t.Fatalf("round trip lost attributes: %+v", back.Context)
	}
	if back.Extensions()["traceparent"] != "00-abc-def-01" {
		t.Fatalf("extension lost: %v", back.Extensions())
	}
	var got capnv1.BootstrapReady
	if err := DataAs(back, &got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&got, data) {
		t.Fatalf("data = %v, want %v", &got, data)
	}
}

func TestHeadersCaseInsensitive(t *testing.T) {
	h := nats.Header{}
	h["CE-SpecVersion"] = []string{"1.0"}
	h["Ce-Id"] = []string{"abc"}
	h["CE-SOURCE"] = []string{"ext%2Fsys"}
	h["ce-Type"] = []string{"com.example.thing"}
	e, err := FromMsg(h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.ID() != "abc" || e.Source() != "ext/sys" || e.Type() != "com.example.thing" {
		t.Fatalf("got %+v", e.Context)
	}
}

func TestStructuredModeOnRead(t *testing.T) {
	body := `{"specversion":"1.0","id":"s-1","source":"npd/node-1","type":"dev.capn.health.conditions",
	  "datacontenttype":"application/json","data":{"cluster":"c1","machine":"m1","conditions":[{"type":"KernelDeadlock","status":"True"}]}}`
	h := nats.Header{}
	h.Set("content-type", event.ApplicationCloudEventsJSON)
	e, err := FromMsg(h, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	var nc capnv1.NodeConditions
	if err := DataAs(e, &nc); err != nil {
		t.Fatal(err)
	}
	if nc.GetConditions()[0].GetType() != "KernelDeadlock" {
		t.Fatalf("got %v", &nc)
	}
}

func TestMalformed(t *testing.T) {
	good, _ := New("s", "t", "i", &capnv1.BootstrapReady{Cluster: "c"})
	tests := []struct {
		name string
		h    nats.Header
		data []byte
		into proto.Message
		want string
	}{
		{"no ce headers", nats.Header{"X": {"y"}}, []byte("hi"), nil, "neither binary"},
		{"missing id", nats.Header{"ce-specversion": {"1.0"}, "ce-source": {"s"}, "ce-type": {"t"}}, nil, nil, "id"},
		{"bad escape", nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"%zz"}, "ce-source": {"s"}, "ce-type": {"t"}}, nil, nil, "percent"},
		{"bad structured json", nats.Header{"Content-Type": {event.ApplicationCloudEventsJSON}}, []byte("{"), nil, ""},
		{"wrong schema", msgHeader(t, good), good.Data(), &capnv1.MachineEvent{}, "dataschema"},
		{"garbage protobuf", msgHeader(t, good), []byte{0xff, 0xff, 0xff}, &capnv1.BootstrapReady{}, "BootstrapReady"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := FromMsg(tt.h, tt.data)
			if err == nil && tt.into != nil {
				err = DataAs(e, tt.into)
			}
			if err == nil {
				t.Fatal("want error")
			}
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v; want ErrMalformed mentioning %q", err, tt.want)
			}
		})
	}
}

func msgHeader(t *testing.T, e event.Event) nats.Header {
	t.Helper()
	m, err := ToMsg("x", &e)
	if err != nil {
		t.Fatal(err)
	}
	return m.Header
}
