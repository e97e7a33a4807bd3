package clusterplanner

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/daemon"
)

// TestPlannerFollowsTheControlPlaneRecord runs the planner service on a
// real nats-server with a hosted cluster: it sends the ensure command (on
// CAPN_CONTROLPLANES, with the desired cluster's revision), makes no
// machine while the record is missing, and — level-driven: the record's
// write alone wakes it — makes the workers once the record says the
// control plane is initialized at the cluster's version, with the status
// taken from the record.
func TestPlannerFollowsTheControlPlaneRecord(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx := context.Background()
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	desiredKV, err := js.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	observedKV, err := js.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	announcements := store.NewBucket(observedKV, store.New[capnv1.ProviderAnnouncement]())
	announce := func() {
		if _, _, err := announcements.Mutate(ctx, keys.Provider("sim"), func(*capnv1.ProviderAnnouncement, bool) (*capnv1.ProviderAnnouncement, error) {
			return &capnv1.ProviderAnnouncement{Name: "sim", Instance: "test", Time: timestamppb.Now()}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	announce()
	c := &capnv1.Cluster{ApiVersion: manifest.APIVersion, Kind: manifest.KindCluster,
		Metadata: &capnv1.ObjectMeta{Name: "h1", Uid: "h1-uid", Generation: 1, CreationTimestamp: timestamppb.Now()},
		Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2",
			ControlPlane: &capnv1.ControlPlaneSpec{Type: capnv1.ControlPlaneHosted, Replicas: 1},
			WorkerPools:  []*capnv1.WorkerPool{{Name: "md-0", Provider: "sim", Replicas: 2}}}}
	manifest.Default(c)
	rev, err := store.NewBucket(desiredKV, store.New[capnv1.Cluster]()).Create(ctx, keys.Cluster("h1"), c)
	if err != nil {
		t.Fatal(err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(runCtx, daemon.Config{Name: Name, NATS: daemon.NATSConfig{URL: srv.URL()}, ShutdownTimeout: 5 * time.Second},
			New(Config{}), daemon.WithoutHTTP())
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("planner: %v", err)
		}
	})

	stream, err := js.Stream(ctx, events.StreamControlPlanes)
	if err != nil {
		t.Fatal(err)
	}
	var cmd capnv1.ControlPlaneCommand
	natstest.WaitFor(t, 15*time.Second, "the ensure command", func() bool {
		m, err := stream.GetLastMsgForSubject(ctx, "capn.controlplane.hosted.ensure.h1")
		if err != nil {
			return false
		}
		e, err := events.FromMsg(m.Header, m.Data)
		if err != nil || events.DataAs(e, &cmd) != nil {
			t.Fatalf("command %v: %v", m, err)
		}
		if id := m.Header.Get("Nats-Msg-Id"); id != "controlplane-h1-"+itoa(rev)+"-ensure" || e.Type() != events.TypeControlPlaneCommand+".ensure" {
			t.Fatalf("command id %q type %q", id, e.Type())
		}
		return true
	})
	if cmd.GetGeneration() != int64(rev) || cmd.GetSpec().GetType() != capnv1.ControlPlaneHosted || cmd.GetKubernetesVersion() != "v1.34.2" {
		t.Errorf("command %v, want generation %d", &cmd, rev)
	}
	statuses := store.NewBucket(observedKV, store.New[capnv1.ClusterStatus]())
	natstest.WaitFor(t, 10*time.Second, "the status waiting for the record", func() bool {
		st, _, err := statuses.Get(ctx, keys.Cluster("h1"))
		return err == nil && strings.Contains(conditionOf(st, "ControlPlaneReady").GetReason(), "NoControlPlaneRecord")
	})
	machines := store.NewBucket(desiredKV, store.New[capnv1.Machine]())
	if ms, err := machines.List(ctx, keys.MachinesOf("h1")); err != nil || len(ms) != 0 {
		t.Fatalf("machines %d (%v) before the control plane is initialized", len(ms), err)
	}

	// Nothing else changes: only the record's write can wake the plan
	// that makes the workers (the next resync is 30s away).
	rec := &capnv1.ControlPlaneRecord{Cluster: "h1", Implementation: capnv1.ControlPlaneHosted, ObservedGeneration: int64(rev), Initialized: true,
		Endpoint: &capnv1.Endpoint{Host: "10.0.0.7", Port: 16443}, Version: "v1.34.2", Replicas: 1, ReadyReplicas: 1,
		Conditions: []*capnv1.Condition{{Type: "Ready", Status: "True", Reason: "APIServersReady", Message: "1 of 1 API servers answer"}}}
	if _, err := store.NewBucket(observedKV, store.New[capnv1.ControlPlaneRecord]()).Create(ctx, keys.ControlPlane("h1"), rec); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, "the workers made once the record says initialized", func() bool {
		ms, err := machines.List(ctx, keys.MachinesOf("h1"))
		return err == nil && len(ms) == 2
	})
	natstest.WaitFor(t, 10*time.Second, "the status from the record", func() bool {
		st, _, err := statuses.Get(ctx, keys.Cluster("h1"))
		return err == nil && st.GetControlPlaneEndpoint().GetHost() == "10.0.0.7" && conditionOf(st, "ControlPlaneReady").GetReason() == "APIServersReady"
	})
	ms, _ := machines.List(ctx, keys.MachinesOf("h1"))
	for _, m := range ms {
		if m.Value.GetSpec().GetRole() != "worker" {
			t.Errorf("made %s, a %s machine", m.Key, m.Value.GetSpec().GetRole())
		}
	}
}

func conditionOf(st *capnv1.ClusterStatus, typ string) *capnv1.Condition {
	for _, c := range st.GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
