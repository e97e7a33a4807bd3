package controlplanehosted

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/daemon"
)

// What ensure cannot make is said in the record's Ready condition, with
// the reason, and nothing runs; a cluster of another type gets no record.
// (The life of a control plane on the real binaries is tests/hosted's.)
// testService runs the service (no binaries) on a fresh nats-server.
type testService struct {
	js       jetstream.JetStream
	clusters *store.Bucket[*capnv1.Cluster]
	records  *store.Bucket[*capnv1.ControlPlaneRecord]
	dataDir  string
	pub      *events.Publisher
}

func runService(t *testing.T) testService {
	ns := natstest.Start(t)
	nc, js := ns.Connect(t)
	ctx := context.Background()
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	des, _ := js.KeyValue(ctx, events.BucketDesired)
	obs, _ := js.KeyValue(ctx, events.BucketObserved)
	ts := testService{js: js, clusters: store.NewBucket(des, store.New[capnv1.Cluster]()),
		records: store.NewBucket(obs, store.New[capnv1.ControlPlaneRecord]()), dataDir: t.TempDir(),
		pub: events.NewPublisher(js, "capn/test")}
	svc := New(Config{DataDir: ts.dataDir, KubeBin: t.TempDir()})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(rctx, daemon.Config{Name: Name, HTTPAddr: daemon.HTTPOff, ShutdownTimeout: 5 * time.Second},
			svc, daemon.WithConn(nc), daemon.WithoutHTTP(), daemon.WithLogger(zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ts
}

// A cluster of a name whose hosted control plane an earlier cluster left
// here (deleted with the Orphan policy: nothing told this service) is
// another cluster: ensure refuses it, saying what to do, and touches
// nothing of the earlier one.
func TestEnsureRefusesAnEarlierClustersControlPlane(t *testing.T) {
	ts := runService(t)
	ctx := context.Background()
	dir := filepath.Join(ts.dataDir, "again")
	st, err := newState("again", "v1.99.0", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	st.UID = "uid-earlier"
	if err := (layout{dir: dir}).save(st); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "state.json"))
	rev, err := ts.clusters.Create(ctx, keys.Cluster("again"), &capnv1.Cluster{ApiVersion: "capn.dev/v1alpha1", Kind: "Cluster",
		Metadata: &capnv1.ObjectMeta{Name: "again", Uid: "uid-now", CreationTimestamp: timestamppb.Now()},
		Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.99.0",
			ControlPlane: &capnv1.ControlPlaneSpec{Replicas: 1, Type: capnv1.ControlPlaneHosted}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.pub.Publish(ctx, keys.ControlPlaneCommand(capnv1.ControlPlaneHosted, keys.ControlPlaneEnsure, "again"),
		"dev.capn.controlplane.ensure", "ensure-again", &capnv1.ControlPlaneCommand{Cluster: "again", Generation: int64(rev)}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "again: Ready False, EarlierControlPlane", func() bool {
		r, _, err := ts.records.Get(ctx, keys.ControlPlane("again"))
		if err != nil {
			return false
		}
		c := conditions.Get(r.GetConditions(), ConditionReady)
		return c.GetStatus() == "False" && c.GetReason() == "EarlierControlPlane" &&
			strings.Contains(c.GetMessage(), "uid uid-earlier; this one is uid-now") && strings.Contains(c.GetMessage(), dir)
	})
	if after, _ := os.ReadFile(filepath.Join(dir, "state.json")); string(after) != string(before) {
		t.Fatalf("the earlier state.json changed:\n%s\n%s", before, after)
	}
}

func TestEnsureRefusalsAreRecorded(t *testing.T) {
	ts := runService(t)
	ctx := context.Background()
	js, clusters, records, dataDir, pub := ts.js, ts.clusters, ts.records, ts.dataDir, ts.pub
	revs := map[string]int64{}
	for _, c := range []struct {
		name, typ string
		replicas  int32
	}{{"nobins", capnv1.ControlPlaneHosted, 1}, {"five", capnv1.ControlPlaneHosted, 5}, {"onmachines", capnv1.ControlPlaneMachines, 1}} {
		rev, err := clusters.Create(ctx, keys.Cluster(c.name), &capnv1.Cluster{ApiVersion: "capn.dev/v1alpha1", Kind: "Cluster",
			Metadata: &capnv1.ObjectMeta{Name: c.name, CreationTimestamp: timestamppb.Now()},
			Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.99.0",
				ControlPlane: &capnv1.ControlPlaneSpec{Replicas: c.replicas, Type: c.typ, Provider: "sim"}}})
		if err != nil {
			t.Fatal(err)
		}
		revs[c.name] = int64(rev)
		if _, err := pub.Publish(ctx, keys.ControlPlaneCommand(capnv1.ControlPlaneHosted, keys.ControlPlaneEnsure, c.name),
			"dev.capn.controlplane.ensure", "ensure-"+c.name, &capnv1.ControlPlaneCommand{Cluster: c.name, Generation: int64(rev)}); err != nil {
			t.Fatal(err)
		}
	}
	ready := func(cluster string) *capnv1.Condition {
		r, _, err := records.Get(ctx, keys.ControlPlane(cluster))
		if err != nil {
			return nil
		}
		for _, c := range r.GetConditions() {
			if c.GetType() == ConditionReady {
				return c
			}
		}
		return nil
	}
	testkit.WaitFor(t, 10*time.Second, "nobins: Ready False, BinariesMissing", func() bool {
		c := ready("nobins")
		return c != nil && c.GetStatus() == "False" && c.GetReason() == "BinariesMissing" && strings.Contains(c.GetMessage(), "make kube")
	})
	testkit.WaitFor(t, 10*time.Second, "five: Ready False, InvalidReplicas", func() bool {
		c := ready("five")
		return c != nil && c.GetStatus() == "False" && c.GetReason() == "InvalidReplicas" && strings.Contains(c.GetMessage(), "1 or 3")
	})
	// A refusal answers the revision it refused (the planner shows it, not
	// "still updating"); a passing problem answers none.
	for name, want := range map[string]int64{"five": revs["five"], "nobins": 0} {
		if r, _, err := records.Get(ctx, keys.ControlPlane(name)); err != nil || r.GetObservedGeneration() != want {
			t.Errorf("%s: observedGeneration %d (%v), want %d", name, r.GetObservedGeneration(), err, want)
		}
	}
	// The machines cluster's command was settled (terminated) without a
	// record: wait until only nobins' (retried with backoff) is unsettled.
	cons, err := js.Consumer(ctx, events.StreamControlPlanes, Name)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "every command settled", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending <= 1
	})
	if _, _, err := records.Get(ctx, keys.ControlPlane("onmachines")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a machines cluster got a hosted record: %v", err)
	}
	if entries, _ := os.ReadDir(dataDir); len(entries) != 0 {
		t.Fatalf("data dirs made for refused clusters: %v", entries)
	}
}
