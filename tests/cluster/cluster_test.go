package cluster

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/tests/internal/harness"
)

const newVersion = "v1.34.2"

// pools are the demo cluster's pools: replicas and maxSurge.
var pools = map[string]struct{ replicas, surge int }{
	"control-plane": {3, 1}, "md-0": {3, 1}, "md-1": {3, 2},
}

// TestClusterSurvivesNodeLoss applies a cluster through the gateway, waits
// for Ready, upgrades it, stops the node that leads the most streams in
// the middle of the rollout, and checks that the rollout completes on the
// two nodes left: Ready on the new version, exactly the desired machines,
// one infrastructure record each, no pool ever above replicas+maxSurge,
// and no permission violation reported to any component or logged by any
// node. One replica of each component.
func TestClusterSurvivesNodeLoss(t *testing.T) { survivesNodeLoss(t, 1) }

// TestTwoReplicasSurviveNodeLoss is the same with two replicas of each core
// service sharing their durable consumers: each replica's watch caches lag
// the other's writes, so it is the test that a service confirms an absence
// in KV before acting on it (a machine-manager whose cache has not seen a
// machine's infrastructure must not fail it as InfrastructureGone), and
// that a machine re-created under the same name gets its own bootstrap
// answer (not one JetStream drops as a duplicate of its predecessor's).
func TestTwoReplicasSurviveNodeLoss(t *testing.T) { survivesNodeLoss(t, 2) }

func survivesNodeLoss(t *testing.T, replicas int) {
	start := time.Now()
	d := newDeployment(t)
	d.startAll(replicas)
	cl := d.client()
	ctx := context.Background()
	rec := d.record(t)

	step := time.Now()
	if _, _, err := cl.Apply(ctx, []byte(harness.Demo)); err != nil {
		t.Fatal(err)
	}
	d.waitReady("demo", "", 90*time.Second)
	t.Logf("create: 9 machines Ready in %s", time.Since(step).Round(time.Millisecond))

	step = time.Now()
	if _, err := cl.Upgrade(ctx, "demo", newVersion); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "the upgrade under way", func() bool { return rec.anyOn(newVersion) })
	victim := d.busiestNode()
	d.c.Stop(victim)
	t.Logf("stopped node %s (it led %s) mid-rollout, %s after the upgrade began",
		d.c.D.Servers[victim].Name, strings.Join(d.ledBy[victim], ", "), time.Since(step).Round(time.Millisecond))

	d.waitReady("demo", newVersion, 120*time.Second)
	t.Logf("upgrade with a node lost: Ready in %s", time.Since(step).Round(time.Millisecond))

	d.checkMachines(t, ctx, rec)
	if _, err := cl.Kubeconfig(ctx, "demo"); err != nil {
		t.Errorf("kubeconfig through the gateway (a secrets read): %v", err)
	}
	for id, v := range d.violations() {
		t.Errorf("%s was denied: %s", id, strings.Join(v, "; "))
	}
	for _, v := range d.c.ServerViolations() {
		t.Errorf("server logged: %s", v)
	}
	d.checkDurables(t)
	t.Logf("total %s", time.Since(start).Round(time.Millisecond))
}

// waitReady waits until the cluster is Ready for its current generation
// with every pool's replicas updated, on version (when not empty).
func (d *deployment) waitReady(name, version string, timeout time.Duration) {
	d.t.Helper()
	cl := d.client()
	last := testkit.Poll(timeout, 100*time.Millisecond, func() error {
		c, err := cl.Get(context.Background(), name)
		if err != nil {
			return err
		}
		st := c.GetStatus()
		if st.GetPhase() == "Ready" && st.GetObservedGeneration() == c.GetMetadata().GetGeneration() &&
			(version == "" || c.GetSpec().GetKubernetesVersion() == version) {
			return nil
		}
		return errors.New(st.GetPhase())
	})
	if last == nil {
		return
	}
	d.explain(name)
	d.t.Fatalf("cluster %s not Ready within %s (last: %v)", name, timeout, last)
}

