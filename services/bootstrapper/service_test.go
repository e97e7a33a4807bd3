package bootstrapper_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/bootstrapper"
	"github.com/capn-dev/capn/services/daemon"
)

type env struct {
	t   *testing.T
	srv *natstest.Server
	js  jetstream.JetStream
	pub *events.Publisher
}

func newEnv(t *testing.T) *env {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	if err := events.Provision(context.Background(), js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, srv: srv, js: js, pub: events.NewPublisher(js, "capn/test")}
}

// start runs a bootstrapper with ring until the returned stop is called,
// through daemon.Run: the same path a deployment takes.
func (e *env) start(ring *seal.Keyring) (stop func()) {
	e.t.Helper()
	return e.startWith(bootstrapper.Config{Keyring: ring, Workers: 2})
}

// startWith is start with a whole Config.
func (e *env) startWith(cfg bootstrapper.Config) (stop func()) {
	e.t.Helper()
	svc := bootstrapper.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	rcfg := daemon.Config{Name: bootstrapper.Name, NATS: daemon.NATSConfig{URL: e.srv.URL()}}
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, rcfg, svc, daemon.WithoutHTTP()) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("bootstrapper: %v", err)
			}
		case <-time.After(15 * time.Second):
			e.t.Error("bootstrapper did not stop")
		}
	}
	e.t.Cleanup(stop)
	return stop
}

func (e *env) kv(name string) jetstream.KeyValue {
	kv, err := e.js.KeyValue(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	return kv
}

func (e *env) applyCluster(name string, ca *capnv1.CertificateAuthority) {
	e.t.Helper()
	c := &capnv1.Cluster{ApiVersion: "capn.dev/v1alpha1", Kind: "Cluster",
		Metadata: &capnv1.ObjectMeta{Name: name, CreationTimestamp: timestamppb.Now()},
		Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2",
			ControlPlane: &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 3},
			Network:      &capnv1.NetworkSpec{PodCidrs: []string{"192.168.0.0/16"}, ServiceCidrs: []string{"10.96.0.0/12"}, ServiceDomain: "cluster.local"},
			Bootstrap:    &capnv1.BootstrapSpec{Ca: ca}}}
	b := store.NewBucket(e.kv(events.BucketDesired), func() *capnv1.Cluster { return new(capnv1.Cluster) })
	if _, err := b.Create(context.Background(), "cluster."+name, c); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) reportEndpoint(cluster string) {
	e.t.Helper()
	b := store.NewBucket(e.kv(events.BucketObserved), func() *capnv1.InfraCluster { return new(capnv1.InfraCluster) })
	ic := &capnv1.InfraCluster{Provider: "sim", Cluster: cluster, Ready: true, ControlPlaneEndpoint: &capnv1.Endpoint{Host: "127.0.0.1", Port: 6443}}
	if _, err := b.Create(context.Background(), "infra.sim."+cluster+"._", ic); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) status(cluster string) *capnv1.ClusterSecretsStatus {
	b := store.NewBucket(e.kv(events.BucketObserved), func() *capnv1.ClusterSecretsStatus { return new(capnv1.ClusterSecretsStatus) })
	st, _, err := b.Get(context.Background(), "secrets."+cluster)
	if err != nil {
		return nil
	}
	return st
}

func (e *env) openPKI(ring *seal.Keyring, cluster string) *capnv1.ClusterPKI {
	e.t.Helper()
	b := store.NewBucket(e.kv(events.BucketSecrets), func() *capnv1.ClusterPKI { return new(capnv1.ClusterPKI) }, store.WithSealer(ring))
	p, _, err := b.Get(context.Background(), "pki."+cluster)
	if err != nil {
		e.t.Fatalf("open pki.%s: %v", cluster, err)
	}
	return p
}

