package natsconfigtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/replyseal"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/bootstrapper"
	"github.com/capn-dev/capn/services/daemon"
)

// ReadEnv reads a rendered environment file (KEY=value lines, # comments).
func ReadEnv(t testing.TB, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && !strings.HasPrefix(k, "#") {
			env[k] = v
		}
	}
	return env
}

// StartBootstrapper runs the real bootstrapper program (daemon.MainArgs)
// configured by nothing but its rendered env file — its user, TLS files,
// inbox prefix and, with NodeAgents, the auth callout's issuer seed and
// account — plus a secrets key, connected first to node first, until the
// test ends. It returns once the bootstrapper answers credential requests
// (so it serves fetches and the auth callout too).
func (c *Cluster) StartBootstrapper(first int) {
	c.t.Helper()
	env := ReadEnv(c.t, c.Rendered.UserFile(natsconfig.Bootstrapper, natsconfig.UserEnvFile))
	key := filepath.Join(c.t.TempDir(), "secrets.key")
	if _, _, err := seal.GenerateKeyFile(key); err != nil {
		c.t.Fatal(err)
	}
	env["CAPN_SECRETS_KEY_FILE"] = key
	env["CAPN_NATS_URL"] = c.URLs(first)
	env["CAPN_HTTP_ADDR"] = daemon.HTTPOff
	if os.Getenv("CAPN_TEST_LOG_LEVEL") == "" {
		env["CAPN_LOG_LEVEL"] = "warn"
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &testLog{t: c.t}
	done := make(chan int, 1)
	go func() {
		done <- daemon.MainArgs(ctx, bootstrapper.New(bootstrapper.Config{}), nil,
			func(k string) (string, bool) { v, ok := env[k]; return v, ok }, out)
	}()
	c.t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != daemon.ExitOK {
				c.t.Errorf("bootstrapper exited %d", code)
			}
		case <-time.After(30 * time.Second):
			c.t.Error("bootstrapper did not stop within 30s")
		}
		out.mute()
	})
	// Up when it answers a credential request (with a refusal: no machine).
	nc, _, _ := c.Connect(natsconfig.ProviderUser("sim"), first)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := nc.Request(events.Subject(natsconfig.SubjectBootstrapCredential, "sim", "none", "none"), nil, time.Second)
		if err == nil {
			return
		}
		select {
		case code := <-done:
			c.t.Fatalf("bootstrapper exited %d", code)
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the bootstrapper does not answer: %v", err)
		}
	}
}

// Machine is a wanted machine whose bootstrap data the bootstrapper made.
type Machine struct {
	Cluster, Name string
	// Checksum names its data; Credential is its bootstrap credential, as
	// its provider gets it.
	Checksum, Credential string
}

// User is the machine's NATS user name (keys.MachineUser).
func (m Machine) User() string { return keys.MachineUser(m.Cluster, m.Name) }

// FetchSubject is where it asks for its bootstrap data.
func (m Machine) FetchSubject() string {
	return events.Subject(natsconfig.SubjectBootstrapFetch, m.Cluster, m.Name)
}