// explain logs the machines that are not Running and their timelines,
// and the state of every durable consumer.
func (d *deployment) explain(name string) {
	for i := range d.c.D.Servers {
		s := d.c.Server(i)
		if s == nil {
			continue
		}
		info, err := s.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true, Config: true})
		if err != nil {
			continue
		}
		for _, a := range info.AccountDetails {
			for _, st := range a.Streams {
				for _, c := range st.Consumer {
					if c.Config == nil || c.Config.Durable == "" || c.Cluster == nil || c.Cluster.Leader != s.Name() {
						continue
					}
					d.t.Logf("durable %s/%s (leader %s): delivered stream seq %d, ack floor %d, pending %d, ack pending %d, redelivered %d, waiting pulls %d",
						st.Name, c.Name, c.Cluster.Leader, c.Delivered.Stream, c.AckFloor.Stream, c.NumPending, c.NumAckPending, c.NumRedelivered, c.NumWaiting)
				}
			}
		}
	}
	cl := d.client()
	ms, err := cl.Machines(context.Background(), name, client.ListOptions{})
	if err != nil {
		d.t.Logf("machines: %v", err)
		return
	}
	evs, err := cl.Events(context.Background(), name, client.EventsOptions{Limit: 1000})
	if err != nil {
		d.t.Logf("timeline: %v", err)
	}
	for _, m := range ms {
		st := m.GetStatus()
		if st.GetPhase() == "Running" {
			continue
		}
		n := m.GetMetadata().GetName()
		d.t.Logf("machine %s (uid %s): pool %s version %s phase %s deleting %v: %s %s", n, m.GetMetadata().GetUid(), m.GetSpec().GetPool(),
			m.GetSpec().GetVersion(), st.GetPhase(), m.GetMetadata().GetDeletionTimestamp() != nil, st.GetFailureReason(), st.GetFailureMessage())
		for _, e := range evs {
			if e.Object == n {
				d.t.Logf("  %d %s %s.%s %s (%s)", e.Sequence, e.Time.Format("15:04:05.000"), e.Entity, e.What, e.ID, e.Source)
			}
		}
	}
}

// busiestNode is the node that leads the most streams (or the meta group)., the streams it led when it was chosen.
func (d *deployment) busiestNode() int {
	best, most := d.c.MetaLeader(), -1
	d.ledBy = make([][]string, len(d.c.D.Servers))
	for i := range d.c.D.Servers {
		s := d.c.Server(i)
		if s == nil {
			continue
		}
		for _, st := range natsconfig.StreamNames() {
			if s.JetStreamIsStreamLeader(d.c.D.Account, st) {
				d.ledBy[i] = append(d.ledBy[i], st)
			}
		}
		if s.JetStreamIsLeader() {
			d.ledBy[i] = append(d.ledBy[i], "the meta group")
		}
		if len(d.ledBy[i]) > most {
			best, most = i, len(d.ledBy[i])
		}
	}
	return best
}

// recorder follows the desired machines of the demo cluster through a
// watcher of the gateway's user (which reads desired): every machine
// ever seen, and the most each pool had at once.
type recorder struct {
	mu       sync.Mutex
	live     map[string]*capnv1.Machine
	seen     map[string]*capnv1.Machine
	maxTotal map[string]int
}

func (d *deployment) record(t *testing.T) *recorder {
	t.Helper()
	_, js, _ := d.c.Connect(natsconfig.Gateway, 1)
	kv, err := js.KeyValue(context.Background(), events.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := kv.Watch(ctx, "machine.demo.>")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{live: map[string]*capnv1.Machine{}, seen: map[string]*capnv1.Machine{}, maxTotal: map[string]int{}}
	go func() {
		for e := range w.Updates() {
			if e != nil {
				r.apply(e)
			}
		}
	}()
	return r
}

func (r *recorder) apply(e jetstream.KeyValueEntry) {
	name := strings.TrimPrefix(e.Key(), "machine.demo.")
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(r.live, name)
		return
	}
	m := new(capnv1.Machine)
	if proto.Unmarshal(e.Value(), m) != nil {
		return
	}
	r.live[name], r.seen[name] = m, m
	count := map[string]int{}
	for _, m := range r.live {
		count[m.GetSpec().GetPool()]++
	}
	for p, n := range count {
		r.maxTotal[p] = max(r.maxTotal[p], n)
	}
}

// has tells whether the live machines are exactly names.
func (r *recorder) has(names map[string]bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.live) != len(names) {
		return false
	}
	for n := range r.live {
		if !names[n] {
			return false
		}
	}
	return true
}

func (r *recorder) anyOn(version string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.live {
		if m.GetSpec().GetVersion() == version {
			return true
		}
	}
	return false
}

