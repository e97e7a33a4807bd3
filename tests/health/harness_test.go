// Package health runs capn's health loop end to end on the sim provider:
// every service (planner, machine-manager, bootstrapper, sim provider,
// health-watcher, remediator, and the NPD bridge where a test needs it) as
// its own daemon.Run with its own NATS connection to one embedded
// nats-server, talking only through NATS — as separate programs would.
package health

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/sim"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/services/health-watcher"
	"github.com/capn-dev/capn/services/remediator"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// Test timing: fast heartbeats and short waits, so that each scenario
// takes seconds. The policies in the manifests use heartbeatGrace 2s.
const (
	heartbeatEvery = 500 * time.Millisecond
	rebootTimeout  = 3 * time.Second
	startupTimeout = 3 * time.Second
)

// world is one capn deployment on one embedded server
// (tests/internal/harness) with the health loop's test timing.
type world struct {
	*harness.System
	t      *testing.T
	mu     sync.Mutex
	silent map[string]bool // cluster.machine whose heartbeats the sim drops
	nodes  *store.Bucket[*capnv1.NodeHealth]
	rems   *store.Bucket[*capnv1.RemediationStatus]
	pub    *events.Publisher
}

func newWorld(t *testing.T) *world {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	w := &world{t: t, silent: map[string]bool{}}
	so := harness.TestSim()
	so.HeartbeatEvery = heartbeatEvery
	w.System = harness.New(t, harness.Options{Sim: &so, Services: map[string]func(*harness.Factory) daemon.Service{
		harness.Sim: func(f *harness.Factory) daemon.Service {
			return &quietSim{Service: f.Builtin(harness.Sim), silent: w.isSilent}
		},
		// The gateway and the planner refuse a node startup timeout under
		// 30s in a spec; the watcher's own default (a deployment setting)
		// is what a cluster without one gets, and it may be shorter.
		healthwatcher.Name: func(*harness.Factory) daemon.Service {
			return healthwatcher.New(healthwatcher.Config{Policy: policy.Defaults{NodeStartupTimeout: startupTimeout, MinNodeStartupTimeout: time.Second}})
		},
		remediator.Name: func(*harness.Factory) daemon.Service {
			return remediator.New(remediator.Config{Timing: remediator.Timing{RebootTimeout: rebootTimeout}})
		},
	}})
	w.nodes = store.NewBucket(w.Observed, func() *capnv1.NodeHealth { return new(capnv1.NodeHealth) })
	w.rems = store.NewBucket(w.Observed, func() *capnv1.RemediationStatus { return new(capnv1.RemediationStatus) })
	w.pub = events.NewPublisher(w.JS, "capn/tests/health")
	return w
}

// startAll starts every service but the gateway.
func (w *world) startAll() { w.StartAll() }

// silence makes the sim drop the heartbeats of a machine (true) or send
// them again (false): a node that never reports, or stops reporting.
func (w *world) silence(cluster, machine string, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.silent[cluster+"."+machine] = on
}

func (w *world) isSilent(cluster, machine string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.silent[cluster+"."+machine]
}

// apply writes a cluster as the gateway does and returns its name.
func (w *world) apply(yaml string) string {
	w.t.Helper()
	return w.Apply(yaml).GetMetadata().GetName()
}

// waitReady waits until the cluster's status is Ready for its generation,
// and shows where it stopped if it does not get there.
func (w *world) waitReady(name string, timeout time.Duration) {
	w.t.Helper()
	defer w.dumpOnFailure(name)
	defer func() {
		if w.t.Failed() {
			w.t.Logf("cluster status: %v", w.ClusterStatus(name))
		}
	}()
	w.WaitReady(name, timeout)
}

// machine is a desired machine with its observed status.
type machine struct {
	name   string
	spec   *capnv1.Machine
	status *capnv1.MachineStatus
}

func (m machine) uid() string    { return m.spec.GetMetadata().GetUid() }
func (m machine) deleting() bool { return m.spec.GetMetadata().GetDeletionTimestamp() != nil }
func (m machine) running() bool  { return !m.deleting() && m.status.GetPhase() == "Running" }
func (m machine) pool() string   { return m.spec.GetSpec().GetPool() }
func (m machine) condition(typ string) string {
	for _, c := range m.status.GetConditions() {
		if c.GetType() == typ {
			return c.GetStatus()
		}
	}
	return ""
}

// pool lists the machines of a pool of cluster, by name.
func (w *world) pool(cluster, pool string) []machine {
	w.t.Helper()
	es, err := w.Machines.List(context.Background(), "machine."+cluster+".")
	if err != nil {
		w.t.Fatal(err)
	}
	var out []machine
	for _, e := range es {
		if e.Value.GetSpec().GetPool() != pool {
			continue
		}
		st, _, _ := w.MachineStatuses.Get(context.Background(), e.Key)
		out = append(out, machine{name: strings.TrimPrefix(e.Key, "machine."+cluster+"."), spec: e.Value, status: st})
	}
	return out
}

// remediation is the pool's remediation status (nil if none yet).
func (w *world) remediation(cluster, pool string) *capnv1.RemediationStatus {
	st, _, err := w.rems.Get(context.Background(), keys.Remediation(cluster, pool))
	if err != nil {
		return nil
	}
	return st
}

func blockedCondition(st *capnv1.RemediationStatus) *capnv1.Condition {
	for _, c := range st.GetConditions() {
		if c.GetType() == remediator.ConditionRemediationBlocked {
			return c
		}
	}
	return nil
}

// records lists a pool's remediation records of machine as "action/outcome".
func records(st *capnv1.RemediationStatus, machine string) []string {
	var out []string
	for _, r := range st.GetHistory() {
		if r.GetMachine() == machine {
			out = append(out, r.GetAction()+"/"+r.GetOutcome())
		}
	}
	return out
}

