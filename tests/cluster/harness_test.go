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
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/deploy/natsconfig/natsconfigtest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// deployment is capn on an in-process cluster. Its services come from
// tests/internal/harness (Factory, StartProc), its servers and their users
// from natsconfigtest.
type deployment struct {
	t *testing.T
	c *natsconfigtest.Cluster
	f *harness.Factory

	mu        sync.Mutex
	instances map[string]*instance
	ledBy     [][]string // per node, what it led when busiestNode chose
}

// instance is one running replica of a component.
type instance struct {
	*harness.Proc
	viol *natsconfigtest.Violations
}

// cache is the services' watch-cache configuration here: a 10s resync
// instead of 5 minutes. After a node's loss a watcher (an R1 ordered
// consumer that may have lived on the lost node) can lag until nats.go or
// the cache's stall check re-creates it, and a service that acted on the
// stale view waits for the resync to see its mistake; the default resync
// would exceed the test's time.
var cache = store.CacheOptions{ResyncEvery: 10 * time.Second}

func newDeployment(t *testing.T) *deployment {
	t.Helper()
	if testing.Short() {
		t.Skip("3-node JetStream cluster: skipped with -short")
	}
	start := time.Now()
	c := natsconfigtest.Start(t, natsconfig.Compose())
	c.Provision()
	t.Logf("3-node cluster (TLS, nkeys, permissions) up and R3 topology provisioned in %s", time.Since(start).Round(time.Millisecond))
	d := &deployment{t: t, c: c, f: harness.NewFactory(t, harness.Options{Cache: cache}), instances: map[string]*instance{}}
	t.Cleanup(d.stopAll)
	return d
}

// components of a deployment; core services may run several replicas, the
// gateway and the sim provider (its simulated machines live in its
// process) one. Each user's component is the service of that name.
var components = []struct {
	user   string
	scaled bool
}{
	{natsconfig.ClusterPlanner, true},
	{natsconfig.MachineManager, true},
	{natsconfig.Bootstrapper, true},
	{natsconfig.HealthWatcher, true},
	{natsconfig.Remediator, true},
	{natsconfig.AddonManager, true},
	{natsconfig.FleetManager, true},
	{natsconfig.ProviderUser("sim"), false},
	{natsconfig.Gateway, false},
}

// start runs replica r of user's component, connected first to node
// node (failing over to the others), with the user's credentials, inbox
// prefix and TLS, and --skip-provision as in a deployment.
func (d *deployment) start(user string, r, node int) {
	d.t.Helper()
	id := fmt.Sprintf("%s/%d", user, r)
	v := &natsconfigtest.Violations{}
	cfg := daemon.Config{Name: user, Replicas: d.c.D.Replicas}
	p := harness.StartProc(d.t, id, d.c.NATSConfig(user, node), cfg, d.f.NewService(user), d.c.Options(user, v)...)
	d.mu.Lock()
	d.instances[id] = &instance{Proc: p, viol: v}
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

// stopAll stops every replica cleanly, in parallel.
func (d *deployment) stopAll() {
	d.mu.Lock()
	ins := d.instances
	d.instances = map[string]*instance{}
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, in := range ins {
		wg.Add(1)
		go func() { defer wg.Done(); in.Stop() }()
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
	return d.f.Client()
}
