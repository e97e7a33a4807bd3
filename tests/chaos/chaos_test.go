// Package chaos runs a fleet rollout on the sim provider while it breaks
// things: services are killed without any cleanup (kill -9: the NATS
// connection closed abruptly) and restarted, commands and events are
// duplicated, delayed, reordered and replayed, and the whole system — the
// embedded nats-server and every service — is stopped and started again from
// its data directory mid-rollout. At the end it checks, and prints, that
// nothing was lost or made twice: every cluster Ready, exactly the desired
// machines per pool, no infrastructure without a machine, no machine without
// its infrastructure, no desired record lost, no machine created twice and
// no observed phase going backwards.
//
// `go test ./tests/chaos` runs the short version (10 clusters × 10
// machines); `make chaos` (CAPN_CHAOS=full) runs 100 clusters × 10
// machines. CAPN_CHAOS_SEED replays a run's random choices (which service
// is killed when, which messages are copied); the services' own timing
// stays real.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sim"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// size is one version of the run.
type size struct {
	name          string
	clusters      int
	workers       int           // per cluster, besides 1 control-plane machine
	killsPerPhase int           // kills during the create and during the upgrade
	killEvery     time.Duration // mean time between kills
	converge      time.Duration // deadline to converge once the kills stop
}

var (
	short = size{name: "short", clusters: 10, workers: 9, killsPerPhase: 6, killEvery: 700 * time.Millisecond, converge: 3 * time.Minute}
	full  = size{name: "full", clusters: 100, workers: 9, killsPerPhase: 40, killEvery: 1500 * time.Millisecond, converge: 10 * time.Minute}
)

const (
	fromVersion = "v1.34.2"
	toVersion   = "v1.34.3"
	dupRate     = 0.2 // share of commands and events the proxy copies
)

func clusterName(i int) string { return fmt.Sprintf("chaos-%03d", i) }

func manifestOf(i, workers int) string {
	return fmt.Sprintf(`apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  controlPlane: {provider: sim, replicas: 1}
  workerPools:
  - name: md-0
    provider: sim
    replicas: %d
    strategy: {type: RollingUpdate, maxSurge: "3", maxUnavailable: "0"}
`, clusterName(i), fromVersion, workers)
}

// creates counts the sim's creates of machines it did not have, per
// machine and per sim process ("life": each start of provider-sim).
type creates struct {
	mu    sync.Mutex
	life  int
	total int
	by    map[string]map[int]int // c/m → life → creates
}

// countingSim is the sim provider with its creates counted; embedding
// keeps its optional interfaces (adoption, power, its scheduler).
type countingSim struct {
	*sim.Provider
	c    *creates
	life int
}

func (c *creates) wrap(p *sim.Provider) sdk.Provider {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.life++
	return &countingSim{Provider: p, c: c, life: c.life}
}

