package autoscalerprovider_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/externalgrpc"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/autoscalertls"
	autoscalerprovider "github.com/capn-dev/capn/services/autoscaler-provider"
	"github.com/capn-dev/capn/services/daemon"
)

// world is a real nats-server with capn's topology, the state other
// services would have written, and the autoscaler-provider run through
// daemon.Run with real mutual TLS.
type world struct {
	t        *testing.T
	ns       *natstest.Server
	js       jetstream.JetStream
	desired  jetstream.KeyValue
	observed jetstream.KeyValue
	clusters *store.Bucket[*capnv1.Cluster]
	machines *store.Bucket[*capnv1.Machine]
	tlsDir   string
	addr     string
	stop     func()
}

func newWorld(t *testing.T, mods ...func(*autoscalerprovider.Config)) *world {
	t.Helper()
	w := &world{t: t, ns: natstest.Start(t), tlsDir: t.TempDir()}
	_, w.js = w.ns.Connect(t)
	ctx := context.Background()
	if err := events.Provision(ctx, w.js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	var err error
	if w.desired, err = w.js.KeyValue(ctx, events.BucketDesired); err != nil {
		t.Fatal(err)
	}
	if w.observed, err = w.js.KeyValue(ctx, events.BucketObserved); err != nil {
		t.Fatal(err)
	}
	w.clusters = store.NewBucket(w.desired, store.New[capnv1.Cluster]())
	w.machines = store.NewBucket(w.desired, store.New[capnv1.Machine]())
	if _, err := autoscalertls.Ensure(w.tlsDir, []string{"127.0.0.1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	w.start(mods...)
	return w
}

// start runs the service on a new port; stop (also at cleanup) ends it.
func (w *world) start(mods ...func(*autoscalerprovider.Config)) {
	t := w.t
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.addr = ln.Addr().String()
	cfg := autoscalerprovider.Config{Listener: ln,
		TLSCert: filepath.Join(w.tlsDir, autoscalertls.ServerCertFile), TLSKey: filepath.Join(w.tlsDir, autoscalertls.ServerKeyFile),
		TLSClientCA: filepath.Join(w.tlsDir, autoscalertls.CACertFile), Cache: store.CacheOptions{ResyncEvery: store.NoResync}}
	for _, m := range mods {
		m(&cfg)
	}
	svc := autoscalerprovider.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	go func() {
		done <- daemon.Run(ctx, daemon.Config{Name: autoscalerprovider.Name, NATS: daemon.NATSConfig{URL: w.ns.URL()}, ShutdownTimeout: 5 * time.Second},
			svc, daemon.WithoutHTTP(), daemon.WithLogger(log))
	}()
	stopped := false
	w.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("autoscaler-provider stopped with %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("autoscaler-provider did not stop")
		}
	}
	t.Cleanup(w.stop)
}

// client is a gRPC client of cluster's autoscaler, with its certificate.
func (w *world) client(cluster string) externalgrpc.CloudProviderClient {
	w.t.Helper()
	c, err := autoscalertls.IssueClient(w.tlsDir, cluster, w.addr, time.Now())
	if err != nil {
		w.t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(c.Cert, c.Key)
	if err != nil {
		w.t.Fatal(err)
	}
	return w.dial(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: w.roots(), MinVersion: tls.VersionTLS13})
}

func (w *world) roots() *x509.CertPool {
	ca, err := os.ReadFile(filepath.Join(w.tlsDir, autoscalertls.CACertFile))
	if err != nil {
		w.t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(ca)
	return p
}

func (w *world) dial(cfg *tls.Config) externalgrpc.CloudProviderClient {
	w.t.Helper()
	conn, err := grpc.NewClient(w.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { conn.Close() })
	return externalgrpc.NewCloudProviderClient(conn)
}

func (w *world) put(kv jetstream.KeyValue, key string, v proto.Message) {
	w.t.Helper()
	b, err := store.Encode(v)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), key, b); err != nil {
		w.t.Fatal(err)
	}
}

// cluster writes a desired cluster: a control plane of one and pools.
func (w *world) cluster(name string, pools ...*capnv1.WorkerPool) {
	w.put(w.desired, keys.Cluster(name), &capnv1.Cluster{ApiVersion: "capn.dev/v1alpha1", Kind: "Cluster",
		Metadata: &capnv1.ObjectMeta{Name: name, Uid: "u-" + name, Generation: 1},
		Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.37.2", ControlPlane: &capnv1.ControlPlaneSpec{Provider: "process", Replicas: 1},
			WorkerPools: pools}})
}

// machine writes a desired machine and its observed status (phase) and
// infrastructure (provider id process://<cluster>/<name>).
func (w *world) machine(cluster, pool, name string, phase capnv1.MachinePhase) {
	role := "worker"
	if pool == "control-plane" {
		role = "control-plane"
	}
	w.put(w.desired, keys.Machine(cluster, name), &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: name, Uid: "u-" + name, CreationTimestamp: timestamppb.Now(),
		Labels: map[string]string{"capn.dev/cluster": cluster, "capn.dev/pool": pool}},
		Spec: &capnv1.MachineSpec{Cluster: cluster, Pool: pool, Role: role, Provider: "process", Version: "v1.37.2"}})
	st := &capnv1.MachineStatus{Provider: "process"}
	st.SetPhaseValue(phase)
	w.put(w.observed, keys.Machine(cluster, name), st)
	if phase == capnv1.MachineRunning {
		w.put(w.observed, keys.Infra("process", cluster, name), &capnv1.InfraMachine{Provider: "process", Cluster: cluster, Machine: name,
			ProviderId: "process://" + cluster + "/" + name})
	}
}

func (w *world) get(cluster string) *capnv1.Cluster {
	w.t.Helper()
	c, _, err := w.clusters.Get(context.Background(), keys.Cluster(cluster))
	if err != nil {
		w.t.Fatal(err)
	}
	return c
}

func (w *world) replicas(cluster, pool string) int32 {
	w.t.Helper()
	for _, p := range w.get(cluster).GetSpec().GetWorkerPools() {
		if p.GetName() == pool {
			return p.GetReplicas()
		}
	}
	w.t.Fatalf("no pool %s", pool)
	return 0
}

func (w *world) annotations(cluster, machine string) map[string]string {
	w.t.Helper()
	m, _, err := w.machines.Get(context.Background(), keys.Machine(cluster, machine))
	if err != nil {
		w.t.Fatal(err)
	}
	return m.GetMetadata().GetAnnotations()
}

func pool(name string, replicas, lo, hi int32) *capnv1.WorkerPool {
	p := &capnv1.WorkerPool{Name: name, Provider: "process", Replicas: replicas}
	if hi > 0 {
		p.Autoscaling = &capnv1.Autoscaling{Min: lo, Max: hi}
	}
	return p
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}
