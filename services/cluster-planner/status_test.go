package clusterplanner

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
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

// Counts alone are rewritten at most every StatusCoalesce; news (here the
// phase) is written at once, and the counts with it.
func TestStatusCountsCoalesced(t *testing.T) {
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
	now := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	cfg := New(Config{StatusCoalesce: time.Second, Now: func() time.Time { return now }}).cfg
	s := &Service{cfg: cfg, pub: events.NewPublisher(js, "capn/test"), statuses: statuses, observedRev: func() uint64 { return 1 << 62 }}
	status := func(phase capnv1.ClusterPhase, ready int32) *capnv1.ClusterStatus {
		return &capnv1.ClusterStatus{Phase: phase.Wire(), Updated: timestamppb.New(now),
			Conditions:  []*capnv1.Condition{{Type: "Ready", Status: "False", Reason: "MachinesNotReady", Message: fmt.Sprintf("%d of 8 ready", ready)}},
			WorkerPools: []*capnv1.PoolStatus{{Name: "md-0", Desired: 8, Replicas: 8, Ready: ready}}}
	}
	stored := func() int32 {
		got, _, err := statuses.Get(ctx, keys.Cluster("c1"))
		if err != nil {
			t.Fatal(err)
		}
		return got.GetWorkerPools()[0].GetReady()
	}
	prov := capnv1.ClusterProvisioning
	if err := s.writeStatus(ctx, "c1", nil, status(prov, 1), ""); err != nil {
		t.Fatal(err)
	}
	// 300 ms later, one more machine ready: held for the rest of the second.
	now = now.Add(300 * time.Millisecond)
	var later coalesced
	if err := s.writeStatus(ctx, "c1", status(prov, 1), status(prov, 2), ""); !errors.As(err, &later) || later.wait != 700*time.Millisecond {
		t.Fatalf("a counts-only change 300ms after the last write: %v, want coalesced for 700ms", err)
	}
	if n := stored(); n != 1 {
		t.Fatalf("stored %d ready, want 1 (held)", n)
	}
	// A condition's reason is news: written at once.
	newsWith := func(ready int32) *capnv1.ClusterStatus {
		st := status(prov, ready)
		st.Conditions[0].Reason = "ControlPlaneNotReady"
		return st
	}
	news := newsWith(3)
	if err := s.writeStatus(ctx, "c1", status(prov, 1), news, ""); err != nil {
		t.Fatalf("a condition's new reason: %v, want written at once", err)
	}
	if n := stored(); n != 3 {
		t.Fatalf("stored %d ready, want 3", n)
	}
	// Counts again, then the phase: the phase goes at once.
	now = now.Add(100 * time.Millisecond)
	if err := s.writeStatus(ctx, "c1", news, newsWith(4), ""); !errors.As(err, &later) {
		t.Fatalf("counts-only: %v, want coalesced", err)
	}
	if err := s.writeStatus(ctx, "c1", news, status(capnv1.ClusterReady, 8), ""); err != nil {
		t.Fatalf("a new phase: %v, want written at once", err)
	}
	if n := stored(); n != 8 {
		t.Fatalf("stored %d ready, want 8", n)
	}
	// Once the interval passed, counts are written.
	now = now.Add(time.Second)
	if err := s.writeStatus(ctx, "c1", status(capnv1.ClusterReady, 8), status(capnv1.ClusterReady, 7), ""); err != nil {
		t.Fatalf("counts a second after the last write: %v, want written", err)
	}
	if n := stored(); n != 7 {
		t.Fatalf("stored %d ready, want 7", n)
	}
}

// A plan that creates machines leaves its status to the next plan (which
// counts them), once: never a first status, never a phase change, never
// two plans in a row, never a plan that creates nothing.
func TestStatusOfAPlanThatCreatesIsLeftToTheNext(t *testing.T) {
	s := New(Config{})
	provisioning := &capnv1.ClusterStatus{Phase: capnv1.ClusterProvisioning.Wire()}
	ready := &capnv1.ClusterStatus{Phase: capnv1.ClusterReady.Wire()}
	creates := plan.Result{Status: provisioning, Actions: []plan.Action{plan.CreateMachine{Machine: &capnv1.Machine{}}}}
	for _, tt := range []struct {
		name string
		old  *capnv1.ClusterStatus
		res  plan.Result
		want bool
	}{
		{"first status", nil, creates, false},
		{"phase change", ready, creates, false},
		{"creates, same phase", provisioning, creates, true},
		{"the next plan, creating again", provisioning, creates, false},
		{"creates again after a written status", provisioning, creates, true},
		{"no creates", provisioning, plan.Result{Status: provisioning, Actions: []plan.Action{plan.DeleteMachine{}}}, false},
	} {
		if got := s.deferStatus("c1", tt.old, tt.res); got != tt.want {
			t.Errorf("%s: deferred %v, want %v", tt.name, got, tt.want)
		}
	}
}

// The machines record, like the status, is never written from a view
// older than the record's last write: another replica's newer count (2
// ready) is not set back (to 1) by a replica whose cache lags.
func TestControlPlaneRecordNeverWrittenFromAnOlderView(t *testing.T) {
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
	records := store.NewBucket(kv, store.New[capnv1.ControlPlaneRecord]())
	rec := func(ready int32) *capnv1.ControlPlaneRecord {
		return &capnv1.ControlPlaneRecord{Cluster: "c1", Implementation: capnv1.ControlPlaneMachines, Initialized: true, Replicas: 3, ReadyReplicas: ready}
	}
	rev, err := records.Create(ctx, keys.ControlPlane("c1"), rec(2))
	if err != nil {
		t.Fatal(err)
	}
	var cacheRev uint64
	s := &Service{cfg: New(Config{}).cfg, records: records, observedRev: func() uint64 { return cacheRev }}
	ap := s.applier(&capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "c1"}}, nil)

	cacheRev = rev - 1
	if err := ap.WriteControlPlaneRecord(ctx, rec(1)); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := records.Get(ctx, keys.ControlPlane("c1")); got.GetReadyReplicas() != 2 {
		t.Fatalf("record went back to %d ready", got.GetReadyReplicas())
	}
	cacheRev = rev
	if err := ap.WriteControlPlaneRecord(ctx, rec(3)); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := records.Get(ctx, keys.ControlPlane("c1")); got.GetReadyReplicas() != 3 {
		t.Fatalf("record has %d ready, want 3", got.GetReadyReplicas())
	}
}
