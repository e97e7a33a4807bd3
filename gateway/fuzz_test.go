package gateway

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/schemas/manifest"
)

// FuzzApply feeds arbitrary bytes to the manifest decoding of apply: it
// must never panic, must refuse with a 400 problem naming fields or saying
// why, and a cluster that passes validation (what apply would store) must
// re-encode to the same cluster. Seeds: testdata/fuzz/FuzzApply.
func FuzzApply(f *testing.F) {
	f.Add([]byte(demoYAML))
	f.Add([]byte(`{"apiVersion":"capn.dev/v1alpha1","kind":"Cluster","metadata":{"name":"j"},"spec":{"kubernetesVersion":"v1.34.2"}}`))
	f.Add([]byte("kind: [\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := decodeApply(body)
		if err != nil {
			var p *problemError
			if !errors.As(err, &p) || p.Status != http.StatusBadRequest || (p.Detail == "" && len(p.Errors) == 0) {
				t.Fatalf("refusal is not a 400 problem with a reason: %#v", err)
			}
			for _, fe := range p.Errors {
				if fe.Path == "" || fe.Reason == "" {
					t.Fatalf("field error without path or reason: %+v", fe)
				}
			}
			return
		}
		manifest.Default(c)
		if manifest.Validate(c) != nil {
			return // refused with 422 by apply; nothing is stored
		}
		out, err := manifest.Encode(c)
		if err != nil {
			t.Fatalf("encode what was decoded: %v", err)
		}
		again, err := manifest.Decode(out)
		if err != nil {
			t.Fatalf("decode what was encoded: %v\n%s", err, out)
		}
		if !proto.Equal(c, again) {
			t.Fatalf("round trip changed the cluster:\n%v\n%v", c, again)
		}
	})
}

// FuzzIngest feeds arbitrary requests to the CloudEvents decoding of
// ingest (a Content-Type, ce- headers as "Name: value" lines, a body): it
// must never panic; a refusal is a 4xx problem; what it accepts is valid
// CloudEvents 1.0 whose subjects NATS can carry safely. Seeds:
// testdata/fuzz/FuzzIngest.
func FuzzIngest(f *testing.F) {
	f.Add("application/cloudevents+json", "", []byte(`{"specversion":"1.0","id":"1","source":"s","type":"a.b","data":{"x":1}}`))
	f.Add("application/json", "Ce-Specversion: 1.0\nCe-Id: 2\nCe-Source: s\nCe-Type: dev.capn.health.heartbeat", []byte(`{"cluster":"c","machine":"m"}`))
	f.Add("application/cloudevents-batch+json", "", []byte(`[{"specversion":"1.0","id":"3","source":"s","type":"t"}]`))
	f.Fuzz(func(t *testing.T, contentType, headers string, body []byte) {
		h := http.Header{}
		if contentType != "" {
			h.Set("Content-Type", contentType)
		}
		for line := range strings.SplitSeq(headers, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && k != "" {
				h.Add(k, strings.TrimSpace(v))
			}
		}
		items, err := decodeIngest(h, body, 4<<10)
		if err != nil {
			var p *problemError
			if !errors.As(err, &p) || p.Status < 400 || p.Status >= 500 {
				t.Fatalf("refusal is not a 4xx problem: %#v", err)
			}
			return
		}
		if len(items) == 0 {
			t.Fatal("accepted nothing without an error")
		}
		for _, it := range items {
			if err := it.e.Validate(); err != nil || it.e.SpecVersion() != "1.0" {
				t.Fatalf("accepted an invalid event %v: %v", it.e, err)
			}
			for _, subj := range []string{it.subject, it.health} {
				if subj == "" {
					continue
				}
				for tok := range strings.SplitSeq(subj, ".") {
					if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
						t.Fatalf("unsafe subject %q", subj)
					}
				}
			}
			if !strings.HasPrefix(it.subject, SubjectIngest+".") || (it.health != "" && !strings.HasPrefix(it.health, events.SubjectHealth+".")) {
				t.Fatalf("subjects %q %q", it.subject, it.health)
			}
		}
	})
}
