package controlplaneexternal

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/kubeconfig"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/daemon"
)

// world is the service on a real nats-server with capn's topology, and
// what the tests write as the gateway and the planner would.
type world struct {
	t           *testing.T
	js          jetstream.JetStream
	ring        *seal.Keyring
	pub         *events.Publisher
	clusters    *store.Bucket[*capnv1.Cluster]
	records     *store.Bucket[*capnv1.ControlPlaneRecord]
	kubeconfigs *store.Bucket[*capnv1.ExternalKubeconfig]
}

// start runs the service, checking every external cluster every 100ms.
func start(t *testing.T) *world { return startEvery(t, 100*time.Millisecond) }

// startEvery runs the service, checking every external cluster every
// resync.
func startEvery(t *testing.T, resync time.Duration) *world {
	t.Helper()
	w, nc := setup(t)
	svc := New(Config{Keyring: w.ring, Resync: resync, KubeAPITimeout: 5 * time.Second})
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	go func() {
		done <- daemon.Run(rctx, daemon.Config{Name: Name, HTTPAddr: daemon.HTTPOff, ShutdownTimeout: 5 * time.Second},
			svc, daemon.WithConn(nc), daemon.WithoutHTTP(), daemon.WithLogger(log))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("controlplane-external: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("controlplane-external did not stop")
		}
	})
	return w
}

// setup is a nats-server with capn's topology and the world's buckets,
// without the service.
func setup(t *testing.T) (*world, *nats.Conn) {
	t.Helper()
	ns := natstest.Start(t)
	nc, js := ns.Connect(t)
	ctx := context.Background()
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	key, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	des, err := js.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := js.KeyValue(ctx, events.BucketSecrets)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, js: js, ring: ring, pub: events.NewPublisher(js, "capn/test-planner"),
		clusters:    store.NewBucket(des, store.New[capnv1.Cluster]()),
		records:     store.NewBucket(obs, store.New[capnv1.ControlPlaneRecord]()),
		kubeconfigs: store.NewBucket(sec, store.New[capnv1.ExternalKubeconfig](), store.WithSealer(ring))}
	return w, nc
}

// register stores kc as the external kubeconfig name, sealed, as the
// gateway does.
func (w *world) register(name string, kc []byte) {
	w.t.Helper()
	parsed, err := kubeconfig.ParseExternal(kc)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, _, err := w.kubeconfigs.Mutate(context.Background(), keys.ExternalKubeconfig(name), func(*capnv1.ExternalKubeconfig, bool) (*capnv1.ExternalKubeconfig, error) {
		return &capnv1.ExternalKubeconfig{Name: name, Kubeconfig: kc, Server: parsed.Server, Auth: parsed.Auth()}, nil
	}); err != nil {
		w.t.Fatal(err)
	}
}

// apply writes the desired cluster (a new generation) with an external
// control plane naming kubeconfig and returns its revision (the generation the planner sends).
func (w *world) apply(cluster, kubeconfig string) int64 {
	w.t.Helper()
	_, rev, err := w.clusters.Mutate(context.Background(), keys.Cluster(cluster), func(cur *capnv1.Cluster, _ bool) (*capnv1.Cluster, error) {
		return &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: cluster, Generation: cur.GetMetadata().GetGeneration() + 1}, Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2",
			ControlPlane: &capnv1.ControlPlaneSpec{Type: capnv1.ControlPlaneExternal, External: &capnv1.ExternalControlPlaneSpec{Kubeconfig: kubeconfig}},
			WorkerPools:  []*capnv1.WorkerPool{{Name: "md-0", Provider: "process", Replicas: 2}}}}, nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return int64(rev)
}

// markDeleting sets the cluster's deletion timestamp, as the gateway's
// delete does.
func (w *world) markDeleting(cluster string) {
	w.t.Helper()
	if _, _, err := w.clusters.Mutate(context.Background(), keys.Cluster(cluster), func(c *capnv1.Cluster, _ bool) (*capnv1.Cluster, error) {
		c.Metadata.DeletionTimestamp = timestamppb.Now()
		return c, nil
	}); err != nil {
		w.t.Fatal(err)
	}
}

