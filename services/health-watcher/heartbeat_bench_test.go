package healthwatcher

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
	"github.com/capn-dev/capn/schemas/keys"
)

// BenchmarkSteadyHeartbeat is the handler's cost of the heartbeat a steady
// node sends every 30 s, most of the health-watcher's idle work: the
// record holds a recent heartbeat saying the same, so nothing is written.
// The records sit in real watch caches over an embedded server.
func BenchmarkSteadyHeartbeat(b *testing.B) {
	ctx := context.Background()
	const machines = 100
	now := time.Now()
	s, last := steadyCluster(b, machines, "worker", now, Config{})

	msgs := make([]*events.Message, machines)
	for i := range msgs {
		name := fmt.Sprintf("w-%d", i)
		ev, err := events.New("capn-node", events.TypeNodeHeartbeat, "hb-"+name,
			&capnv1.NodeHeartbeat{Cluster: "c1", Machine: name, Ready: true, NodeName: name, KubeletVersion: "v1.37.2"})
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = &events.Message{Event: &ev, Subject: keys.Health("c1", name, "heartbeat"), Metadata: &jetstream.MsgMetadata{}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		m := msgs[i%machines]
		m.Metadata.Timestamp = now.Add(time.Duration(i+1) * time.Millisecond)
		if err := s.onHealth(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if n := s.observed.Revision(); n != last {
		b.Fatalf("steady heartbeats wrote: observed at revision %d, was %d", n, last)
	}
}

// steadyCluster is a health-watcher over real watch caches on an embedded
// server, holding cluster c1 with machines w-0… of role, each Running with
// a node record that heard a ready heartbeat at now; last is the observed
// bucket's revision after the records were written.
func steadyCluster(tb testing.TB, machines int, role string, now time.Time, cfg Config) (*Service, uint64) {
	tb.Helper()
	ctx := context.Background()
	srv := natstest.Start(tb)
	_, js := srv.Connect(tb)
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		tb.Fatal(err)
	}
	bucket := func(name string) jetstream.KeyValue {
		kv, err := js.KeyValue(ctx, name)
		if err != nil {
			tb.Fatal(err)
		}
		return kv
	}
	desiredKV, observedKV := bucket(events.BucketDesired), bucket(events.BucketObserved)
	var last uint64
	put := func(kv jetstream.KeyValue, key string, m proto.Message) {
		data, err := store.Encode(m)
		if err != nil {
			tb.Fatal(err)
		}
		if last, err = kv.Put(ctx, key, data); err != nil {
			tb.Fatal(err)
		}
	}
	created := timestamppb.New(now.Add(-time.Hour))
	pool := "workers"
	if role == "control-plane" {
		pool = policy.ControlPlanePool
	}
	put(desiredKV, keys.Cluster("c1"), &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "c1", CreationTimestamp: created},
		Spec: &capnv1.ClusterSpec{ControlPlane: &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 1}}})
	for i := range machines {
		name := fmt.Sprintf("w-%d", i)
		put(desiredKV, keys.Machine("c1", name), &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: name, CreationTimestamp: created},
			Spec: &capnv1.MachineSpec{Cluster: "c1", Pool: pool, Role: role, Provider: "sim"}})
		put(observedKV, keys.Machine("c1", name), &capnv1.MachineStatus{Phase: "Running", ProviderId: "sim://c1/" + name, PhaseSince: created})
		put(observedKV, keys.Node("c1", name), &capnv1.NodeHealth{Cluster: "c1", Machine: name, Ready: true, NodeName: name,
			KubeletVersion: "v1.37.2", LastHeartbeat: timestamppb.New(now), Updated: timestamppb.New(now), Healthy: true,
			Conditions: []*capnv1.NodeCondition{{Type: "Ready", Status: "True", Reason: "KubeletReady", Source: "capn-node",
				LastHeartbeatTime: timestamppb.New(now), LastTransitionTime: created}}})
	}
	s := New(cfg)
	s.desired, s.observed = store.NewCache(desiredKV, store.CacheOptions{}), store.NewCache(observedKV, store.CacheOptions{})
	cacheCtx, stop := context.WithCancel(ctx)
	tb.Cleanup(stop)
	for _, c := range []*store.Cache{s.desired, s.observed} {
		if err := c.Start(cacheCtx); err != nil {
			tb.Fatal(err)
		}
	}
	natstest.WaitFor(tb, 10*time.Second, "caches loaded", func() bool { return s.observed.Revision() >= last })
	s.nodes = store.NewBucket(observedKV, store.New[capnv1.NodeHealth]())
	s.beats, s.facts = newTracker(), newFacts(s.desired, s.observed)
	s.metrics, s.queue, s.pending = newMetrics(prometheus.NewRegistry()), reconcile.NewQueue(), newPending()
	return s, last
}
