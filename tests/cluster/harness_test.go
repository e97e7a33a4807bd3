// Package cluster runs capn's services against a 3-node JetStream cluster
// in the test's process: every node a real nats-server started from the
// configuration capn-nats-config renders (accounts, one nkey user per
// component with its least permissions, TLS on client and route ports),
// streams and buckets R3, each component (or each of two replicas of the
// core services) connected as its own user with its own inbox prefix to a
// different node, with --skip-provision as in a deployment. It proves that
// the rendered permissions let every component do its job (no permission
// violation anywhere) and that the deployment converges while a node dies.
package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/deploy/natsconfig/natsconfigtest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sim"
	"github.com/capn-dev/capn/services/bootstrapper"
	"github.com/capn-dev/capn/services/bootstrapper/seal"
	clusterplanner "github.com/capn-dev/capn/services/cluster-planner"
	healthwatcher "github.com/capn-dev/capn/services/health-watcher"
	machinemanager "github.com/capn-dev/capn/services/machine-manager"
	"github.com/capn-dev/capn/services/remediator"
	"github.com/capn-dev/capn/services/runtime"
)

// deployment is capn on an in-process cluster.
type deployment struct {
	t       *testing.T
	c       *natsconfigtest.Cluster
	ring    *seal.Keyring
	token   string
	gateway *gateway.Service

	mu        sync.Mutex
	instances map[string]*instance
	ledBy     [][]string // per node, what it led when busiestNode chose
}

// instance is one running replica of a component.
type instance struct {
	id     string
	user   string
	cancel context.CancelFunc
	done   chan error
	nc     *nats.Conn
	viol   *natsconfigtest.Violations
}

func newDeployment(t *testing.T) *deployment {
	t.Helper()
	if testing.Short() {
		t.Skip("3-node JetStream cluster: skipped with -short")
	}
	start := time.Now()
	c := natsconfigtest.Start(t, natsconfig.Compose())
	c.Provision()
	t.Logf("3-node cluster (TLS, nkeys, permissions) up and R3 topology provisioned in %s", time.Since(start).Round(time.Millisecond))
	key, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	token, err := gateway.GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	d := &deployment{t: t, c: c, ring: ring, token: token, instances: map[string]*instance{}}
	t.Cleanup(d.stopAll)
	return d
}

// logLevel of the replicas' logs in the test's output (CAPN_TEST_LOG_LEVEL).
var logLevel = func() zerolog.Level {
	if l, err := zerolog.ParseLevel(os.Getenv("CAPN_TEST_LOG_LEVEL")); err == nil && l != zerolog.NoLevel {
		return l
	}
	return zerolog.ErrorLevel
}()

// components of a deployment; core services may run several replicas, the
// gateway and the sim provider (its simulated machines live in its
// process) one.
var components = []struct {
	user   string
	scaled bool
}{
	{natsconfig.ClusterPlanner, true},
	{natsconfig.MachineManager, true},
	{natsconfig.Bootstrapper, true},
	{natsconfig.HealthWatcher, true},
	{natsconfig.Remediator, true},
	{natsconfig.ProviderUser("sim"), false},
	{natsconfig.Gateway, false},
}

// cache is the services' watch-cache configuration here: a 10s resync
// instead of 5 minutes. After a node's loss a watcher (an R1 ordered
// consumer that may have lived on the lost node) can lag until nats.go or
// the cache's stall check re-creates it, and a service that acted on the
// stale view waits for the resync to see its mistake; the default resync
// would exceed the test's time.
var cache = store.CacheOptions{ResyncEvery: 10 * time.Second}