// command publishes verb for cluster as the planner does.
func (w *world) command(verb, cluster string, generation int64) {
	w.t.Helper()
	c, _, err := w.clusters.Get(context.Background(), keys.Cluster(cluster))
	if err != nil {
		w.t.Fatal(err)
	}
	cmd := &capnv1.ControlPlaneCommand{Cluster: cluster, Generation: generation, Spec: c.GetSpec().GetControlPlane(), KubernetesVersion: c.GetSpec().GetKubernetesVersion()}
	id := fmt.Sprintf("controlplane-%s-%d-%s", cluster, generation, verb)
	if _, err := w.pub.Publish(context.Background(), keys.ControlPlaneCommand(capnv1.ControlPlaneExternal, verb, cluster), "dev.capn.controlplane."+verb, id, cmd); err != nil {
		w.t.Fatal(err)
	}
}

// record is the cluster's record, nil when there is none.
func (w *world) record(cluster string) *capnv1.ControlPlaneRecord {
	w.t.Helper()
	r, _, err := w.records.Get(context.Background(), keys.ControlPlane(cluster))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// waitReady waits for the record's Ready condition to have status and
// reason, and returns the record.
func (w *world) waitReady(cluster string, status capnv1.ConditionStatus, reason string) *capnv1.ControlPlaneRecord {
	w.t.Helper()
	var last *capnv1.ControlPlaneRecord
	testkit.WaitFor(w.t, 30*time.Second, fmt.Sprintf("%s: Ready %s %s", cluster, status.Wire(), reason), func() bool {
		last = w.record(cluster)
		c := conditions.Get(last.GetConditions(), ConditionReady)
		return c.GetStatus() == status.Wire() && c.GetReason() == reason
	})
	return last
}

// testCA is a CA with a client certificate it issued.
func testCA(t *testing.T, name string) (pki.KeyPair, pki.KeyPair) {
	t.Helper()
	now := time.Now()
	pair, err := pki.NewCA(name, now)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCA(pair, now)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pki.IssueAdmin(ca, now)
	if err != nil {
		t.Fatal(err)
	}
	return pair, admin
}

// tokenKubeconfig is a kubeconfig of server, trusting caPEM, with token.
func tokenKubeconfig(server string, caPEM []byte, token string) []byte {
	return []byte(fmt.Sprintf("apiVersion: v1\nkind: Config\ncurrent-context: ext\ncontexts:\n- name: ext\n  context: {cluster: ext, user: capn}\n"+
		"clusters:\n- name: ext\n  cluster:\n    server: %s\n    certificate-authority-data: %s\n"+
		"users:\n- name: capn\n  user:\n    token: %s\n", server, b64(caPEM), token))
}

// TestEnsureWithoutAnAPIServer: what the record says before the external
// API server answers — no kubeconfig registered under the spec's name,
// then one whose server does not answer — with the endpoint and CA of the
// kubeconfig, never initialized; an external cluster is looked at by the
// periodic check without a command; a delete of a cluster not being
// deleted changes nothing.
func TestEnsureWithoutAnAPIServer(t *testing.T) {
	w := start(t)
	gen := w.apply("edge", "prod")
	w.command(keys.ControlPlaneEnsure, "edge", gen)
	rec := w.waitReady("edge", capnv1.ConditionFalse, ReasonKubeconfigNotFound)
	if rec.GetImplementation() != capnv1.ControlPlaneExternal || rec.GetInitialized() || rec.GetObservedGeneration() != gen || rec.GetCluster() != "edge" {
		t.Fatalf("record %v", rec)
	}
	if msg := conditions.Get(rec.GetConditions(), ConditionReady).GetMessage(); !strings.Contains(msg, `no kubeconfig "prod" is registered`) {
		t.Errorf("message %q does not name the kubeconfig", msg)
	}

	// A server that does not answer: a port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	caPair, _ := testCA(t, "external")
	server := fmt.Sprintf("https://127.0.0.1:%d", port)
	w.register("prod", tokenKubeconfig(server, caPair.CertPEM, "abcdef.0123456789abcdef"))
	// No command: the periodic check finds it.
	rec = w.waitReady("edge", capnv1.ConditionFalse, ReasonUnreachable)
	msg := conditions.Get(rec.GetConditions(), ConditionReady).GetMessage()
	if !strings.Contains(msg, server) || !strings.Contains(msg, "GET /version") {
		t.Errorf("message %q does not say which server and what failed", msg)
	}
	if rec.GetInitialized() || rec.GetEndpoint().GetHost() != "127.0.0.1" || rec.GetEndpoint().GetPort() != int32(port) ||
		rec.GetCaCertificatePem() != string(caPair.CertPEM) || rec.GetReadyReplicas() != 0 {
		t.Fatalf("record %v", rec)
	}
	if j := conditions.Get(rec.GetConditions(), ConditionJoinPrepared); j.GetStatus() != capnv1.ConditionUnknown.Wire() {
		t.Errorf("JoinPrepared %v before the server answered", j)
	}

	// delete of a cluster that is not being deleted: terminated, the
	// record stays (the next ensure command proves the consumer went on).
	w.command(keys.ControlPlaneDelete, "edge", gen)
	w.apply("edge", "nope")
	w.command(keys.ControlPlaneEnsure, "edge", gen+1)
	w.waitReady("edge", capnv1.ConditionFalse, ReasonKubeconfigNotFound)
	if w.record("edge") == nil {
		t.Fatal("a delete of a live cluster removed its record")
	}
}

// TestJoinObjectsAreCapns: every object the service creates is named
// capn:<cluster>:... (cluster-info aside, created only when absent) and
// labelled as the cluster's — what delete checks before it removes one.
func TestJoinObjectsAreCapns(t *testing.T) {
	objs := joinRBAC("edge")
	ci, err := clusterInfoObject("edge", "https://a:6443", []byte("ca"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range append(objs, ci) {
		md := o.body["metadata"].(map[string]any)
		l := md["labels"].(map[string]any)
		if l[LabelManagedBy] != ManagedBy || l[LabelCluster] != "edge" || md["name"] != o.name {
			t.Errorf("%s: metadata %v", o, md)
		}
		if o.name != clusterInfo && !strings.HasPrefix(o.name, "capn:edge:") {
			t.Errorf("%s is not named capn:edge:...", o)
		}
	}
	other := joinRBAC("edge2")
	for i := range objs {
		if objs[i].name == other[i].name {
			t.Errorf("clusters edge and edge2 share %s", objs[i])
		}
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// TestOlderEnsureChangesNothing: an ensure whose generation is below the
// record's observed generation changes nothing (not even a rewrite), even
// when what it would find changed; the current one does. The service's
// ensure is called directly (no consumer, no periodic check racing it).
func TestOlderEnsureChangesNothing(t *testing.T) {
	w, _ := setup(t)
	s := New(Config{Keyring: w.ring, KubeAPITimeout: 5 * time.Second})
	s.clusters, s.records, s.kubeconfigs = w.clusters, w.records, w.kubeconfigs
	ctx := t.Context()
	w.apply("edge", "prod")
	gen := w.apply("edge", "prod") // a second revision: gen-1 is an older one
	if err := s.ensure(ctx, "edge", gen); err != nil {
		t.Fatal(err)
	}
	_, rev, err := w.records.Get(ctx, keys.ControlPlane("edge"))
	if err != nil {
		t.Fatal(err)
	}
	caPair, _ := testCA(t, "external")
	w.register("prod", tokenKubeconfig("https://127.0.0.1:1", caPair.CertPEM, "abcdef.0123456789abcdef"))
	if err := s.ensure(ctx, "edge", gen-1); err != nil {
		t.Fatal(err)
	}
	if _, now, err := w.records.Get(ctx, keys.ControlPlane("edge")); err != nil || now != rev {
		t.Fatalf("an older ensure wrote the record (revision %d → %d, %v)", rev, now, err)
	}
	if err := s.ensure(ctx, "edge", gen); err != nil {
		t.Fatal(err)
	}
	rec := w.record("edge")
	if r := conditions.Get(rec.GetConditions(), ConditionReady); r.GetReason() != ReasonUnreachable || rec.GetObservedGeneration() != gen {
		t.Fatalf("the current ensure: Ready %v at generation %d", r, rec.GetObservedGeneration())
	}
	// Nothing changed since: no write.
	_, rev, _ = w.records.Get(ctx, keys.ControlPlane("edge"))
	if err := s.ensure(ctx, "edge", gen); err != nil {
		t.Fatal(err)
	}
	if _, now, _ := w.records.Get(ctx, keys.ControlPlane("edge")); now != rev {
		t.Errorf("an ensure that found nothing new rewrote the record (%d → %d)", rev, now)
	}
}