// conditions publishes a node-problem-detector-shaped report for a machine,
// as capn-npd-bridge does.
func (w *world) conditions(cluster, machine, typ, status, reason string, transition time.Time) {
	w.t.Helper()
	now := time.Now()
	nc := &capnv1.NodeConditions{Cluster: cluster, Machine: machine, Source: "test", Time: timestamppb.New(now),
		Conditions: []*capnv1.NodeCondition{{Type: typ, Status: status, Reason: reason, Message: "test",
			LastTransitionTime: timestamppb.New(transition), LastHeartbeatTime: timestamppb.New(now)}}}
	id := fmt.Sprintf("test.conditions.%s.%s.%d", cluster, machine, now.UnixNano())
	if _, err := w.pub.Publish(context.Background(), events.HealthSubject(cluster, machine, "conditions"), events.TypeNodeConditions, id, nc); err != nil {
		w.t.Fatal(err)
	}
}

// quietSim wraps the sim provider's service so that the heartbeats of
// machines a test silenced are dropped on their way to JetStream: a node
// that never reports, or stops reporting, while its infrastructure runs.
// (The sim has no such option of its own yet.)
type quietSim struct {
	daemon.Service
	silent func(cluster, machine string) bool
}

func (q *quietSim) Run(ctx context.Context, d *daemon.Deps) error {
	dd := *d
	dd.JS = quietJS{JetStream: d.JS, silent: q.silent}
	return q.Service.Run(ctx, &dd)
}

type quietJS struct {
	jetstream.JetStream
	silent func(cluster, machine string) bool
}

func (q quietJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	toks := strings.Split(m.Subject, ".")
	if len(toks) == 5 && toks[4] == sim.HeartbeatKind && q.silent(toks[2], toks[3]) {
		return droppedAck{m: m}, nil
	}
	return q.JetStream.PublishMsgAsync(m, opts...)
}

// droppedAck answers a dropped publish as if JetStream had stored it.
type droppedAck struct{ m *nats.Msg }

func (d droppedAck) Ok() <-chan *jetstream.PubAck {
	c := make(chan *jetstream.PubAck, 1)
	c <- &jetstream.PubAck{}
	return c
}
func (d droppedAck) Err() <-chan error { return make(chan error) }
func (d droppedAck) Msg() *nats.Msg    { return d.m }

// dumpOnFailure logs the cluster's machines, node health and remediation
// statuses if the test failed, to show where the loop stopped.
func (w *world) dumpOnFailure(cluster string) {
	if !w.t.Failed() {
		return
	}
	ctx := context.Background()
	es, _ := w.Machines.List(ctx, "machine."+cluster+".")
	for _, e := range es {
		st, _, _ := w.MachineStatuses.Get(ctx, e.Key)
		h, _, _ := w.nodes.Get(ctx, "node."+strings.TrimPrefix(e.Key, "machine."))
		w.t.Logf("%s uid=%s deleting=%v phase=%s conditions=%v\n  node: healthy=%v reasons=%v last_heartbeat=%v drift=%v",
			e.Key, e.Value.GetMetadata().GetUid(), e.Value.GetMetadata().GetDeletionTimestamp() != nil, st.GetPhase(), st.GetConditions(),
			h.GetHealthy(), h.GetUnhealthyReasons(), h.GetLastHeartbeat().AsTime(), h.GetDrift())
	}
	rs, _ := w.rems.List(ctx, "remediation."+cluster+".")
	for _, r := range rs {
		w.t.Logf("%s: %v", r.Key, r.Value)
	}
}

// observe calls check with the cluster's machines after every change of a
// desired machine or its status (one KV watcher per bucket), until the
// returned stop is called: a test can hold an invariant at every revision,
// which polling could miss.
func (w *world) observe(cluster string, check func(map[string]machine)) (stop func()) {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	specs := map[string]*capnv1.Machine{}
	sts := map[string]*capnv1.MachineStatus{}
	var mu sync.Mutex
	loaded := 0 // watchers past their initial values: check only a whole picture
	done := make(chan struct{}, 2)
	watch := func(kv jetstream.KeyValue, apply func(name string, e jetstream.KeyValueEntry)) {
		kw, err := kv.Watch(ctx, "machine."+cluster+".*")
		if err != nil {
			w.t.Error(err)
			done <- struct{}{}
			return
		}
		go func() {
			defer func() { done <- struct{}{} }()
			for e := range kw.Updates() {
				mu.Lock()
				if e == nil {
					loaded++
					mu.Unlock()
					continue
				}
				name := strings.TrimPrefix(e.Key(), "machine."+cluster+".")
				apply(name, e)
				if loaded < 2 {
					mu.Unlock()
					continue
				}
				snap := map[string]machine{}
				for n, s := range specs {
					snap[n] = machine{name: n, spec: s, status: sts[n]}
				}
				check(snap)
				mu.Unlock()
			}
		}()
	}
	watch(w.Desired, func(name string, e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			delete(specs, name)
			return
		}
		m, err := store.Decode(e.Value(), func() *capnv1.Machine { return new(capnv1.Machine) })
		if err == nil {
			specs[name] = m
		}
	})
	watch(w.Observed, func(name string, e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			delete(sts, name)
			return
		}
		st, err := store.Decode(e.Value(), func() *capnv1.MachineStatus { return new(capnv1.MachineStatus) })
		if err == nil {
			sts[name] = st
		}
	})
	return func() {
		cancel()
		for range 2 {
			select {
			case <-done:
			case <-time.After(5 * time.Second):
			}
		}
	}
}
