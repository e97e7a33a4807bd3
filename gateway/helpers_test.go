package gateway

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/daemon"
)

// Test tokens, one per scope, and admin.
const (
	tokAdmin   = "t-admin-0123456789"
	tokRead    = "t-read-0123456789"
	tokWrite   = "t-write-0123456789"
	tokIngest  = "t-ingest-0123456789"
	tokSecrets = "t-secrets-0123456789"
)

func testTokens() []Token {
	return []Token{
		{Name: "admin", Secret: tokAdmin, Scopes: []api.Scope{api.ScopeAdmin}},
		{Name: "reader", Secret: tokRead, Scopes: []api.Scope{api.ScopeRead}},
		{Name: "writer", Secret: HashToken(tokWrite), Scopes: []api.Scope{api.ScopeRead, api.ScopeWrite}},
		{Name: "ingester", Secret: tokIngest, Scopes: []api.Scope{api.ScopeIngest}},
		{Name: "secrets", Secret: tokSecrets, Scopes: []api.Scope{api.ScopeRead, api.ScopeSecrets}},
	}
}

// env is a gateway running through daemon.Run on a real listener, against
// an embedded nats-server of its own.
type env struct {
	t    *testing.T
	ns   *natstest.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	url  string
	ring *seal.Keyring

	desired, observed, secrets jetstream.KeyValue
	clusters                   *store.Bucket[*capnv1.Cluster]
}

func newEnv(t *testing.T, mods ...func(*Options)) *env {
	t.Helper()
	ns := natstest.Start(t)
	nc, js := ns.Connect(t)
	key, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Listener: ln, Tokens: testTokens(), Keyring: ring, RateLimit: -1, AuthFailureRate: -1,
		Heartbeat: time.Second, Cache: store.CacheOptions{ResyncEvery: store.NoResync},
	}
	for _, m := range mods {
		m(&opts)
	}
	svc := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	go func() {
		done <- daemon.Run(ctx, daemon.Config{Name: Name, HTTPAddr: daemon.HTTPOff, ShutdownTimeout: 5 * time.Second},
			svc, daemon.WithConn(nc), daemon.WithoutHTTP(), daemon.WithLogger(log))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("gateway stopped with %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("gateway did not stop")
		}
	})
	e := &env{t: t, ns: ns, nc: nc, js: js, ring: ring}
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
	e.url = svc.URL()
	for name, p := range map[string]*jetstream.KeyValue{events.BucketDesired: &e.desired, events.BucketObserved: &e.observed, events.BucketSecrets: &e.secrets} {
		if *p, err = js.KeyValue(context.Background(), name); err != nil {
			t.Fatal(err)
		}
	}
	e.clusters = store.NewBucket(e.desired, store.New[capnv1.Cluster]())
	return e
}

// resp is a finished response.
type resp struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request; body is a string, []byte or nil; hdr are header
// name, value pairs.
func (e *env) do(method, path, token string, body any, hdr ...string) resp {
	e.t.Helper()
	r := testkit.Do(e.t, method, e.url+path, token, body, hdr...)
	return resp{status: r.Status, header: r.Header, body: r.Body}
}

// problem decodes a problem+json body, failing the test if it is not one.
func (r resp) problem(t *testing.T) api.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != api.MediaProblem {
		t.Fatalf("Content-Type %q, want %s; body %s", ct, api.MediaProblem, r.body)
	}
	var p api.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	if p.Status != r.status || p.Type == "" || p.Title == "" {
		t.Fatalf("problem %+v does not match status %d or lacks type/title", p, r.status)
	}
	return p
}

// wantProblem checks the status, that the body is a problem, and that every
// path in paths is among its errors.
func (r resp) wantProblem(t *testing.T, status int, paths ...string) api.Problem {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	p := r.problem(t)
	for _, want := range paths {
		found := false
		for _, fe := range p.Errors {
			if fe.Path == want && fe.Reason != "" {
				found = true
			}
		}
		if !found {
			t.Errorf("problem has no error for path %q: %s", want, r.body)
		}
	}
	return p
}

// cluster decodes a Cluster body.
func (r resp) cluster(t *testing.T) *capnv1.Cluster {
	t.Helper()
	c := new(capnv1.Cluster)
	if err := protojson.Unmarshal(r.body, c); err != nil {
		t.Fatalf("cluster body %s: %v", r.body, err)
	}
	return c
}

// lastSeq is a bucket's last revision: unchanged means nothing was written.
func (e *env) lastSeq(kv jetstream.KeyValue) uint64 {
	e.t.Helper()
	st, err := kv.Status(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
}

// put writes a protobuf value under key, as another service would.
func (e *env) put(kv jetstream.KeyValue, key string, v proto.Message) uint64 {
	e.t.Helper()
	b, err := store.Encode(v)
	if err != nil {
		e.t.Fatal(err)
	}
	rev, err := kv.Put(context.Background(), key, b)
	if err != nil {
		e.t.Fatal(err)
	}
	return rev
}

// apply posts the demo manifest (or another) as admin and returns the
// stored cluster.
func (e *env) apply(manifest string) *capnv1.Cluster {
	e.t.Helper()
	r := e.do(http.MethodPost, "/v1/clusters", tokAdmin, manifest, "Content-Type", api.MediaYAML)
	if r.status != http.StatusCreated && r.status != http.StatusOK {
		e.t.Fatalf("apply: %d %s", r.status, r.body)
	}
	return r.cluster(e.t)
}

const demoYAML = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: demo
  labels: {env: dev, team: a}
spec:
  kubernetesVersion: v1.34.2
  controlPlane: {provider: sim, replicas: 1}
  workerPools:
  - {name: md-0, provider: sim, replicas: 2}
  - {name: pinned, provider: sim, replicas: 1, version: v1.33.1}
`

// manifestNamed is demoYAML for another cluster name and labels.
func manifestNamed(name, labels string) string {
	m := strings.Replace(demoYAML, "name: demo", "name: "+name, 1)
	return strings.Replace(m, "labels: {env: dev, team: a}", "labels: "+labels, 1)
}
