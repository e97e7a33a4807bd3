// Package harness runs a capn deployment inside a test: one real embedded
// nats-server (natstest: 127.0.0.1, file store in a temp dir) and capn's
// services, each as its own daemon.Run on its own NATS connection, talking
// only through NATS as separate programs would. A test can stop a service
// cleanly (Stop), kill it without any cleanup (Kill: its connection is
// closed abruptly, nothing is drained, nacked or flushed — what kill -9
// leaves behind), and stop and start the whole system from its data
// directory (KillAll, RestartServer, StartAll). The gateway runs when a test
// starts it (Start(Gateway), GatewayURL, Client).
//
// Tests that run the services on servers of their own (tests/cluster's
// 3-node cluster) share the pieces: Factory makes the services, StartProc
// runs one on its own connection.
//
// Packages under providers/ must not import it (tests/arch).
package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sim"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/secrets/seal"
	addonmanager "github.com/capn-dev/capn/services/addon-manager"
	"github.com/capn-dev/capn/services/backup"
	"github.com/capn-dev/capn/services/bootstrapper"
	"github.com/capn-dev/capn/services/cluster-planner"
	controlplaneexternal "github.com/capn-dev/capn/services/controlplane-external"
	"github.com/capn-dev/capn/services/daemon"
	fleetmanager "github.com/capn-dev/capn/services/fleet-manager"
	"github.com/capn-dev/capn/services/health-watcher"
	"github.com/capn-dev/capn/services/machine-manager"
	"github.com/capn-dev/capn/services/maintenance"
	"github.com/capn-dev/capn/services/remediator"
)

// Sim is the sim provider's service name.
var Sim = sdk.ServiceName(sim.Name)

// Core are the services a machine needs to reach Running: the health-watcher
// is among them because the machine-manager takes node readiness from its
// node records. Only repair (the remediator) is left out.
var Core = []string{clusterplanner.Name, machinemanager.Name, bootstrapper.Name, healthwatcher.Name, Sim}

// All are every service of a deployment but the gateway.
var All = append(append([]string(nil), Core...), remediator.Name, addonmanager.Name, fleetmanager.Name)

// Gateway is the gateway's service name.
const Gateway = gateway.Name

// Backup is the backup service's name (not in All: tests that back up
// start it).
const Backup = backup.Name

// Maintenance is the maintenance service's name (not in All: tests of
// windows and schedules start it, with their own clock through
// Options.Services).
const Maintenance = maintenance.Name

// ControlPlaneExternal is the external control-plane implementation's
// name (not in All: tests of external control planes start it).
const ControlPlaneExternal = controlplaneexternal.Name

// Demo is the tests' demo cluster on the sim provider: v1.33.4, 3
// control-plane machines, pools md-0 (3, maxSurge 1, maxUnavailable 0) and
// md-1 (3, maxSurge 2, maxUnavailable 1).
const Demo = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: demo
spec:
  kubernetesVersion: v1.33.4
  controlPlane:
    provider: sim
    replicas: 3
  workerPools:
  - name: md-0
    provider: sim
    replicas: 3
    strategy: {type: RollingUpdate, maxSurge: "1", maxUnavailable: "0"}
  - name: md-1
    provider: sim
    replicas: 3
    strategy: {type: RollingUpdate, maxSurge: "2", maxUnavailable: "1"}