// checkMachines checks the end state: per pool exactly its replicas, all
// on the new version, Running; one sim infrastructure record per machine
// and none without one; no pool ever above replicas+maxSurge.
func (d *deployment) checkMachines(t *testing.T, ctx context.Context, rec *recorder) {
	t.Helper()
	// The gateway answers from its watch caches, which may still be catching
	// up after the node's loss (a watcher on a stream whose leader was the
	// lost node is re-created by its stall check): the cluster's status can
	// be Ready before the gateway's view of every machine is. Give the view
	// up to 30s to agree with itself; the checks below are then strict.
	var ms []*capnv1.Machine
	converged := func() bool {
		var err error
		if ms, err = d.client().Machines(ctx, "demo", client.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range ms {
			if m.GetSpec().GetVersion() != newVersion || m.GetStatus().GetPhase() != "Running" {
				return false
			}
			n++
		}
		total := 0
		for _, want := range pools {
			total += want.replicas
		}
		return n == total
	}
	viewStart := time.Now()
	// Not converged within 30s: the checks below say how.
	_ = testkit.Poll(30*time.Second, 100*time.Millisecond, func() error {
		if !converged() {
			return errors.New("not converged")
		}
		return nil
	})
	if d := time.Since(viewStart); d > 200*time.Millisecond {
		t.Logf("the gateway's view of the machines agreed with the status %s after it was Ready", d.Round(time.Millisecond))
	}
	byPool := map[string][]string{}
	names := map[string]bool{}
	for _, m := range ms {
		n := m.GetMetadata().GetName()
		if names[n] {
			t.Errorf("machine %s listed twice", n)
		}
		names[n] = true
		byPool[m.GetSpec().GetPool()] = append(byPool[m.GetSpec().GetPool()], n)
		if v := m.GetSpec().GetVersion(); v != newVersion {
			t.Errorf("machine %s on %s after the upgrade", n, v)
		}
		if p := m.GetStatus().GetPhase(); p != "Running" {
			t.Errorf("machine %s is %s, not Running", n, p)
		}
	}
	for pool, want := range pools {
		if got := len(byPool[pool]); got != want.replicas {
			t.Errorf("pool %s has %d machines %v, want %d", pool, got, byPool[pool], want.replicas)
		}
	}
	_, js, _ := d.c.Connect(natsconfig.Gateway, 0)
	kv, err := js.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	infra := map[string]bool{}
	lister, err := kv.ListKeysFiltered(ctx, "infra.sim.demo.>")
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Fatal(err)
	}
	if lister != nil {
		for k := range lister.Keys() {
			if m := strings.TrimPrefix(k, "infra.sim.demo."); m != events.ClusterObject {
				infra[m] = true
			}
		}
	}
	for n := range names {
		if !infra[n] {
			t.Errorf("machine %s has no infrastructure record", n)
		}
	}
	var orphans []string
	for n := range infra {
		if !names[n] {
			orphans = append(orphans, n)
		}
	}
	sort.Strings(orphans)
	if len(orphans) > 0 {
		t.Errorf("infrastructure without a machine (a duplicate or a leak): %v", orphans)
	}
	// The recorder's watcher may be catching up after the node's loss.
	_ = testkit.Poll(30*time.Second, 20*time.Millisecond, func() error { // the checks below say what is missing
		if !rec.has(names) {
			return errors.New("missing")
		}
		return nil
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.live) != len(names) {
		t.Errorf("the recorder has %d live machines, the gateway %d", len(rec.live), len(names))
	}
	for pool, want := range pools {
		if rec.maxTotal[pool] > want.replicas+want.surge {
			t.Errorf("pool %s had %d machines at once, more than replicas %d + maxSurge %d", pool, rec.maxTotal[pool], want.replicas, want.surge)
		}
	}
	t.Logf("end state: %d machines (%d created over the test), %d infrastructure records, at most %v machines per pool at once",
		len(names), len(rec.seen), len(infra), rec.maxTotal)
}

// checkDurables checks that every durable consumer on the running nodes
// is one the rendered permissions declare: a durable the generator does
// not know of would be unprotected (the gateway's ordered consumers are
// denied only the declared ones) and its owner denied.
func (d *deployment) checkDurables(t *testing.T) {
	t.Helper()
	declared := map[string]bool{}
	for _, ds := range d.c.D.Durables() {
		for _, c := range ds {
			declared[c.Stream+"/"+c.Name] = true
		}
	}
	found := map[string]bool{}
	for i := range d.c.D.Servers {
		s := d.c.Server(i)
		if s == nil {
			continue
		}
		info, err := s.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true, Config: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range info.AccountDetails {
			for _, st := range a.Streams {
				for _, c := range st.Consumer {
					if c.Config != nil && c.Config.Durable != "" {
						found[st.Name+"/"+c.Config.Durable] = true
					}
				}
			}
		}
	}
	var names []string
	for k := range found {
		names = append(names, k)
		if !declared[k] {
			t.Errorf("durable consumer %s is not declared in deploy/natsconfig", k)
		}
	}
	slices.Sort(names)
	t.Logf("durable consumers on the server, all declared: %v", names)
}