// newService makes a fresh instance of user's component.
func (d *deployment) newService(user string) runtime.Service {
	switch user {
	case natsconfig.ClusterPlanner:
		return clusterplanner.New(clusterplanner.Config{Cache: cache})
	case natsconfig.MachineManager:
		return machinemanager.New(machinemanager.Config{Cache: cache})
	case natsconfig.Bootstrapper:
		return bootstrapper.New(bootstrapper.Config{Keyring: d.ring, Cache: cache})
	case natsconfig.HealthWatcher:
		return healthwatcher.New(healthwatcher.Config{Cache: cache})
	case natsconfig.Remediator:
		return remediator.New(remediator.Config{Cache: cache})
	case natsconfig.ProviderUser("sim"):
		return sim.NewService(sim.Options{BootLatency: 30 * time.Millisecond, BootJitter: 30 * time.Millisecond, HeartbeatEvery: 2 * time.Second, Seed: 1},
			sdk.Options{ReconcileEvery: 2 * time.Second})
	case natsconfig.Gateway:
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(natsconfigtest.FreePort(d.t))))
		if err != nil {
			d.t.Fatal(err)
		}
		d.gateway = gateway.New(gateway.Options{Listener: ln, Keyring: d.ring, Cache: cache,
			Tokens: []gateway.Token{{Name: "test", Secret: d.token, Scopes: []api.Scope{api.ScopeAdmin}}}})
		return d.gateway
	}
	d.t.Fatalf("no component %s", user)
	return nil
}

// start runs replica r of user's component, connected first to node
// node (failing over to the others), with the user's credentials, inbox
// prefix and TLS, and --skip-provision as in a deployment.
func (d *deployment) start(user string, r, node int) {
	d.t.Helper()
	id := fmt.Sprintf("%s/%d", user, r)
	ctx, cancel := context.WithCancel(context.Background())
	v := &natsconfigtest.Violations{}
	log := zerolog.New(zerolog.NewTestWriter(d.t)).Level(logLevel).With().Timestamp().Str("replica", id).Logger()
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	nc, err := runtime.Connect(cctx, d.c.NATSConfig(user, node), user, log, d.c.Options(user, v)...)
	ccancel()
	if err != nil {
		cancel()
		d.t.Fatalf("%s: %v", id, err)
	}
	cfg := runtime.Config{Name: user, SkipProvision: true, Replicas: d.c.D.Replicas, ShutdownTimeout: 15 * time.Second}
	in := &instance{id: id, user: user, cancel: cancel, done: make(chan error, 1), nc: nc, viol: v}
	svc := d.newService(user)
	go func() {
		in.done <- runtime.Run(ctx, cfg, svc, runtime.WithConn(nc), runtime.WithoutHTTP(), runtime.WithLogger(log))
	}()
	d.mu.Lock()
	d.instances[id] = in
	d.mu.Unlock()
}

// startAll starts every component, each core service with replicas
// replicas, spreading their connections over the nodes.
func (d *deployment) startAll(replicas int) {
	d.t.Helper()
	node := 0
	for _, c := range components {
		n := 1
		if c.scaled {
			n = replicas
		}
		for r := range n {
			d.start(c.user, r, node%len(d.c.D.Servers))
			node++
		}
	}
}

// stop stops one replica and waits for it.
func (d *deployment) stop(id string) {
	d.mu.Lock()
	in := d.instances[id]
	delete(d.instances, id)
	d.mu.Unlock()
	if in == nil {
		return
	}
	in.cancel()
	select {
	case err := <-in.done:
		if err != nil {
			d.t.Errorf("%s: %v", id, err)
		}
	case <-time.After(30 * time.Second):
		d.t.Errorf("%s did not stop within 30s", id)
	}
	in.nc.Close()
}

func (d *deployment) stopAll() {
	d.mu.Lock()
	var ids []string
	for id := range d.instances {
		ids = append(ids, id)
	}
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); d.stop(id) }()
	}
	wg.Wait()
}

// violations are every permission violation a replica was told of.
func (d *deployment) violations() map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string][]string{}
	for id, in := range d.instances {
		if v := in.viol.All(); len(v) > 0 {
			out[id] = v
		}
	}
	return out
}

// client is the gateway's Go client with an admin token.
func (d *deployment) client() *client.Client {
	d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for d.gateway.URL() == "" {
		if time.Now().After(deadline) {
			d.t.Fatal("the gateway did not listen within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, err := client.New(d.gateway.URL(), client.WithToken(d.token))
	if err != nil {
		d.t.Fatal(err)
	}
	return c
}
