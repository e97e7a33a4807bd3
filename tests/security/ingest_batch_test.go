package security

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/gateway/api"
)

// TestBatchIngestIsAllOrNothing (finding 6): an event whose 100 KB
// extension passes the gateway's 256 KiB event limit but not JetStream's
// 64 KiB header limit used to fail alone, after the events around it were
// stored, with a 503 that asked for a retry no retry could fix. Now the
// batch is refused whole, 413 naming the event by index and id, and
// nothing is stored.
func TestBatchIngestIsAllOrNothing(t *testing.T) {
	g := startEdgeGateway(t)
	ev := func(id string, ext int) map[string]any {
		e := map[string]any{"specversion": "1.0", "id": id, "source": "attacker", "type": "com.example.probe", "data": map[string]int{"n": 1}}
		if ext > 0 {
			e["padding"] = strings.Repeat("x", ext)
		}
		return e
	}
	batch := func(evs ...map[string]any) string {
		b, err := json.Marshal(evs)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	r := g.do(http.MethodPost, "/v1/events", edgeIngest, batch(ev("ok-1", 0), ev("big", 100<<10), ev("ok-2", 0)), "Content-Type", api.MediaCloudBatch)
	p := r.problem(t, http.StatusRequestEntityTooLarge)
	if len(p.Errors) != 1 || p.Errors[0].Path != "[1]" || p.Errors[0].Value != "big" || !strings.Contains(p.Errors[0].Reason, "header") {
		t.Errorf("the problem does not name event [1] (big) and the header limit: %s", r.body)
	}
	if n := g.streamMsgs(gateway.StreamIngest); n != 0 {
		t.Errorf("a refused batch stored %d events on %s, want none", n, gateway.StreamIngest)
	}

	// One event alone: the same limit, "(event)".
	one, _ := json.Marshal(ev("big", 100<<10))
	g.do(http.MethodPost, "/v1/events", edgeIngest, string(one), "Content-Type", api.MediaCloudEvent).problem(t, http.StatusRequestEntityTooLarge)

	// The same batch without the big event is stored whole.
	r = g.do(http.MethodPost, "/v1/events", edgeIngest, batch(ev("ok-1", 0), ev("ok-2", 0)), "Content-Type", api.MediaCloudBatch)
	if r.status != http.StatusAccepted {
		t.Fatalf("valid batch: %d %s", r.status, r.body)
	}
	if n := g.streamMsgs(gateway.StreamIngest); n != 2 {
		t.Errorf("%s holds %d events, want 2", gateway.StreamIngest, n)
	}
}