// CreateMachine counts a create that makes a new machine. The SDK holds
// the machine's lock, so Describe then Create is one step.
func (p *countingSim) CreateMachine(ctx context.Context, req *capnv1.CreateMachine) (*capnv1.InfraMachine, error) {
	_, derr := p.Describe(ctx, req.GetCluster(), req.GetMachine())
	im, err := p.Provider.CreateMachine(ctx, req)
	if err == nil && errors.Is(derr, sdk.ErrNotFound) {
		p.c.mu.Lock()
		k := req.GetCluster() + "/" + req.GetMachine()
		if p.c.by[k] == nil {
			p.c.by[k] = map[int]int{}
		}
		p.c.by[k][p.life]++
		p.c.total++
		p.c.mu.Unlock()
	}
	return im, err
}

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: skipped with -short")
	}
	sz := short
	if os.Getenv("CAPN_CHAOS") == "full" {
		sz = full
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CAPN_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CAPN_CHAOS_SEED: %v", err)
		}
		seed = v
	}
	machines := sz.clusters * (1 + sz.workers)
	t.Logf("chaos %s: %d clusters × %d machines = %d machines, seed %d (CAPN_CHAOS_SEED=%d replays the random choices)",
		sz.name, sz.clusters, 1+sz.workers, machines, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	cr := &creates{by: map[string]map[int]int{}}
	sys := harness.New(t, harness.Options{WrapSim: cr.wrap})
	mon := newMonitor(t, sys)
	px := startProxy(t, sys, seed, dupRate)
	k := &killer{t: t, sys: sys, rng: rng, kills: map[string]int{}}
	sys.StartAll()
	begin := time.Now()

	// 1. Create the fleet while killing services.
	for i := range sz.clusters {
		sys.Apply(manifestOf(i, sz.workers))
	}
	half := machines / 2
	k.run(sz.killsPerPhase/2, sz.killEvery, func() bool { return mon.runningCount() >= half })
	t.Logf("create: %d kills, %d of %d machines Running after %s", k.total, mon.runningCount(), machines, since(begin))

	// 2. Stop the whole system mid-rollout and start it from its data
	// directory: every service killed, the server shut down, a new server
	// on the same store, every service started again.
	restartAt := time.Now()
	runningBefore := mon.runningCount()
	sys.KillAll()
	sys.RestartServer()
	mon.restart()
	sys.StartAll()
	t.Logf("whole-system restart at %d of %d machines Running: back up in %s", runningBefore, machines, since(restartAt))
	k.run(sz.killsPerPhase-sz.killsPerPhase/2, sz.killEvery, func() bool { return allReady(sys, sz.clusters) })
	sys.StartAll()
	waitAllReady(t, sys, sz.clusters, sz.converge)
	created := since(begin)
	t.Logf("create: all %d clusters Ready after %s (%d kills, %d of %d machines Running)", sz.clusters, created, k.total, mon.runningCount(), machines)
	check(t, sys, mon, cr, sz, fromVersion)

	// 3. Roll every cluster to a new version while killing services.
	upgradeAt := time.Now()
	killsBefore := k.total
	for i := range sz.clusters {
		sys.MutateCluster(clusterName(i), func(c *capnv1.Cluster) {
			c.Spec.KubernetesVersion = toVersion
			for _, p := range c.Spec.WorkerPools {
				p.Version = toVersion
			}
		})
	}
	k.run(sz.killsPerPhase, sz.killEvery, func() bool { return allReady(sys, sz.clusters) })
	sys.StartAll()
	waitAllReady(t, sys, sz.clusters, sz.converge)
	t.Logf("upgrade %s → %s: all %d clusters Ready after %s (%d kills)", fromVersion, toVersion, sz.clusters, since(upgradeAt), k.total-killsBefore)
	px.stop()
	t.Logf("proxy: %s", px)
	waitSettled(t, sys, sz.converge)
	check(t, sys, mon, cr, sz, toVersion)

	// 4. Replay: every provider machine command recorded so far — the
	// creates of the machines the upgrade replaced included, which the
	// provider handles after their deletes and the machine-manager's
	// orphan collector must clean up — then the whole events stream so far,
	// each with its original CloudEvents id.
	evLast := lastSeq(t, sys, "CAPN_EVENTS")
	replayAt := time.Now()
	cmds := px.replayCommands(func(string, string, string) bool { return true })
	evs := replayEvents(t, sys, 1, evLast)
	waitSettled(t, sys, sz.converge)
	waitAllReady(t, sys, sz.clusters, sz.converge)
	t.Logf("replay: %d provider commands and %d events (stream 1..%d) published again and handled in %s", cmds, evs, evLast, since(replayAt))

	f := check(t, sys, mon, cr, sz, toVersion)
	t.Logf("figures (%s): %d machines desired at a time, %d machine names over the run, %d kills %v, 1 whole-system restart, "+
		"%d sim creates, %d infrastructure creations, %d phase transitions, total %s",
		sz.name, machines, f.machineNames, k.total, k.byService(), cr.total, f.infraBirths, f.transitions, since(begin))
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// killer kills a random service and starts it again.
type killer struct {
	t     *testing.T
	sys   *harness.System
	rng   *rand.Rand
	total int
	kills map[string]int
}

// run kills up to n services, one about every `every`, until done() holds,
// each restarted after up to `every`; it returns with every service running.
func (k *killer) run(n int, every time.Duration, done func() bool) {
	for range n {
		if done() {
			break
		}
		time.Sleep(time.Duration(k.rng.Int64N(int64(every)))) //sleep-ok: chaos: a random pause before the next kill
		name := harness.All[k.rng.IntN(len(harness.All))]
		k.sys.Kill(name)
		k.total++
		k.kills[name]++
		time.Sleep(time.Duration(k.rng.Int64N(int64(every)))) //sleep-ok: chaos: a random downtime
		k.sys.Start(name)
	}
	k.sys.StartAll()
}

func (k *killer) byService() string {
	var parts []string
	for n, c := range k.kills {
		parts = append(parts, fmt.Sprintf("%s=%d", n, c))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func allReady(sys *harness.System, n int) bool {
	for i := range n {
		if !sys.IsReady(clusterName(i)) {
			return false
		}
	}
	return true
}

func waitAllReady(t *testing.T, sys *harness.System, n int, timeout time.Duration) {
	t.Helper()
	if testkit.Poll(timeout, 50*time.Millisecond, func() error {
		if !allReady(sys, n) {
			return errors.New("not all Ready")
		}
		return nil
	}) != nil {
		var notReady []string
		for i := range n {
			if !sys.IsReady(clusterName(i)) {
				st := sys.ClusterStatus(clusterName(i))
				notReady = append(notReady, fmt.Sprintf("%s (%s, generation %d)", clusterName(i), st.GetPhase(), st.GetObservedGeneration()))
			}
		}
		t.Fatalf("not Ready %s after the chaos: %s", timeout, strings.Join(notReady, ", "))
	}
}

// check verifies the invariants on KV as it is now and on what the
// monitor and the sim counted, logs the counts it checked, and fails the
// test on any violation.
func check(t *testing.T, sys *harness.System, mon *monitor, cr *creates, sz size, version string) monitorFigures {
	t.Helper()
	clusters := harness.Entries(t, sys.Desired, sys.Clusters, "cluster.", nil)
	desired := harness.Entries(t, sys.Desired, sys.Machines, "machine.", nil)
	statuses := harness.Entries(t, sys.Observed, sys.MachineStatuses, "machine.", nil)
	clusterInfra := map[string]bool{}
	infra := harness.Entries(t, sys.Observed, sys.Infra, "infra.sim.", func(k string) bool {
		if strings.HasSuffix(k, "._") {
			clusterInfra[k] = true
			return true
		}
		return false
	})
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }

	// Desired clusters: none lost, none changed behind the test's back.
	ready := 0
	for i := range sz.clusters {
		name := clusterName(i)
		c, ok := clusters["cluster."+name]
		switch {
		case !ok:
			bad("desired cluster %s lost", name)
			continue
		case c.GetSpec().GetKubernetesVersion() != version:
			bad("desired cluster %s on %s, want %s", name, c.GetSpec().GetKubernetesVersion(), version)
		}
		if sys.IsReady(name) {
			ready++
		} else {
			bad("cluster %s not Ready: %s", name, sys.ClusterStatus(name).GetPhase())
		}
	}
	if len(clusters) != sz.clusters {
		bad("%d desired clusters, want %d", len(clusters), sz.clusters)
	}

	// Machines per pool: exactly the replicas, all on the version, none
	// being deleted, each Running with Running infrastructure.
	pools := map[string]int{}
	for key, m := range desired {
		c, name := m.GetSpec().GetCluster(), strings.TrimPrefix(key, "machine."+m.GetSpec().GetCluster()+".")
		pools[c+"/"+m.GetSpec().GetPool()]++
		if m.GetMetadata().GetDeletionTimestamp() != nil {
			bad("machine %s still being deleted", key)
		}
		if v := m.GetSpec().GetVersion(); v != version {
			bad("machine %s on %s, want %s", key, v, version)
		}
		if st, ok := statuses[key]; !ok || st.GetPhase() != "Running" {
			bad("machine %s is %q, want Running", key, st.GetPhase())
		}
		if im, ok := infra["infra.sim."+c+"."+name]; !ok || im.GetStateValue() != sdk.StateRunning {
			bad("machine %s has no Running infrastructure (%v)", key, im.GetState())
		}
	}
	for i := range sz.clusters {
		name := clusterName(i)
		if n := pools[name+"/control-plane"]; n != 1 {
			bad("%s control-plane has %d machines, want 1", name, n)
		}
		if n := pools[name+"/md-0"]; n != sz.workers {
			bad("%s md-0 has %d machines, want %d", name, n, sz.workers)
		}
		if !clusterInfra["infra.sim."+name+"._"] {
			bad("%s has no cluster infrastructure", name)
		}
	}
	// Infrastructure and statuses: each belongs to a desired machine.
	for key := range infra {
		c, rest, _ := strings.Cut(strings.TrimPrefix(key, "infra.sim."), ".")
		if _, ok := desired["machine."+c+"."+rest]; !ok {
			bad("infrastructure %s (%s) has no machine", key, infra[key].GetState())
		}
	}
	for key := range statuses {
		if _, ok := desired[key]; !ok {
			bad("observed status %s has no machine", key)
		}
	}

	// What the run saw: no phase regression, no machine created twice.
	f := mon.figures()
	for _, r := range f.regressions {
		bad("phase regression %s", r)
	}
	for _, d := range f.doubleInfra {
		bad("double create: %s", d)
	}
	cr.mu.Lock()
	simTwice := 0
	for k, lives := range cr.by {
		for life, n := range lives {
			if uids, stale := mon.uidsOf(k); n > uids+stale {
				simTwice++
				bad("double create: sim process %d created %s %d times (%d uid(s), %d stale create(s) after its delete)", life, k, n, uids, stale)
			}
		}
	}
	simCreates, simLives := cr.total, cr.life
	cr.mu.Unlock()

	t.Logf("checked (%s, %s): %d/%d desired clusters present, %d Ready; %d desired machines (%d pools, each exactly its replicas), "+
		"%d observed statuses, %d machine infrastructure records (+%d cluster); %d phase transitions watched, %d regressions; "+
		"%d machine names and %d uids over the run, %d infrastructure creations, %d sim creates in %d sim processes, %d double creates, "+
		"%d stale creates after a delete (infrastructure the orphan collector deleted); %d problems",
		sz.name, version, len(clusters), sz.clusters, ready, len(desired), len(pools), len(statuses), len(infra), len(clusterInfra),
		f.transitions, len(f.regressions), f.machineNames, f.uids, f.infraBirths, simCreates, simLives, len(f.doubleInfra)+simTwice, len(f.stale), len(problems))
	if len(problems) > 0 {
		sort.Strings(problems)
		if len(problems) > 40 {
			problems = append(problems[:40], fmt.Sprintf("… and %d more", len(problems)-40))
		}
		t.Errorf("%d invariant violations:\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	return f
}
