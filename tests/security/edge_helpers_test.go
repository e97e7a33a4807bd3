package security

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/services/daemon"
)

// Tokens of the edge tests' gateway.
const (
	edgeAdmin  = "edge-admin-0123456789"
	edgeRead   = "edge-read-0123456789"
	edgeIngest = "edge-ingest-0123456789"
)

// edgeGateway is a real gateway (daemon.Run, a real listener on
// 127.0.0.1) on a real embedded nats-server of its own.
type edgeGateway struct {
	t   *testing.T
	url string
	js  jetstream.JetStream
}

// startEdgeGateway runs the gateway with a token per scope; mods change
// its options.
func startEdgeGateway(t *testing.T, mods ...func(*gateway.Options)) *edgeGateway {
	t.Helper()
	ns := natstest.Start(t)
	nc, js := ns.Connect(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := gateway.Options{
		Listener: ln, RateLimit: -1, Heartbeat: time.Second,
		Cache: store.CacheOptions{ResyncEvery: store.NoResync},
		Tokens: []gateway.Token{
			{Name: "admin", Secret: edgeAdmin, Scopes: []api.Scope{api.ScopeAdmin}},
			{Name: "reader", Secret: edgeRead, Scopes: []api.Scope{api.ScopeRead}},
			{Name: "ingester", Secret: edgeIngest, Scopes: []api.Scope{api.ScopeIngest}},
		},
	}
	for _, m := range mods {
		m(&opts)
	}
	svc := gateway.New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	go func() {
		done <- daemon.Run(ctx, daemon.Config{Name: gateway.Name, HTTPAddr: daemon.HTTPOff, ShutdownTimeout: 5 * time.Second},
			svc, daemon.WithConn(nc), daemon.WithoutHTTP(), daemon.WithLogger(log))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("gateway did not stop")
		}
	})
	natstest.WaitFor(t, 10*time.Second, "gateway listening", func() bool {
		if svc.URL() == "" {
			return false
		}
		resp, err := http.Get(svc.URL() + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return &edgeGateway{t: t, url: svc.URL(), js: js}
}

// edgeResp is a finished response.
type edgeResp struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request with header name, value pairs ("Host" sets the Host).
func (g *edgeGateway) do(method, path, token, body string, hdr ...string) edgeResp {
	g.t.Helper()
	r := testkit.Do(g.t, method, g.url+path, token, body, hdr...)
	return edgeResp{status: r.Status, header: r.Header, body: r.Body}
}

// problem decodes the body as a problem, failing unless status is want.
func (r edgeResp) problem(t *testing.T, want int) api.Problem {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d, want %d: %s", r.status, want, r.body)
	}
	var p api.Problem
	if err := json.Unmarshal(r.body, &p); err != nil || p.Status != want {
		t.Fatalf("not a %d problem: %s", want, r.body)
	}
	return p
}

// streamMsgs is how many messages stream holds.
func (g *edgeGateway) streamMsgs(name string) uint64 {
	g.t.Helper()
	s, err := g.js.Stream(context.Background(), name)
	if err != nil {
		g.t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		g.t.Fatal(err)
	}
	return info.State.Msgs
}