// WantMachines makes workers of cluster (a new cluster, on provider sim)
// wanted and has the running bootstrapper (StartBootstrapper) make their
// bootstrap data, each step as the rendered user whose job it is in a
// deployment: the gateway writes the cluster, provider-sim reports its
// endpoint, the cluster-planner writes the machines, the machine-manager
// asks for their data and reads the bootstrapper's answers, and
// provider-sim gets each machine's credential.
func (c *Cluster) WantMachines(cluster string, names ...string) map[string]Machine {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mm, mmjs, mmv := c.Connect(natsconfig.MachineManager, 0)
	ready := make(chan *capnv1.BootstrapReady, len(names))
	var d natsconfig.Durable
	for _, x := range c.D.Durables()[natsconfig.MachineManager] {
		if x.Name == natsconfig.MachineManager+"-bootstrap" {
			d = x
		}
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	consumed := make(chan error, 1)
	go func() {
		consumed <- events.Consume(cctx, mmjs, events.ConsumerSpec{Stream: d.Stream, Durable: d.Name, Filters: d.Filters},
			func(_ context.Context, m *events.Message) error {
				var r capnv1.BootstrapReady
				if err := events.DataAs(m.Event, &r); err == nil && r.GetCluster() == cluster {
					ready <- &r
				}
				return nil
			})
	}()

	_, gjs, gv := c.Connect(natsconfig.Gateway, 0)
	put(ctx, c.t, gjs, events.BucketDesired, "cluster."+cluster, &capnv1.Cluster{ApiVersion: "capn.dev/v1alpha1", Kind: "Cluster",
		Metadata: &capnv1.ObjectMeta{Name: cluster, CreationTimestamp: timestamppb.Now()},
		Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2",
			ControlPlane: &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 1},
			Network:      &capnv1.NetworkSpec{PodCidrs: []string{"192.168.0.0/16"}, ServiceCidrs: []string{"10.96.0.0/12"}, ServiceDomain: "cluster.local"}}})
	simnc, simjs, simv := c.Connect(natsconfig.ProviderUser("sim"), 0)
	put(ctx, c.t, simjs, events.BucketObserved, "infra.sim."+cluster+"._", &capnv1.InfraCluster{Provider: "sim", Cluster: cluster, Ready: true,
		ControlPlaneEndpoint: &capnv1.Endpoint{Host: "127.0.0.1", Port: 6443}})
	_, cpjs, cpv := c.Connect(natsconfig.ClusterPlanner, 0)
	want := func(n string) *capnv1.Machine {
		return &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: n}, Spec: &capnv1.MachineSpec{Provider: "sim", Role: "worker", Version: "v1.34.2"}}
	}
	for _, n := range names {
		put(ctx, c.t, cpjs, events.BucketDesired, "machine."+cluster+"."+n, want(n))
	}
	// The bootstrapper generates each new machine's data by itself; the
	// machine-manager's ask (the same request: one data) proves it may.
	pub := events.NewPublisher(mmjs, "capn/"+natsconfig.MachineManager)
	for _, n := range names {
		cmd := capnv1.NewGenerateBootstrap(cluster, n, want(n))
		if _, err := pub.Publish(ctx, events.CommandSubject("bootstrap", "generate", cluster, n), events.TypeGenerateBootstrap, "gen-"+cluster+"-"+n, cmd); err != nil {
			c.t.Fatalf("machine-manager: ask for %s's bootstrap data: %v", n, err)
		}
	}
	out := map[string]Machine{}
	for len(out) < len(names) {
		select {
		case r := <-ready:
			out[r.GetMachine()] = Machine{Cluster: cluster, Name: r.GetMachine(), Checksum: r.GetChecksum()}
		case err := <-consumed:
			c.t.Fatalf("machine-manager: consume bootstrap answers: %v (violations %v)", err, mmv.All())
		case <-ctx.Done():
			c.t.Fatalf("bootstrap data of %d of %v within 60s (violations: gateway %v, sim %v, planner %v, machine-manager %v)",
				len(out), names, gv.All(), simv.All(), cpv.All(), mmv.All())
		}
	}
	stop()
	mm.Close()
	for n, m := range out {
		req := nats.NewMsg(events.Subject(natsconfig.SubjectBootstrapCredential, "sim", cluster, n))
		req.Header.Set(bootstrapper.HeaderChecksum, m.Checksum)
		r, err := simnc.RequestMsgWithContext(ctx, req)
		if err != nil || r.Header.Get(bootstrapper.HeaderErrorCode) != "" || len(r.Data) == 0 {
			c.t.Fatalf("provider-sim: credential of %s: %v %s", n, err, r.Header.Get(bootstrapper.HeaderError))
		}
		m.Credential = string(r.Data)
		out[n] = m
	}
	return out
}

