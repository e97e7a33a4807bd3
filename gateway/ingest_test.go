package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// ingestEnv is a gateway with small ingest limits.
func ingestEnv(t *testing.T) *env {
	return newEnv(t, func(o *Options) {
		o.Limits.IngestEventBytes = 2 << 10
		o.Limits.IngestRequestBytes = 16 << 10
	})
}

// streamState is how many messages a stream holds and its last sequence.
func (e *env) streamState(name string) (uint64, uint64) {
	e.t.Helper()
	s, err := e.js.Stream(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Msgs, info.State.LastSeq
}

// lastEvent reads the last event stored on subject of stream.
func (e *env) lastEvent(stream, subject string) (*cloudevents.Event, *jetstream.RawStreamMsg) {
	e.t.Helper()
	s, err := e.js.Stream(context.Background(), stream)
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(context.Background(), subject)
	if err != nil {
		e.t.Fatalf("%s on %s: %v", subject, stream, err)
	}
	ev, err := events.FromMsg(m.Header, m.Data)
	if err != nil {
		e.t.Fatalf("stored message on %s is not a CloudEvent: %v", subject, err)
	}
	return ev, m
}

func sdkClient(t *testing.T, e *env, token string) cloudevents.Client {
	t.Helper()
	c, err := cloudevents.NewClientHTTP(cehttp.WithTarget(e.url+"/v1/events"), cehttp.WithHeader("Authorization", "Bearer "+token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newEvent(t *testing.T, typ, source, id string, data any) cloudevents.Event {
	t.Helper()
	ev := cloudevents.NewEvent()
	ev.SetType(typ)
	ev.SetSource(source)
	ev.SetID(id)
	ev.SetTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if data != nil {
		if err := ev.SetData(cloudevents.ApplicationJSON, data); err != nil {
			t.Fatal(err)
		}
	}
	return ev
}

func sdkStatus(t *testing.T, res error) int {
	t.Helper()
	var hr *cehttp.Result
	if !cloudevents.ResultAs(res, &hr) {
		t.Fatalf("result %v is not an HTTP result", res)
	}
	return hr.StatusCode
}

// TestIngestSDK sends events with sdk-go's HTTP client, binary and
// structured, and reads back what JetStream stored.
func TestIngestSDK(t *testing.T) {
	e := ingestEnv(t)
	c := sdkClient(t, e, tokIngest)
	ctx := context.Background()

	ci := newEvent(t, "com.example.ci.build-finished", "https://ci.example.com/jobs", "build-1", map[string]any{"ok": true})
	if res := c.Send(ctx, ci); !cloudevents.IsACK(res) || sdkStatus(t, res) != http.StatusAccepted {
		t.Fatalf("binary: %v", res)
	}
	got, raw := e.lastEvent(StreamIngest, "capn.ingest.com.example.ci.build-finished")
	if got.ID() != "build-1" || got.Source() != "https://ci.example.com/jobs" || string(got.Data()) != `{"ok":true}` {
		t.Errorf("stored %v", got)
	}
	if raw.Header.Get(jetstream.MsgIDHeader) != dedupeID("https://ci.example.com/jobs", "build-1") {
		t.Errorf("Nats-Msg-Id %q", raw.Header.Get(jetstream.MsgIDHeader))
	}

	hb := newEvent(t, events.TypeNodeHeartbeat, "npd/demo-cp-0", "hb-1",
		map[string]any{"cluster": "demo", "machine": "demo-cp-0", "nodeName": "cp-0", "ready": true, "kubeletVersion": "v1.34.2"})
	if res := c.Send(cloudevents.WithEncodingStructured(ctx), hb); !cloudevents.IsACK(res) {
		t.Fatalf("structured: %v", res)
	}
	got, _ = e.lastEvent(StreamIngest, "capn.ingest.dev.capn.health.heartbeat")
	if got.ID() != "hb-1" {
		t.Errorf("ingest copy %v", got)
	}
	// Routed to the health stream, where the health-watcher reads it.
	routed, _ := e.lastEvent(events.StreamHealth, events.HealthSubject("demo", "demo-cp-0", "heartbeat"))
	var beat capnv1.NodeHeartbeat
	if err := events.DataAs(routed, &beat); err != nil || beat.GetNodeName() != "cp-0" || !beat.GetReady() || routed.ID() != "hb-1" {
		t.Errorf("routed heartbeat %v: %v (%v)", routed, &beat, err)
	}

	// The same source and id again: acknowledged, stored once.
	msgs, _ := e.streamState(StreamIngest)
	if res := c.Send(ctx, ci); !cloudevents.IsACK(res) {
		t.Fatalf("repeat: %v", res)
	}
	if again, _ := e.streamState(StreamIngest); again != msgs {
		t.Errorf("a duplicate was stored: %d -> %d messages", msgs, again)
	}

	// Invalid capn data is refused with the reason.
	bad := newEvent(t, events.TypeNodeHeartbeat, "npd/x", "hb-2", map[string]any{"cluster": "demo", "machine": "m", "ready": "yes"})
	if res := c.Send(ctx, bad); cloudevents.IsACK(res) || sdkStatus(t, res) != http.StatusBadRequest {
		t.Errorf("bad heartbeat: %v", res)
	}
	// A token without the ingest scope.
	if res := sdkClient(t, e, tokRead).Send(ctx, ci); sdkStatus(t, res) != http.StatusForbidden {
		t.Errorf("reader: %v", res)
	}
}

// TestIngestRaw sends what curl would: binary, structured and batch
// requests, valid and not.
func TestIngestRaw(t *testing.T) {
	e := ingestEnv(t)
	binary := func(hdr ...string) []string {
		base := []string{"Ce-Specversion", "1.0", "Ce-Id", "x-1", "Ce-Source", "curl", "Ce-Type", "com.example.test", "Content-Type", "application/json"}
		for i := 0; i+1 < len(hdr); i += 2 {
			replaced := false
			for j := 0; j+1 < len(base); j += 2 {
				if base[j] == hdr[i] {
					base[j+1], replaced = hdr[i+1], true
				}
			}
			if !replaced {
				base = append(base, hdr[i], hdr[i+1])
			}
		}
		return base
	}
	heartbeat := func(id, data string) string {
		return `{"specversion":"1.0","id":"` + id + `","source":"npd","type":"dev.capn.health.heartbeat","datacontenttype":"application/json","data":` + data + `}`
	}
	big := `{"blob":"` + strings.Repeat("x", 3<<10) + `"}`
	tests := []struct {
		name     string
		token    string
		headers  []string
		body     string
		status   int
		paths    []string
		stored   []string // subjects that must hold the event after
		accepted int
	}{
		{name: "binary", headers: binary(), body: `{"a":1}`, status: 202, accepted: 1, stored: []string{"capn.ingest.com.example.test"}},
		{name: "binary with percent-encoded attributes", headers: binary("Ce-Id", "x-%C3%A9", "Ce-Subject", "a%20b"), body: `{}`, status: 202, accepted: 1},
		{name: "structured", headers: []string{"Content-Type", api.MediaCloudEvent},
			body:   `{"specversion":"1.0","id":"s-1","source":"curl","type":"com.example.structured","data":{"b":2}}`,
			status: 202, accepted: 1, stored: []string{"capn.ingest.com.example.structured"}},
		{name: "structured type with wildcards", headers: []string{"Content-Type", api.MediaCloudEvent},
			body:   `{"specversion":"1.0","id":"s-2","source":"curl","type":"weird.*.>..type"}`,
			status: 202, accepted: 1, stored: []string{"capn.ingest.weird._._._.type"}},
		{name: "batch", headers: []string{"Content-Type", api.MediaCloudBatch},
			body: `[` + heartbeat("b-1", `{"cluster":"demo","machine":"m-1","ready":true}`) + `,
				{"specversion":"1.0","id":"b-2","source":"npd","type":"dev.capn.health.problem","datacontenttype":"application/json","data":{"cluster":"demo","machine":"m-1","reason":"OOMKilling","severity":"warn"}},
				{"specversion":"1.0","id":"b-3","source":"npd","type":"dev.capn.health.conditions","datacontenttype":"application/json","data":{"cluster":"demo","machine":"m-1","conditions":[{"type":"KernelDeadlock","status":"False"}]}}]`,
			status: 202, accepted: 3,
			stored: []string{"capn.health.demo.m-1.heartbeat", "capn.health.demo.m-1.problem", "capn.health.demo.m-1.conditions"}},
		{name: "heartbeat without datacontenttype", headers: []string{"Content-Type", api.MediaCloudEvent},
			body:   `{"specversion":"1.0","id":"n-1","source":"npd","type":"dev.capn.health.heartbeat","data":{"cluster":"demo","machine":"m-9"}}`,
			status: 202, accepted: 1, stored: []string{"capn.health.demo.m-9.heartbeat"}},
		{name: "binary without id", headers: binary("Ce-Id", ""), body: `{}`, status: 400, paths: []string{"id"}},
		{name: "binary spec 0.3", headers: binary("Ce-Specversion", "0.3"), body: `{}`, status: 400, paths: []string{"specversion"}},
		{name: "binary unknown spec", headers: binary("Ce-Specversion", "2.0"), body: `{}`, status: 400, paths: []string{"specversion"}},
		{name: "binary bad time", headers: binary("Ce-Time", "yesterday"), body: `{}`, status: 400, paths: []string{"time"}},
		{name: "not a CloudEvent", headers: []string{"Content-Type", "application/json"}, body: `{"hello":"world"}`, status: 400, paths: []string{"specversion"}},
		{name: "unknown structured format", headers: []string{"Content-Type", "application/cloudevents+xml"}, body: `<e/>`, status: 415},
		{name: "structured without source", headers: []string{"Content-Type", api.MediaCloudEvent},
			body: `{"specversion":"1.0","id":"s-3","type":"com.example.x"}`, status: 400, paths: []string{"source"}},
		{name: "structured malformed", headers: []string{"Content-Type", api.MediaCloudEvent}, body: `{"specversion":"1.0",`, status: 400},
		{name: "heartbeat with an unknown field", headers: []string{"Content-Type", api.MediaCloudEvent},
			body: heartbeat("h-1", `{"cluster":"demo","machine":"m-1","bogus":1}`), status: 400, paths: []string{"data"}},
		{name: "heartbeat with a bad cluster name", headers: []string{"Content-Type", api.MediaCloudEvent},
			body: heartbeat("h-2", `{"cluster":"demo.*","machine":"m-1"}`), status: 400, paths: []string{"data.cluster"}},
		{name: "heartbeat without a machine", headers: []string{"Content-Type", api.MediaCloudEvent},
			body: heartbeat("h-3", `{"cluster":"demo"}`), status: 400, paths: []string{"data.machine"}},
		{name: "heartbeat as text", headers: binary("Ce-Type", events.TypeNodeHeartbeat, "Content-Type", "text/plain"), body: `alive`, status: 400, paths: []string{"data"}},
		{name: "batch with one invalid event", headers: []string{"Content-Type", api.MediaCloudBatch},
			body:   `[` + heartbeat("v-1", `{"cluster":"demo","machine":"m-2"}`) + `,{"specversion":"1.0","id":"","source":"x","type":"t"}]`,
			status: 400, paths: []string{"[1].id"}},
		{name: "empty batch", headers: []string{"Content-Type", api.MediaCloudBatch}, body: `[]`, status: 400},
		{name: "malformed batch", headers: []string{"Content-Type", api.MediaCloudBatch}, body: `[{`, status: 400},
		{name: "oversized event", headers: binary(), body: big, status: 413, paths: []string{"(event)"}},
		{name: "oversized event in a batch", headers: []string{"Content-Type", api.MediaCloudBatch},
			body: `[{"specversion":"1.0","id":"o-1","source":"x","type":"t"},{"specversion":"1.0","id":"o-2","source":"x","type":"t","data":` + big + `}]`, status: 413, paths: []string{"[1]"}},
		{name: "oversized request", headers: binary(), body: `"` + strings.Repeat("y", 17<<10) + `"`, status: 413},
		{name: "no token", token: "-", headers: binary(), body: `{}`, status: 401},
		{name: "bad token", token: "wrong", headers: binary(), body: `{}`, status: 401},
		{name: "write token", token: tokWrite, headers: binary(), body: `{}`, status: 403},
		{name: "GET", headers: binary(), status: 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			token := tt.token
			switch token {
			case "":
				token = tokIngest
			case "-":
				token = ""
			}
			method := http.MethodPost
			if tt.status == http.StatusMethodNotAllowed {
				method = http.MethodGet
			}
			_, ingestBefore := e.streamState(StreamIngest)
			_, healthBefore := e.streamState(events.StreamHealth)
			var body any
			if tt.body != "" {
				body = tt.body
			}
			r := e.do(method, "/v1/events", token, body, tt.headers...)
			_, ingestAfter := e.streamState(StreamIngest)
			_, healthAfter := e.streamState(events.StreamHealth)
			if tt.status != http.StatusAccepted {
				r.wantProblem(t, tt.status, tt.paths...)
				if ingestAfter != ingestBefore || healthAfter != healthBefore {
					t.Errorf("a refused request stored events: ingest %d -> %d, health %d -> %d", ingestBefore, ingestAfter, healthBefore, healthAfter)
				}
				return
			}
			if r.status != http.StatusAccepted {
				t.Fatalf("%d %s", r.status, r.body)
			}
			var res api.IngestResult
			if err := json.Unmarshal(r.body, &res); err != nil {
				t.Fatal(err)
			}
			if res.Accepted != tt.accepted || len(res.Events) != tt.accepted || res.Events[0].Stream != StreamIngest || res.Events[0].Sequence == 0 {
				t.Errorf("result %s", r.body)
			}
			for _, subj := range tt.stored {
				stream := StreamIngest
				if strings.HasPrefix(subj, events.SubjectHealth) {
					stream = events.StreamHealth
				}
				e.lastEvent(stream, subj)
			}
		})
	}
}

// TestIngestUnavailable: with the ingest stream gone, JetStream cannot
// store the event: 503 with Retry-After, not a silent drop.
func TestIngestUnavailable(t *testing.T) {
	e := ingestEnv(t)
	if err := e.js.DeleteStream(context.Background(), StreamIngest); err != nil {
		t.Fatal(err)
	}
	r := e.do(http.MethodPost, "/v1/events", tokIngest, `{}`,
		"Ce-Specversion", "1.0", "Ce-Id", "u-1", "Ce-Source", "curl", "Ce-Type", "com.example.test", "Content-Type", "application/json")
	p := r.wantProblem(t, http.StatusServiceUnavailable)
	if r.header.Get("Retry-After") == "" || p.Type != api.ProblemUnavailable {
		t.Errorf("503 without Retry-After: %v %s", r.header, r.body)
	}
}

// TestIngestNATSDown: with the NATS server down the gateway answers 503
// with Retry-After (and /healthz says so); once it is back, the retried
// request is accepted and the event is stored once.
func TestIngestNATSDown(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the publish timeout")
	}
	e := ingestEnv(t)
	send := func() resp {
		return e.do(http.MethodPost, "/v1/events", tokIngest, `{"n":1}`,
			"Ce-Specversion", "1.0", "Ce-Id", "down-1", "Ce-Source", "curl", "Ce-Type", "com.example.down", "Content-Type", "application/json")
	}
	e.ns.Stop()
	r := send()
	r.wantProblem(t, http.StatusServiceUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	e.do(http.MethodGet, "/healthz", "", nil).wantProblem(t, http.StatusServiceUnavailable)

	e.ns.Restart()
	if err := testkit.Poll(15*time.Second, 100*time.Millisecond, func() error {
		if r := send(); r.status != http.StatusAccepted {
			return fmt.Errorf("%d %s", r.status, r.body)
		}
		return nil
	}); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	if msgs, _ := e.streamState(StreamIngest); msgs != 1 {
		t.Errorf("%d copies stored, want 1 (the retry is de-duplicated)", msgs)
	}
}