func keyring(t *testing.T, keys ...seal.Key) *seal.Keyring {
	t.Helper()
	r, err := seal.NewKeyring(keys[0], keys[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newKey(t *testing.T) seal.Key {
	k, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestPKICreatedOnceAndReusedAcrossRestarts(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	stop := e.start(ring)
	e.applyCluster("c1", nil)
	natstest.WaitFor(t, 10*time.Second, "PKI ready", func() bool { return e.status("c1").GetPkiReady() })
	first := e.openPKI(ring, "c1")
	stop()

	e.start(ring)
	e.reportEndpoint("c1") // wakes a reconcile of c1 in the new process
	natstest.WaitFor(t, 10*time.Second, "kubeconfig ready", func() bool { return e.status("c1").GetKubeconfigReady() })
	if second := e.openPKI(ring, "c1"); !proto.Equal(first, second) {
		t.Fatal("the PKI changed across a restart")
	}
	if h, _ := pki.CACertHash([]byte(first.GetCa().GetCertPem())); e.status("c1").GetCaCertHash() != h {
		t.Fatalf("status CA hash %q, want %q", e.status("c1").GetCaCertHash(), h)
	}
}

func TestSuppliedCAIsUsedAsIs(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	ca, err := pki.NewCA("my-company-ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.start(ring)
	e.applyCluster("byo", &capnv1.CertificateAuthority{CertificatePem: string(ca.CertPEM), PrivateKeyPem: string(ca.KeyPEM)})
	natstest.WaitFor(t, 10*time.Second, "PKI ready", func() bool { return e.status("byo").GetPkiReady() })
	got := e.openPKI(ring, "byo")
	if got.GetCa().GetCertPem() != string(ca.CertPEM) || got.GetCa().GetKeyPem() != string(ca.KeyPEM) || !got.GetUserSuppliedCa() {
		t.Fatal("stored cluster CA is not the supplied one")
	}
	if !e.status("byo").GetUserSuppliedCa() {
		t.Fatal("status does not say the CA is user-supplied")
	}
}

func TestSecretsSealedAndRotation(t *testing.T) {
	e := newEnv(t)
	oldKey, newK := newKey(t), newKey(t)
	stop := e.start(keyring(t, oldKey))
	e.applyCluster("c1", nil)
	e.reportEndpoint("c1")
	natstest.WaitFor(t, 10*time.Second, "kubeconfig ready", func() bool { return e.status("c1").GetKubeconfigReady() })
	stop()

	secrets := e.kv(events.BucketSecrets)
	for _, k := range []string{"pki.c1", "kubeconfig.c1"} {
		v, err := secrets.Get(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(v.Value(), []byte("PRIVATE KEY")) || bytes.Contains(v.Value(), []byte("BEGIN")) {
			t.Fatalf("%s is stored in the clear", k)
		}
	}
	// Not readable with a key that did not seal it.
	wrong := store.NewBucket(secrets, func() *capnv1.ClusterPKI { return new(capnv1.ClusterPKI) }, store.WithSealer(keyring(t, newK)))
	if _, _, err := wrong.Get(context.Background(), "pki.c1"); err == nil {
		t.Fatal("pki.c1 opened without its key")
	}
	// Nothing sensitive in observed.
	obs := e.kv(events.BucketObserved)
	st, _ := obs.Get(context.Background(), "secrets.c1")
	if bytes.Contains(st.Value(), []byte("PRIVATE")) {
		t.Fatal("observed status carries key material")
	}

	// Rotate: start with the new key primary and the old one to open.
	before := e.openPKI(keyring(t, oldKey), "c1")
	stop = e.start(keyring(t, newK, oldKey))
	// Every value, not only the first one re-sealed: the stop below
	// would otherwise cut the re-sealing short.
	natstest.WaitFor(t, 10*time.Second, "values re-sealed", func() bool {
		lister, err := secrets.ListKeys(context.Background())
		if err != nil {
			return false
		}
		defer func() { _ = lister.Stop() }()
		n := 0
		for k := range lister.Keys() {
			v, err := secrets.Get(context.Background(), k)
			if err != nil {
				return false
			}
			if id, _ := seal.KeyID(v.Value()); id != newK.ID() {
				return false
			}
			n++
		}
		return n > 0
	})
	stop()
	// The old key can go: everything opens with the new key alone.
	if after := e.openPKI(keyring(t, newK), "c1"); !proto.Equal(before, after) {
		t.Fatal("PKI changed by rotation")
	}
	kc := store.NewBucket(secrets, func() *capnv1.AdminKubeconfig { return new(capnv1.AdminKubeconfig) }, store.WithSealer(keyring(t, newK)))
	if _, _, err := kc.Get(context.Background(), "kubeconfig.c1"); err != nil {
		t.Fatalf("kubeconfig after rotation: %v", err)
	}
}

// collect subscribes to bootstrap events of a cluster.
func (e *env) collect(cluster string) <-chan *events.Message {
	e.t.Helper()
	out := make(chan *events.Message, 16)
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	c := events.NewConsumer(e.js, events.ConsumerSpec{Stream: events.StreamEvents, Durable: "test-" + cluster,
		Filters: []string{"capn.evt.bootstrap.*." + cluster + ".*"}}, func(ctx context.Context, m *events.Message) error {
		out <- m
		return nil
	})
	go func() { _ = c.Run(ctx) }()
	return out
}

func next(t *testing.T, ch <-chan *events.Message) *events.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(15 * time.Second):
		t.Fatal("no bootstrap event within 15s")
		return nil
	}
}

func TestDuplicateCommandYieldsSameData(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	e.start(ring)
	e.applyCluster("c1", nil)
	e.want("c1", "c1-cp-0") // the bootstrapper purges the data of a machine not desired
	got := e.collect("c1")
	cmd := &capnv1.GenerateBootstrap{Cluster: "c1", Machine: "c1-cp-0", Role: "control-plane", FirstControlPlane: true, Version: "v1.34.2",
		Bootstrap: &capnv1.BootstrapSpec{PreCommands: []string{"echo hi"}}}
	subj := events.CommandSubject("bootstrap", "generate", "c1", "c1-cp-0")
	ack, err := e.pub.Publish(context.Background(), subj, events.TypeGenerateBootstrap, "gen-1", cmd)
	if err != nil {
		t.Fatal(err)
	}
	// The endpoint arrives after the command reached the bootstrapper: it
	// waits for it.
	natstest.WaitFor(t, 10*time.Second, "the command delivered to the bootstrapper", func() bool {
		cons, err := e.js.Consumer(context.Background(), events.StreamCommands, bootstrapper.Name)
		if err != nil {
			return false // not set up yet
		}
		info, err := cons.Info(context.Background())
		return err == nil && info.Delivered.Stream >= ack.Sequence
	})
	e.reportEndpoint("c1")
	first := next(t, got)
	if first.Event.Type() != events.TypeBootstrapReady {
		t.Fatalf("got %s: %s", first.Event.Type(), first.Event.Data())
	}
	var r1 capnv1.BootstrapReady
	if err := events.DataAs(first.Event, &r1); err != nil {
		t.Fatal(err)
	}
	// The same command again with a new id: the machine-manager asking
	// again because it never got the first answer. It gets an answer of its
	// own (a new event id, so JetStream stores it) with the same data: no
	// new generation, the same secret revision.
	if _, err := e.pub.Publish(context.Background(), subj, events.TypeGenerateBootstrap, "gen-2", cmd); err != nil {
		t.Fatal(err)
	}
	boots := store.NewBucket(e.kv(events.BucketSecrets), func() *capnv1.BootstrapData { return new(capnv1.BootstrapData) }, store.WithSealer(ring))
	data1, rev1, err := boots.Get(context.Background(), r1.GetSecretKey())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data1.GetData()), "#cloud-config") || !strings.Contains(string(data1.GetData()), "kubeadm init") {
		t.Fatalf("bootstrap data is not a kubeadm init cloud-config:\n%.300s", data1.GetData())
	}
	second := next(t, got)
	var r2 capnv1.BootstrapReady
	if err := events.DataAs(second.Event, &r2); err != nil {
		t.Fatal(err)
	}
	if second.Event.ID() == first.Event.ID() || r2.GetChecksum() != r1.GetChecksum() || r2.GetSecretKey() != r1.GetSecretKey() {
		t.Fatalf("the answer to a new request: id %s (first %s), checksum %s (first %s): want a new id and the same data",
			second.Event.ID(), first.Event.ID(), r2.GetChecksum(), r1.GetChecksum())
	}
	// The first command published again with its id (a machine-manager
	// that crashed between sending and recording): JetStream keeps one, so
	// nothing more is answered and the data stays as it was.
	if _, err := e.pub.Publish(context.Background(), subj, events.TypeGenerateBootstrap, "gen-1", cmd); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, "repeat handled", func() bool {
		info, err := e.js.Consumer(context.Background(), events.StreamCommands, bootstrapper.Name)
		if err != nil {
			return false
		}
		i, err := info.Info(context.Background())
		return err == nil && i.NumPending == 0 && i.NumAckPending == 0
	})
	select {
	case m := <-got:
		t.Fatalf("a third bootstrap event %s was stored for a repeated command", m.Event.ID())
	case <-time.After(300 * time.Millisecond):
	}
	data2, rev2, err := boots.Get(context.Background(), r1.GetSecretKey())
	if err != nil {
		t.Fatal(err)
	}
	if rev1 != rev2 || !bytes.Equal(data1.GetData(), data2.GetData()) {
		t.Fatal("a repeated command changed the bootstrap data")
	}
}

func TestBadCommandFailsWithReason(t *testing.T) {
	e := newEnv(t)
	e.start(keyring(t, newKey(t)))
	e.applyCluster("c1", nil)
	e.reportEndpoint("c1")
	got := e.collect("c1")
	cmd := &capnv1.GenerateBootstrap{Cluster: "c1", Machine: "w-0", Role: "worker", Version: "v1.34.2",
		Bootstrap: &capnv1.BootstrapSpec{Provider: "ignition"}}
	if _, err := e.pub.Publish(context.Background(), events.CommandSubject("bootstrap", "generate", "c1", "w-0"), events.TypeGenerateBootstrap, "bad-1", cmd); err != nil {
		t.Fatal(err)
	}
	m := next(t, got)
	var f capnv1.BootstrapFailed
	if m.Event.Type() != events.TypeBootstrapFailed || events.DataAs(m.Event, &f) != nil {
		t.Fatalf("got %s, want %s", m.Event.Type(), events.TypeBootstrapFailed)
	}
	if f.GetReason() != bootstrapper.ReasonInvalidBootstrap || !strings.Contains(f.GetMessage(), "kubeadm") {
		t.Fatalf("failure %q %q: want the reason and the available providers", f.GetReason(), f.GetMessage())
	}
}

func TestCleanupRemovesEverything(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	e.start(ring)
	e.applyCluster("gone", nil)
	e.reportEndpoint("gone")
	natstest.WaitFor(t, 10*time.Second, "kubeconfig ready", func() bool { return e.status("gone").GetKubeconfigReady() })
	// Mark deleting, as the planner's delete flow does before cleanup.
	desired := store.NewBucket(e.kv(events.BucketDesired), func() *capnv1.Cluster { return new(capnv1.Cluster) })
	if _, _, err := desired.Mutate(context.Background(), "cluster.gone", func(c *capnv1.Cluster, _ bool) (*capnv1.Cluster, error) {
		c.Metadata.DeletionTimestamp = timestamppb.Now()
		return c, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pub.Publish(context.Background(), events.CommandSubject("bootstrap", "cleanup", "gone", "_"), events.TypeDeleteClusterSecrets, "cl-1", &capnv1.DeleteClusterSecrets{Cluster: "gone"}); err != nil {
		t.Fatal(err)
	}
	secrets := e.kv(events.BucketSecrets)
	natstest.WaitFor(t, 10*time.Second, "secrets deleted", func() bool {
		_, err := secrets.Get(context.Background(), "pki.gone")
		return errors.Is(err, jetstream.ErrKeyNotFound) && e.status("gone") == nil
	})
}

func TestTokenDeletedOnceMachineJoined(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	e.start(ring)
	e.applyCluster("c1", nil)
	e.reportEndpoint("c1")
	e.want("c1", "w-0")
	got := e.collect("c1")
	cmd := &capnv1.GenerateBootstrap{Cluster: "c1", Machine: "w-0", Role: "worker", Version: "v1.34.2"}
	if _, err := e.pub.Publish(context.Background(), events.CommandSubject("bootstrap", "generate", "c1", "w-0"), events.TypeGenerateBootstrap, "g-w0", cmd); err != nil {
		t.Fatal(err)
	}
	next(t, got)
	boots := store.NewBucket(e.kv(events.BucketSecrets), func() *capnv1.BootstrapData { return new(capnv1.BootstrapData) }, store.WithSealer(ring))
	rec, _, err := boots.Get(context.Background(), "bootstrap.c1.w-0")
	if err != nil || rec.GetToken() == "" || rec.GetTokenExpires() == nil {
		t.Fatalf("record %v, %v: want a token with an expiry while joining", rec.GetTokenExpires(), err)
	}
	statuses := store.NewBucket(e.kv(events.BucketObserved), func() *capnv1.MachineStatus { return new(capnv1.MachineStatus) })
	if _, err := statuses.Create(context.Background(), "machine.c1.w-0", &capnv1.MachineStatus{Phase: "Running"}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, "token deleted after the machine joined", func() bool {
		rec, _, err := boots.Get(context.Background(), "bootstrap.c1.w-0")
		return err == nil && rec.GetJoined() && rec.GetToken() == "" && len(rec.GetData()) > 0
	})
}

// A machine re-created under the same name (a new uid) must get its own
// bootstrap data and its own bootstrap.ready, not its predecessor's — whose
// event id JetStream would drop as a duplicate.
func TestNewIncarnationGetsNewData(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	e.start(ring)
	e.applyCluster("c1", nil)
	e.reportEndpoint("c1")
	got := e.collect("c1")
	subj := events.CommandSubject("bootstrap", "generate", "c1", "w-0")
	var ready []*capnv1.BootstrapReady
	for i, uid := range []string{"uid-1", "uid-2"} {
		cmd := &capnv1.GenerateBootstrap{Cluster: "c1", Machine: "w-0", MachineUid: uid, Role: "worker", Version: "v1.34.2"}
		if _, err := e.pub.Publish(context.Background(), subj, events.TypeGenerateBootstrap, "gen."+uid, cmd); err != nil {
			t.Fatal(err)
		}
		m := next(t, got)
		r := new(capnv1.BootstrapReady)
		if m.Event.Type() != events.TypeBootstrapReady || events.DataAs(m.Event, r) != nil {
			t.Fatalf("incarnation %d: got %s", i+1, m.Event.Type())
		}
		ready = append(ready, r)
	}
	if ready[0].GetChecksum() == ready[1].GetChecksum() {
		t.Fatal("the second incarnation got its predecessor's bootstrap data")
	}
}

// The bootstrap credential is minted with the data only for a machine
// whose provider announces node-agent; a record without one is not
// rewritten when its machine joins (nothing to forget; the token stays
// unrenewed and unregistered because the status says it joined), while a
// node-agent machine's record forgets its credential and token as before.
// A provider that asks for a credential all the same gets one minted, and
// it is refused once the machine joined.
func TestCredentialMintedOnlyForNodeAgentProviders(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	announce := func(name string, caps ...string) {
		b := store.NewBucket(e.kv(events.BucketObserved), func() *capnv1.ProviderAnnouncement { return new(capnv1.ProviderAnnouncement) })
		if _, err := b.Create(context.Background(), "provider."+name, &capnv1.ProviderAnnouncement{Name: name, Capabilities: caps, Time: timestamppb.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	announce("plain", "stop-start")
	announce("agents", "stop-start", "node-agent")
	machines := store.NewBucket(e.kv(events.BucketDesired), func() *capnv1.Machine { return new(capnv1.Machine) })
	for m, p := range map[string]string{"a-plain": "plain", "b-agent": "agents"} {
		if _, err := machines.Create(context.Background(), "machine.c1."+m, &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: m}, Spec: &capnv1.MachineSpec{Provider: p, Role: "worker", Version: "v1.34.2"}}); err != nil {
			t.Fatal(err)
		}
	}
	got := e.collect("c1")
	e.start(ring)
	e.applyCluster("c1", nil)
	e.reportEndpoint("c1")
	boots := store.NewBucket(e.kv(events.BucketSecrets), func() *capnv1.BootstrapData { return new(capnv1.BootstrapData) }, store.WithSealer(ring))
	revs := map[string]uint64{}
	for range 2 { // generated from the desired machines, no command
		if m := next(t, got); m.Event.Type() != events.TypeBootstrapReady {
			t.Fatalf("got %s, want bootstrap.ready", m.Event.Type())
		}
	}
	for _, m := range []string{"a-plain", "b-agent"} {
		rec, rev, err := boots.Get(context.Background(), "bootstrap.c1."+m)
		if err != nil || rec.GetToken() == "" {
			t.Fatalf("%s: record %v: want data with a token", m, err)
		}
		if minted := rec.GetFetchCredential() != ""; minted != (m == "b-agent") {
			t.Fatalf("%s: credential minted with the data: %v, want %v", m, minted, m == "b-agent")
		}
		revs[m] = rev
	}
	statuses := store.NewBucket(e.kv(events.BucketObserved), func() *capnv1.MachineStatus { return new(capnv1.MachineStatus) })
	for _, m := range []string{"a-plain", "b-agent"} {
		if _, err := statuses.Create(context.Background(), "machine.c1."+m, &capnv1.MachineStatus{Phase: "Running", NodeReadyTime: timestamppb.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, 10*time.Second, "the node-agent machine's record forgets its credential at the join", func() bool {
		rec, _, err := boots.Get(context.Background(), "bootstrap.c1.b-agent")
		return err == nil && rec.GetJoined() && rec.GetFetchCredential() == "" && rec.GetToken() == ""
	})
	// The pass that rewrote b-agent's record looked at a-plain first (its
	// status came first, its key sorts first): that record was not written.
	if _, rev, err := boots.Get(context.Background(), "bootstrap.c1.a-plain"); err != nil || rev != revs["a-plain"] {
		t.Fatalf("the record without a credential was rewritten at the join: revision %d, was %d (%v)", rev, revs["a-plain"], err)
	}
	// Its provider asks for a credential after the join: refused (410),
	// nothing minted.
	nc, _ := e.srv.Connect(t)
	rec, _, _ := boots.Get(context.Background(), "bootstrap.c1.a-plain")
	req := nats.NewMsg(bootstrapper.CredentialSubjectRoot + ".plain.c1.a-plain")
	req.Header.Set(bootstrapper.HeaderChecksum, rec.GetChecksum())
	reply, err := nc.RequestMsg(req, 5*time.Second)
	if err != nil || reply.Header.Get(bootstrapper.HeaderErrorCode) != "410" {
		t.Fatalf("credential request after the join: %v, code %q, want 410", err, reply.Header.Get(bootstrapper.HeaderErrorCode))
	}
	if rec, _, _ := boots.Get(context.Background(), "bootstrap.c1.a-plain"); rec.GetFetchCredential() != "" {
		t.Fatal("a credential was minted after the join")
	}
}

// A new desired machine with no status gets its bootstrap data and
// bootstrap.ready with no command (the machine-manager sends none at
// first). The machine-manager's ask for it later (its command, built by
// the same capnv1.NewGenerateBootstrap) is answered from the same data,
// not generated again. A machine that has a status, or is being deleted,
// gets nothing by itself.
func TestNewDesiredMachineGetsDataWithoutCommand(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	e.start(ring)
	e.applyCluster("c1", nil)
	e.reportEndpoint("c1")
	got := e.collect("c1")
	machines := store.NewBucket(e.kv(events.BucketDesired), func() *capnv1.Machine { return new(capnv1.Machine) })
	statuses := store.NewBucket(e.kv(events.BucketObserved), func() *capnv1.MachineStatus { return new(capnv1.MachineStatus) })
	if _, err := statuses.Create(context.Background(), "machine.c1.w-known", &capnv1.MachineStatus{Phase: "Bootstrapping"}); err != nil {
		t.Fatal(err)
	}
	spec := func(name string, deleting bool) *capnv1.Machine {
		m := &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: name, Uid: "uid-" + name},
			Spec: &capnv1.MachineSpec{Provider: "sim", Role: "worker", Version: "v1.34.2", Labels: map[string]string{"pool": "md-0"}}}
		if deleting {
			m.Metadata.DeletionTimestamp = timestamppb.Now()
		}
		return m
	}
	for _, m := range []*capnv1.Machine{spec("w-known", false), spec("w-gone", true), spec("w-new", false)} {
		if _, err := machines.Create(context.Background(), "machine.c1."+m.GetMetadata().GetName(), m); err != nil {
			t.Fatal(err)
		}
	}
	first := next(t, got)
	var r capnv1.BootstrapReady
	if first.Event.Type() != events.TypeBootstrapReady || events.DataAs(first.Event, &r) != nil || r.GetMachine() != "w-new" {
		t.Fatalf("got %s for %q, want bootstrap.ready for w-new", first.Event.Type(), r.GetMachine())
	}
	boots := store.NewBucket(e.kv(events.BucketSecrets), func() *capnv1.BootstrapData { return new(capnv1.BootstrapData) }, store.WithSealer(ring))
	rec, rev, err := boots.Get(context.Background(), "bootstrap.c1.w-new")
	if err != nil || rec.GetChecksum() != r.GetChecksum() {
		t.Fatalf("record %v: want the answered data", err)
	}
	for _, m := range []string{"w-known", "w-gone"} {
		if _, _, err := boots.Get(context.Background(), "bootstrap.c1."+m); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s got data by itself (%v), want none", m, err)
		}
	}
	// The machine-manager's ask: the same request, the same data.
	cmd := capnv1.NewGenerateBootstrap("c1", "w-new", spec("w-new", false))
	if _, err := e.pub.Publish(context.Background(), events.CommandSubject("bootstrap", "generate", "c1", "w-new"), events.TypeGenerateBootstrap, "ask1", cmd); err != nil {
		t.Fatal(err)
	}
	var again capnv1.BootstrapReady
	if m := next(t, got); events.DataAs(m.Event, &again) != nil || again.GetChecksum() != r.GetChecksum() {
		t.Fatalf("the ask got checksum %q, want the data generated by itself (%q)", again.GetChecksum(), r.GetChecksum())
	}
	if _, rev2, _ := boots.Get(context.Background(), "bootstrap.c1.w-new"); rev2 != rev {
		t.Fatalf("the ask rewrote the record (revision %d, was %d)", rev2, rev)
	}
}
