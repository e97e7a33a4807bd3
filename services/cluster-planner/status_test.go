package clusterplanner

import (
	"context"
	"errors"
	"testing"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// A replica whose cache has not reached the status's last write must not
// write the status: its view is older than the one that wrote it, and the
// status would go back (here: 4 ready machines back to 3).
func TestStatusNeverWrittenFromAnOlderView(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx := context.Background()
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	statuses := store.NewBucket(kv, store.New[capnv1.ClusterStatus]())
	status := func(ready int32) *capnv1.ClusterStatus {
		return &capnv1.ClusterStatus{Phase: capnv1.ClusterProvisioning.Wire(), WorkerPools: []*capnv1.PoolStatus{{Name: "md-0", Desired: 8, Ready: ready}}}
	}
	// The other replica wrote 4 ready, from a view at its revision.
	rev, err := statuses.Create(ctx, keys.Cluster("c1"), status(4))
	if err != nil {
		t.Fatal(err)
	}
	var cacheRev uint64
	s := &Service{cfg: New(Config{}).cfg, pub: events.NewPublisher(js, "capn/test"), statuses: statuses, observedRev: func() uint64 { return cacheRev }}

	cacheRev = rev - 1 // this replica's cache has not seen that write
	if err := s.writeStatus(ctx, "c1", status(2), status(3), ""); !errors.Is(err, errCacheBehind) {
		t.Fatalf("write from a cache behind the status: %v, want errCacheBehind", err)
	}
	if got, _, _ := statuses.Get(ctx, keys.Cluster("c1")); got.GetWorkerPools()[0].GetReady() != 4 {
		t.Fatalf("status went back to %d ready", got.GetWorkerPools()[0].GetReady())
	}

	cacheRev = rev // caught up: its view includes everything the other had
	if err := s.writeStatus(ctx, "c1", status(4), status(5), ""); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := statuses.Get(ctx, keys.Cluster("c1")); got.GetWorkerPools()[0].GetReady() != 5 {
		t.Fatalf("status has %d ready, want 5", got.GetWorkerPools()[0].GetReady())
	}
}
