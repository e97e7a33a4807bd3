package daemon

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capn-dev/capn/events/natstest"
)

func TestOpsHandler(t *testing.T) {
	s := natstest.Start(t)
	connected, _ := s.Connect(t)
	closed, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	ready := NewReadiness()
	ready.Set(true)
	starting := NewReadiness()
	warming := NewReadiness()
	warming.SetNotReady("warming the cache")

	tests := []struct {
		name          string
		checks        []Check
		healthz       int
		readyz        int
		readyzReasons []string
	}{
		{name: "nothing registered", healthz: 200, readyz: 503, readyzReasons: []string{"no service registered"}},
		{name: "connected and ready", checks: []Check{{Service: "a", Conn: connected, Ready: ready}}, healthz: 200, readyz: 200},
		{name: "connected, no readiness of its own", checks: []Check{{Service: "a", Conn: connected}}, healthz: 200, readyz: 200},
		{name: "still connecting", checks: []Check{{Service: "a", Ready: ready}}, healthz: 200, readyz: 503,
			readyzReasons: []string{"NATS is CONNECTING"}},
		{name: "connection closed", checks: []Check{{Service: "a", Conn: closed, Ready: ready}}, healthz: 503, readyz: 503,
			readyzReasons: []string{"NATS is CLOSED"}},
		{name: "one of two not ready", checks: []Check{
			{Service: "a", Conn: connected, Ready: ready},
			{Service: "b", Conn: connected, Ready: warming},
			{Service: "c", Conn: connected, Ready: starting},
		}, healthz: 200, readyz: 503, readyzReasons: []string{"warming the cache", "starting"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewOpsHandler(prometheus.NewRegistry(), tt.checks...)
			if code, _ := serve(h, "/healthz"); code != tt.healthz {
				t.Errorf("/healthz = %d, want %d", code, tt.healthz)
			}
			code, body := serve(h, "/readyz")
			if code != tt.readyz {
				t.Errorf("/readyz = %d, want %d: %s", code, tt.readyz, body)
			}
			var b HealthBody
			if err := json.Unmarshal([]byte(body), &b); err != nil {
				t.Fatalf("/readyz body %q: %v", body, err)
			}
			if len(b.Services) != len(tt.checks) {
				t.Errorf("/readyz lists %d services, want %d", len(b.Services), len(tt.checks))
			}
			for _, r := range tt.readyzReasons {
				if !strings.Contains(body, r) {
					t.Errorf("/readyz body lacks %q: %s", r, body)
				}
			}
		})
	}
}

func TestOpsHandlerSetReplacesAndRemoves(t *testing.T) {
	h := NewOpsHandler(prometheus.NewRegistry())
	first := h.Set(Check{Service: "a", Ready: NewReadiness()})
	second := h.Set(Check{Service: "a", Ready: NewReadiness()})
	first() // replaced since: must not remove the second
	if _, body := serve(h, "/readyz"); !strings.Contains(body, `"service":"a"`) {
		t.Fatalf("the stale remove took the new check out: %s", body)
	}
	second()
	if _, body := serve(h, "/readyz"); strings.Contains(body, `"service":"a"`) {
		t.Fatalf("remove left the check: %s", body)
	}
}

func serve(h http.Handler, path string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}