`

// Options shape a System. The zero value runs every service with the
// tests' fast sim (30ms boot + up to 30ms jitter, a heartbeat every 2s).
type Options struct {
	// Sim and Provider configure the sim provider (nil Sim: the tests' fast
	// sim; zero Provider: a 2s drift reconcile).
	Sim      *sim.Options
	Provider sdk.Options
	// WrapSim, if set, wraps every new sim provider (e.g. to count its
	// calls); embed the *sim.Provider to keep its optional interfaces.
	WrapSim func(*sim.Provider) sdk.Provider
	// Cache is every service's watch-cache configuration.
	Cache store.CacheOptions
	// Token is the gateway's admin token (default: a new one).
	Token string
	// Keyring seals the secrets bucket (default: a new key): two
	// deployments that hand clusters over share one.
	Keyring *seal.Keyring
	// Services adds or replaces services by name: each call makes a fresh
	// instance, as a restarted process would be (Factory.Builtin is the
	// service it replaces, to wrap).
	Services map[string]func(*Factory) daemon.Service
	// Now is the fleet-manager's clock (default time.Now): a fake one
	// drives soaks and ready deadlines; FleetTick how often it plans
	// unfinished rollouts with nothing changed (default 5s).
	Now       func() time.Time
	FleetTick time.Duration
}

// System is one capn deployment on one embedded server.
type System struct {
	*Factory
	Srv *natstest.Server
	NC  *nats.Conn
	JS  jetstream.JetStream

	Desired, Observed jetstream.KeyValue
	Clusters          *store.Bucket[*capnv1.Cluster]
	Machines          *store.Bucket[*capnv1.Machine]
	MachineStatuses   *store.Bucket[*capnv1.MachineStatus]
	ClusterStatuses   *store.Bucket[*capnv1.ClusterStatus]
	Infra             *store.Bucket[*capnv1.InfraMachine]

	mu        sync.Mutex
	instances map[string]*Proc
}

// New starts an embedded server, provisions the topology and returns a
// System with no service running. Every service still running at the
// test's end is stopped.
func New(t testing.TB, o Options) *System {
	t.Helper()
	srv := natstest.Start(t)
	nc, js := srv.Connect(t)
	ctx := context.Background()
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	s := &System{Factory: NewFactory(t, o), Srv: srv, NC: nc, JS: js, instances: map[string]*Proc{}}
	var err error
	if s.Desired, err = js.KeyValue(ctx, events.BucketDesired); err != nil {
		t.Fatal(err)
	}
	if s.Observed, err = js.KeyValue(ctx, events.BucketObserved); err != nil {
		t.Fatal(err)
	}
	s.Clusters = store.NewBucket(s.Desired, store.New[capnv1.Cluster]())
	s.Machines = store.NewBucket(s.Desired, store.New[capnv1.Machine]())
	s.MachineStatuses = store.NewBucket(s.Observed, store.New[capnv1.MachineStatus]())
	s.ClusterStatuses = store.NewBucket(s.Observed, store.New[capnv1.ClusterStatus]())
	s.Infra = store.NewBucket(s.Observed, store.New[capnv1.InfraMachine]())
	// Registered after natstest's cleanups, so it runs before them: the
	// services stop while the server is still up.
	t.Cleanup(s.StopAll)
	return s
}

// TestSim are the tests' fast sim options.
func TestSim() sim.Options {
	return sim.Options{BootLatency: 30 * time.Millisecond, BootJitter: 30 * time.Millisecond, HeartbeatEvery: 2 * time.Second, Seed: 1}
}

// Factory makes fresh instances of capn's services by name, as a restarted
// process would be, with one keyring and one gateway admin token.
type Factory struct {
	T     testing.TB
	Ring  *seal.Keyring
	Token string
	opts  Options

	mu   sync.Mutex
	addr string           // the gateway's host:port, kept across its restarts
	gw   *gateway.Service // the last gateway made
}

// NewFactory makes a Factory with a new keyring.
func NewFactory(t testing.TB, o Options) *Factory {
	t.Helper()
	ring := o.Keyring
	var err error
	if ring == nil {
		var key seal.Key
		if key, err = seal.GenerateKey(); err == nil {
			ring, err = seal.NewKeyring(key)
		}
	}
	token := o.Token
	if err == nil && token == "" {
		token, err = gateway.GenerateToken()
	}
	if err != nil {
		t.Fatal(err)
	}
	return &Factory{T: t, Ring: ring, Token: token, opts: o, addr: "127.0.0.1:0"}
}

// NewService makes a fresh instance of the named service: Options.Services'
// if it names one, else the built-in.
func (f *Factory) NewService(name string) daemon.Service {
	if mk := f.opts.Services[name]; mk != nil {
		return mk(f)
	}
	return f.Builtin(name)
}

// Builtin makes a fresh instance of one of capn's services (All, and
// Gateway: it listens on a free port of 127.0.0.1 the first time, the same
// port after, and accepts Token as admin).
func (f *Factory) Builtin(name string) daemon.Service {
	c := f.opts.Cache
	switch name {
	case clusterplanner.Name:
		return clusterplanner.New(clusterplanner.Config{Cache: c})
	case machinemanager.Name:
		return machinemanager.New(machinemanager.Config{Cache: c})
	case bootstrapper.Name:
		return bootstrapper.New(bootstrapper.Config{Keyring: f.Ring, Cache: c})
	case healthwatcher.Name:
		return healthwatcher.New(healthwatcher.Config{Cache: c})
	case remediator.Name:
		return remediator.New(remediator.Config{Cache: c})
	case addonmanager.Name:
		return addonmanager.New(addonmanager.Config{Keyring: f.Ring, Cache: c})
	case fleetmanager.Name:
		return fleetmanager.New(fleetmanager.Config{Cache: c, Now: f.opts.Now, Tick: f.opts.FleetTick})
	case backup.Name:
		return backup.New(backup.Config{})
	case maintenance.Name:
		return maintenance.New(maintenance.Config{Cache: c})
	case controlplaneexternal.Name:
		return controlplaneexternal.New(controlplaneexternal.Config{Keyring: f.Ring, Cache: c})
	case Sim:
		so := TestSim()
		if f.opts.Sim != nil {
			so = *f.opts.Sim
		}
		po := f.opts.Provider
		if po.ReconcileEvery == 0 {
			po.ReconcileEvery = 2 * time.Second
		}
		return &simService{sim: so, provider: po, wrap: f.opts.WrapSim}
	case Gateway:
		f.mu.Lock()
		defer f.mu.Unlock()
		ln, err := net.Listen("tcp", f.addr)
		if err != nil {
			f.T.Fatal(err)
		}
		f.addr = ln.Addr().String()
		f.gw = gateway.New(gateway.Options{Listener: ln, Keyring: f.Ring, Cache: c,
			Tokens: []gateway.Token{{Name: "test", Secret: f.Token, Scopes: []api.Scope{api.ScopeAdmin}}}})
		return f.gw
	}
	f.T.Fatalf("harness: unknown service %s", name)
	return nil
}

// GatewayURL is the URL of the last gateway made once it listens (30s at
// most); a restarted gateway keeps it.
func (f *Factory) GatewayURL() string {
	f.T.Helper()
	var url string
	testkit.WaitFor(f.T, 30*time.Second, "harness: the gateway listens", func() bool {
		f.mu.Lock()
		gw := f.gw
		f.mu.Unlock()
		if gw != nil {
			url = gw.URL()
		}
		return url != ""
	})
	return url
}

// Client is the gateway's Go client with the admin token.
func (f *Factory) Client() *client.Client {
	f.T.Helper()
	c, err := client.New(f.GatewayURL(), client.WithToken(f.Token))
	if err != nil {
		f.T.Fatal(err)
	}
	return c
}

// simService runs a new sim provider per Run, optionally wrapped.
type simService struct {
	sim      sim.Options
	provider sdk.Options
	wrap     func(*sim.Provider) sdk.Provider
}

func (s *simService) Name() string { return Sim }

func (s *simService) Run(ctx context.Context, d *daemon.Deps) error {
	p, err := sim.New(s.sim)
	if err != nil {
		return err
	}
	var sp sdk.Provider = p
	if s.wrap != nil {
		sp = s.wrap(p)
	}
	return sdk.NewService(sp, s.provider).Run(ctx, d)
}

// logLevel of the services' logs in the test's output (CAPN_TEST_LOG_LEVEL,
// default error).
var logLevel = func() zerolog.Level {
	if l, err := zerolog.ParseLevel(os.Getenv("CAPN_TEST_LOG_LEVEL")); err == nil && l != zerolog.NoLevel {
		return l
	}
	return zerolog.ErrorLevel
}()

// logWriter writes a service's log lines to the test's log until the
// service is stopped or killed: a killed service's last gasps (errors on
// its closed connection) are not news, and the test may have ended.
type logWriter struct {
	t    testing.TB
	mute atomic.Bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	if w.mute.Load() {
		return len(p), nil
	}
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Proc is one running service: its own daemon.Run on a NATS connection of
// its own.
type Proc struct {
	ID     string
	NC     *nats.Conn
	t      testing.TB
	cancel context.CancelFunc
	done   chan error
	out    *logWriter
}

// StartProc connects to NATS with conn and opts as cfg.Name and runs svc
// on that connection with cfg (SkipProvision set: the topology is there;
// ShutdownTimeout 15s unless set) until Stop or Kill. Its log lines go to
// the test's log at CAPN_TEST_LOG_LEVEL (default error), tagged with id.
func StartProc(t testing.TB, id string, conn daemon.NATSConfig, cfg daemon.Config, svc daemon.Service, opts ...nats.Option) *Proc {
	t.Helper()
	out := &logWriter{t: t}
	log := zerolog.New(out).Level(logLevel).With().Timestamp().Str("replica", id).Logger()
	ctx, cancel := context.WithCancel(context.Background())
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	nc, err := daemon.Connect(cctx, conn, cfg.Name, log, opts...)
	ccancel()
	if err != nil {
		cancel()
		t.Fatalf("harness: connect %s: %v", id, err)
	}
	cfg.SkipProvision = true
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 15 * time.Second
	}
	p := &Proc{ID: id, NC: nc, t: t, cancel: cancel, done: make(chan error, 1), out: out}
	go func() {
		p.done <- daemon.Run(ctx, cfg, svc, daemon.WithConn(nc), daemon.WithoutHTTP(), daemon.WithLogger(log))
	}()
	return p
}

// Stop stops the service cleanly (its context cancelled, its work finished
// or nacked) and waits for it; the test fails if it reports an error or
// does not stop within 30s.
func (p *Proc) Stop() {
	p.t.Helper()
	p.cancel()
	select {
	case err := <-p.done:
		if err != nil {
			p.t.Errorf("harness: %s: %v", p.ID, err)
		}
	case <-time.After(30 * time.Second):
		p.t.Errorf("harness: %s did not stop within 30s", p.ID)
	}
	p.out.mute.Store(true)
	p.NC.Close()
}

// Kill stops the service without any cleanup, as kill -9 would: its NATS
// connection is closed first and at once (no drain: buffered publishes are
// lost, messages it was handling are neither acked nor nacked and come back
// only after their AckWait, KV writes in flight fail), then its goroutines
// are told to end. Whatever the dying service still tries cannot reach
// NATS. Kill waits (30s at most) for daemon.Run to return so that the next
// instance does not overlap with it in the test's process, and ignores its
// error.
func (p *Proc) Kill() {
	p.t.Helper()
	p.out.mute.Store(true)
	p.NC.Close()
	p.cancel()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Errorf("harness: killed %s did not return within 30s", p.ID)
	}
}

// Start runs the named service on a connection of its own until Stop, Kill
// or the test's end. Starting a running service is a test bug.
func (s *System) Start(name string) {
	s.T.Helper()
	s.StartService(name, s.NewService(name))
}

// StartService runs svc, one of a kind made by the test (e.g. a bridge
// configured for one machine), as Start runs the named service.
func (s *System) StartService(name string, svc daemon.Service) {
	s.T.Helper()
	if s.Running(name) {
		s.T.Fatalf("harness: %s is already running", name)
	}
	p := StartProc(s.T, name, daemon.NATSConfig{URL: s.Srv.URL(), ReconnectWait: 100 * time.Millisecond}, daemon.Config{Name: name}, svc)
	s.mu.Lock()
	s.instances[name] = p
	s.mu.Unlock()
}

// StartAll starts every named service (default All) that is not running.
func (s *System) StartAll(names ...string) {
	s.T.Helper()
	if len(names) == 0 {
		names = All
	}
	for _, n := range names {
		if !s.Running(n) {
			s.Start(n)
		}
	}
}

// Running reports whether the named service runs.
func (s *System) Running(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.instances[name] != nil
}

// RunningServices are the names of the running services, sorted.
func (s *System) RunningServices() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.instances))
	for n := range s.instances {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (s *System) take(name string) *Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.instances[name]
	delete(s.instances, name)
	return in
}

// Stop stops the named service cleanly (Proc.Stop), if it runs.
func (s *System) Stop(name string) {
	s.T.Helper()
	if p := s.take(name); p != nil {
		p.Stop()
	}
}

// StopAll stops every running service cleanly, in parallel.
func (s *System) StopAll() {
	var wg sync.WaitGroup
	for _, n := range s.RunningServices() {
		wg.Add(1)
		go func() { defer wg.Done(); s.Stop(n) }()
	}
	wg.Wait()
}

// Kill stops the named service without any cleanup (Proc.Kill), if it
// runs.
func (s *System) Kill(name string) {
	s.T.Helper()
	if p := s.take(name); p != nil {
		p.Kill()
	}
}

// KillAll kills every running service.
func (s *System) KillAll() {
	var wg sync.WaitGroup
	for _, n := range s.RunningServices() {
		wg.Add(1)
		go func() { defer wg.Done(); s.Kill(n) }()
	}
	wg.Wait()
}

// RestartServer stops the embedded server and starts a new one on the same
// store directory and port, as a crashed or upgraded server comes back. The
// System's own connection reconnects; the caller restarts the services.
func (s *System) RestartServer() {
	s.T.Helper()
	s.Srv.Restart()
	testkit.WaitFor(s.T, 30*time.Second, "harness: the test connection reconnects", s.NC.IsConnected)
}

// Apply writes a cluster manifest as the gateway does: decoded, defaulted,
// validated, with a uid at create and generation bumped on change.
func (s *System) Apply(yaml string) *capnv1.Cluster {
	s.T.Helper()
	c, err := manifest.Decode([]byte(yaml))
	if err != nil {
		s.T.Fatal(err)
	}
	manifest.Default(c)
	if err := manifest.Validate(c); err != nil {
		s.T.Fatal(err)
	}
	key := keys.Cluster(c.GetMetadata().GetName())
	out, _, err := s.Clusters.Mutate(context.Background(), key, func(cur *capnv1.Cluster, exists bool) (*capnv1.Cluster, error) {
		if exists {
			if err := manifest.ValidateUpdate(cur, c); err != nil {
				return nil, err
			}
			cur.Spec = c.Spec
			cur.Metadata.Generation++
			return cur, nil
		}
		c.Metadata.Uid = "uid-" + c.GetMetadata().GetName()
		c.Metadata.Generation = 1
		c.Metadata.CreationTimestamp = timestamppb.Now()
		return c, nil
	})
	if err != nil {
		s.T.Fatal(err)
	}
	return out
}

// MutateCluster changes a cluster's desired record and bumps its generation.
func (s *System) MutateCluster(name string, fn func(*capnv1.Cluster)) {
	s.T.Helper()
	if _, _, err := s.Clusters.Mutate(context.Background(), keys.Cluster(name), func(cur *capnv1.Cluster, _ bool) (*capnv1.Cluster, error) {
		fn(cur)
		cur.Metadata.Generation++
		return cur, nil
	}); err != nil {
		s.T.Fatal(err)
	}
}

// ClusterStatus is a cluster's observed status, or nil.
func (s *System) ClusterStatus(name string) *capnv1.ClusterStatus {
	st, _, err := s.ClusterStatuses.Get(context.Background(), keys.Cluster(name))
	if err != nil {
		return nil
	}
	return st
}

// IsReady reports whether a cluster's status is Ready for its current
// generation.
func (s *System) IsReady(name string) bool {
	c, _, err := s.Clusters.Get(context.Background(), keys.Cluster(name))
	st := s.ClusterStatus(name)
	return err == nil && st.GetPhaseValue() == capnv1.ClusterReady && st.GetObservedGeneration() == c.GetMetadata().GetGeneration()
}

// WaitReady waits until the cluster is Ready for its current generation.
// On a timeout it fails with what it saw last: the cluster's phase, the
// generations, its conditions and every machine's phase, so that a hang
// says where it is stuck.
func (s *System) WaitReady(name string, timeout time.Duration) {
	s.T.Helper()
	err := testkit.Poll(timeout, 10*time.Millisecond, func() error {
		if s.IsReady(name) {
			return nil
		}
		return errors.New(s.describe(name))
	})
	if err != nil {
		s.T.Fatalf("timed out after %s waiting for %s Ready; last seen: %v", timeout, name, err)
	}
}

// describe is one line of a cluster's state for a failure message.
func (s *System) describe(name string) string {
	c, _, _ := s.Clusters.Get(context.Background(), keys.Cluster(name))
	st := s.ClusterStatus(name)
	var b strings.Builder
	fmt.Fprintf(&b, "phase %q, generation %d observed %d", st.GetPhase(), c.GetMetadata().GetGeneration(), st.GetObservedGeneration())
	for _, cond := range st.GetConditions() {
		fmt.Fprintf(&b, "; %s=%s %s: %s", cond.GetType(), cond.GetStatus(), cond.GetReason(), cond.GetMessage())
	}
	for _, k := range Keys(s.T, s.Observed, keys.MachinesOf(name)) {
		if m, _, err := s.MachineStatuses.Get(context.Background(), k); err == nil {
			fmt.Fprintf(&b, "; %s %s", strings.TrimPrefix(k, keys.MachinesOf(name)), m.GetPhase())
		}
	}
	return b.String()
}

// Keys lists a bucket's keys under prefix, sorted.
func Keys(t testing.TB, kv jetstream.KeyValue, prefix string) []string {
	t.Helper()
	lister, err := kv.ListKeys(context.Background())
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for k := range lister.Keys() {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// Entries reads every key under prefix of bucket b (but those for which
// skip, if set, is true), decoded, by key.
func Entries[T proto.Message](t testing.TB, kv jetstream.KeyValue, b *store.Bucket[T], prefix string, skip func(key string) bool) map[string]T {
	t.Helper()
	out := map[string]T{}
	for _, k := range Keys(t, kv, prefix) {
		if skip != nil && skip(k) {
			continue
		}
		v, _, err := b.Get(context.Background(), k)
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			t.Fatalf("harness: read %s: %v", k, err)
		}
		out[k] = v
	}
	return out
}

// String describes the system for a failure message.
func (s *System) String() string {
	return fmt.Sprintf("capn on %s, running %v", s.Srv.URL(), s.RunningServices())
}