// put writes v at key of bucket (created: the key is new).
func put[T proto.Message](ctx context.Context, t testing.TB, js jetstream.JetStream, bucket, key string, v T) {
	t.Helper()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatalf("bucket %s: %v", bucket, err)
	}
	b := store.NewBucket(kv, func() T { return v.ProtoReflect().New().Interface().(T) })
	if _, err := b.Create(ctx, key, v); err != nil {
		t.Fatalf("create %s %s: %v", bucket, key, err)
	}
}

// ErrRefused is a fetch the bootstrapper refused (its code in the text).
var ErrRefused = errors.New("bootstrap fetch refused")

// Fetch asks for m's bootstrap data over nc, as capn-node does (the
// checksum and credential headers), and opens the sealed reply.
func Fetch(ctx context.Context, nc *nats.Conn, m Machine) (*capnv1.BootstrapData, error) {
	req := nats.NewMsg(m.FetchSubject())
	req.Header.Set(bootstrapper.HeaderChecksum, m.Checksum)
	req.Header.Set(bootstrapper.HeaderCredential, m.Credential)
	r, err := nc.RequestMsgWithContext(ctx, req)
	if err != nil {
		return nil, err
	}
	if code := r.Header.Get(bootstrapper.HeaderErrorCode); code != "" {
		return nil, fmt.Errorf("%w: %s %s", ErrRefused, code, r.Header.Get(bootstrapper.HeaderError))
	}
	plain, err := replyseal.Open(m.Credential, m.FetchSubject(), r.Data)
	if err != nil {
		return nil, err
	}
	var data capnv1.BootstrapData
	if err := proto.Unmarshal(plain, &data); err != nil {
		return nil, err
	}
	return &data, nil
}

// testLog writes a program's output to the test's log until muted.
type testLog struct {
	t     testing.TB
	mu    sync.Mutex
	muted bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.muted {
		l.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (l *testLog) mute() {
	l.mu.Lock()
	l.muted = true
	l.mu.Unlock()
}

// MachineNATSConfig is how machine m's agents connect, preferring node
// first: the rendered machines' transport (URL, TLS client certificate
// and CA; no credential) and m's own login — user keys.MachineUser,
// password (its bootstrap credential or machine secret), inbox prefix
// keys.MachineInboxPrefix.
func (c *Cluster) MachineNATSConfig(m Machine, password string, first int) daemon.NATSConfig {
	n := daemon.NATSConfig{
		URL:           c.URLs(first),
		User:          m.User(),
		Password:      password,
		ReconnectWait: 500 * time.Millisecond,
		InboxPrefix:   keys.MachineInboxPrefix(m.Cluster, m.Name),
	}
	if c.D.TLS {
		n.TLSCert = c.Rendered.MachinesFile(natsconfig.UserCertFile)
		n.TLSKey = c.Rendered.MachinesFile(natsconfig.UserKeyFile)
		n.TLSCA = c.Rendered.MachinesFile(natsconfig.UserCAFile)
	}
	return n
}

// ConnectMachine logs in as machine m with password (MachineNATSConfig),
// trying until ctx ends: a login the callout refuses is an authorization
// error at once; one nobody answers times out. The connection closes at
// the test's end.
func (c *Cluster) ConnectMachine(ctx context.Context, m Machine, password string, first int) (*nats.Conn, jetstream.JetStream, *Violations, error) {
	c.t.Helper()
	return c.ConnectWith(ctx, c.MachineNATSConfig(m, password, first))
}

// ConnectWith connects with cfg (a login of any name: a machine's, or an
// attacker's), recording the permission violations the server reports.
func (c *Cluster) ConnectWith(ctx context.Context, cfg daemon.NATSConfig) (*nats.Conn, jetstream.JetStream, *Violations, error) {
	c.t.Helper()
	v := &Violations{}
	nc, err := daemon.Connect(ctx, cfg, cfg.User, quietLogger(), c.Options(cfg.User, v)...)
	if err != nil {
		return nil, nil, v, err
	}
	c.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		c.t.Fatal(err)
	}
	return nc, js, v, nil
}
