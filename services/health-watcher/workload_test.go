package healthwatcher_test

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/kubeconfig"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/services/health-watcher"
)

// fakeAPI is an API server endpoint that counts GET /api/v1/nodes and
// answers 503 (a placeholder endpoint) until it is given Nodes.
type fakeAPI struct {
	*httptest.Server
	mu    sync.Mutex
	gets  int
	nodes []byte // nil: 503
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{}
	f.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.URL.Path == "/api/v1/nodes" {
			f.gets++
		}
		if f.nodes == nil {
			http.Error(w, "placeholder endpoint", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(f.nodes)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPI) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets
}

// The health-watcher with a real embedded NATS against API endpoints that
// are not Kubernetes: a cluster on a provider without real-kubernetes
// (sim) is never asked, whatever its kubeconfig says; one on a
// real-kubernetes provider whose endpoint answers 503 is asked with
// backoff (not every poll); once it answers, its Node is recorded and it
// is read every poll.
func TestNodeReadsAskOnlyRealKubernetesClustersAndBackOff(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	desired, observed, secrets := kvBucket(t, js, events.BucketDesired), kvBucket(t, js, events.BucketObserved), kvBucket(t, js, events.BucketSecrets)
	key, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caPair, err := pki.NewCA("kubernetes", now)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCA(caPair, now)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pki.IssueAdmin(ca, now)
	if err != nil {
		t.Fatal(err)
	}
	created := timestamppb.New(now.Add(-time.Minute))
	put(t, observed, "provider.process", &capnv1.ProviderAnnouncement{Name: "process", Capabilities: []string{"real-kubernetes"}, Time: timestamppb.Now()})
	put(t, observed, "provider.sim", &capnv1.ProviderAnnouncement{Name: "sim", Capabilities: []string{"reboot"}, Time: timestamppb.Now()})
	apis := map[string]*fakeAPI{}
	for c, p := range map[string]string{"real": "process", "simmed": "sim"} {
		api := newFakeAPI(t)
		apis[c] = api
		put(t, desired, "cluster."+c, &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: c, CreationTimestamp: created},
			Spec: &capnv1.ClusterSpec{ControlPlane: &capnv1.ControlPlaneSpec{Provider: p, Replicas: 1}}})
		put(t, desired, "machine."+c+".cp-0", &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: "cp-0", CreationTimestamp: created},
			Spec: &capnv1.MachineSpec{Cluster: c, Pool: "control-plane", Role: "control-plane", Provider: p}})
		put(t, observed, "machine."+c+".cp-0", &capnv1.MachineStatus{Phase: "Running", ProviderId: p + "://" + c + "/cp-0", PhaseSince: created})
		u, _ := url.Parse(api.URL)
		port, _ := strconv.Atoi(u.Port())
		cfg, err := kubeconfig.Render(kubeconfig.Input{ClusterName: c, Host: u.Hostname(), Port: int32(port),
			CACertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw}), ClientCertPEM: admin.CertPEM, ClientKeyPEM: admin.KeyPEM})
		if err != nil {
			t.Fatal(err)
		}
		put(t, secrets, "kubeconfig."+c, &capnv1.AdminKubeconfig{Kubeconfig: cfg, Server: api.URL}, store.WithSealer(ring))
	}
	svc := healthwatcher.New(healthwatcher.Config{Keyring: ring, NodePollEvery: 100 * time.Millisecond, NodeBackoffMax: 800 * time.Millisecond})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(runCtx, daemon.Config{Name: healthwatcher.Name, NATS: daemon.NATSConfig{URL: srv.URL()}}, svc, daemon.WithoutHTTP())
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("health-watcher: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("health-watcher did not stop")
		}
	})
	natstest.WaitFor(t, 10*time.Second, "the real-kubernetes cluster's endpoint asked", func() bool { return apis["real"].count() > 0 })
	// Backoff 100ms doubling to 800ms puts at least 0.1+0.2+0.4s between
	// the first and the fourth of four more asks; one ask per 100ms poll
	// would take 0.3s.
	start, since := apis["real"].count(), time.Now()
	natstest.WaitFor(t, 10*time.Second, "four more asks of the 503 endpoint", func() bool { return apis["real"].count()-start >= 4 })
	if d := time.Since(since); d < 600*time.Millisecond {
		t.Errorf("the 503 endpoint was asked 4 times in %s; want backoff to 800ms (at least 0.6s), not one ask per 100ms poll", d)
	}
	if n := apis["simmed"].count(); n != 0 {
		t.Errorf("the sim cluster's endpoint was asked %d times; a cluster on a provider without real-kubernetes is never asked", n)
	}

	// The API server answers: the Node is recorded, and it is read every poll.
	apis["real"].mu.Lock()
	apis["real"].nodes = []byte(`{"items":[{"metadata":{"name":"cp-0","uid":"u","creationTimestamp":"2026-01-01T00:00:00Z"},
		"spec":{"providerID":"process://real/cp-0"},"status":{"nodeInfo":{"kubeletVersion":"v1.37.2"},
		"conditions":[{"type":"KernelDeadlock","status":"False","reason":"KernelHasNoDeadlock","lastHeartbeatTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}]}`)
	apis["real"].mu.Unlock()
	nodes := store.NewBucket(observed, store.New[capnv1.NodeHealth]())
	natstest.WaitFor(t, 10*time.Second, "cp-0's Node recorded", func() bool {
		h, _, err := nodes.Get(ctx, keys.Node("real", "cp-0"))
		return err == nil && h.GetNodeName() == "cp-0" && h.GetKubeletVersion() == "v1.37.2" && len(h.GetConditions()) == 1
	})
	// One read per 100ms poll: five take about 0.5s; with the failures'
	// backoff (800ms) they would take 4s.
	start, since = apis["real"].count(), time.Now()
	natstest.WaitFor(t, 10*time.Second, "five more reads of the answering API server", func() bool { return apis["real"].count()-start >= 5 })
	if d := time.Since(since); d > 3*time.Second {
		t.Errorf("an answering API server was read 5 times in %s; want about one read per 100ms poll", d)
	}
}

func kvBucket(t *testing.T, js jetstream.JetStream, name string) jetstream.KeyValue {
	t.Helper()
	b, err := js.KeyValue(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// put writes v at key (whatever is there), as its single writer would.
func put[T proto.Message](t *testing.T, kv jetstream.KeyValue, key string, v T, opts ...store.BucketOption) {
	t.Helper()
	b := store.NewBucket(kv, func() T { return v.ProtoReflect().New().Interface().(T) }, opts...)
	if _, _, err := b.Mutate(context.Background(), key, func(T, bool) (T, error) { return v, nil }); err != nil {
		t.Fatal(err)
	}
}
