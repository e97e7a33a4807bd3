package security

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner"
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// Finding 3: a pool with replicas: 1000000 was accepted (200).
func TestReplicasBoundedAtTheEdge(t *testing.T) {
	sys := newSystem(t, harness.Options{})
	sys.Start(harness.Gateway)
	c := sys.Client()
	ctx := context.Background()
	_, _, err := c.Apply(ctx, []byte(clusterYAML("huge", 1000000)))
	if !client.IsInvalid(err) {
		t.Fatalf("apply of a pool of 1000000 replicas: got %v, want 422", err)
	}
	var e *client.Error
	_ = asError(err, &e)
	found := false
	for _, f := range e.Problem.Errors {
		if f.Path == "spec.workerPools[0].replicas" && f.Value == "1000000" && strings.HasPrefix(f.Reason, "must be at most 1000 per pool") {
			found = true
		}
	}
	if !found {
		t.Errorf("the problem does not name spec.workerPools[0].replicas and the bound: %+v", e.Problem)
	}
	if _, err := c.Get(ctx, "huge"); !client.IsNotFound(err) {
		t.Errorf("the refused cluster was stored: %v", err)
	}
	// Six pools of 1000 are each within the bound, 6001 machines are not.
	_, _, err = c.Apply(ctx, []byte(clusterYAML("wide", 1000, 1000, 1000, 1000, 1000, 1000)))
	if !client.IsInvalid(err) || !strings.Contains(err.Error(), "must be at most 5000 per cluster") {
		t.Fatalf("apply of 6001 machines: got %v, want 422 naming the cluster bound", err)
	}
}

// Finding 3: one huge cluster held the planner (minutes of slot naming,
// then thousands of writes in one plan) and neither a scale-down nor a
// delete of it was carried out meanwhile. With one planner worker, so that
// nothing but the planner's fairness lets the small cluster in: a cluster
// at the bound (5000 machines) is being planned when a small one is
// applied; the small one gets its machines while the big one is still
// growing, and the big one's delete is carried out.
func TestHugeClusterTakesTurns(t *testing.T) {
	sys := newSystem(t, harness.Options{Services: map[string]func(*harness.Factory) daemon.Service{
		clusterplanner.Name: func(*harness.Factory) daemon.Service {
			return clusterplanner.New(clusterplanner.Config{Workers: 1})
		},
	}})
	sys.StartAll(clusterplanner.Name, harness.Sim, harness.Gateway)
	c := sys.Client()
	ctx := context.Background()
	mm := machineManager{t: t, sys: sys}

	const bigMachines = 5000
	if _, _, err := c.Apply(ctx, []byte(clusterYAML("big", 1000, 1000, 1000, 1000, 999))); err != nil {
		t.Fatalf("apply a cluster at the bound: %v", err)
	}
	mm.runControlPlane("big", time.Minute)
	natstest.WaitFor(t, time.Minute, "big's workers being created", func() bool { return len(mm.machines("big")) > 1 })

	if _, _, err := c.Apply(ctx, []byte(clusterYAML("small", 2))); err != nil {
		t.Fatal(err)
	}
	mm.runControlPlane("small", time.Minute)
	natstest.WaitFor(t, time.Minute, "small's 2 worker machines", func() bool { return len(mm.machines("small")) == 3 })
	if n := len(mm.machines("big")); n >= bigMachines {
		t.Fatalf("small got its machines only after big had all %d: the big cluster held the planner", n)
	} else {
		t.Logf("small has its machines while big has %d of %d", n, bigMachines)
	}

	if _, err := c.Delete(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	deleted := map[string]bool{}
	natstest.WaitFor(t, 2*time.Minute, "big deleted", func() bool {
		ms := mm.machines("big")
		for _, m := range ms {
			if n := m.GetMetadata().GetName(); m.GetMetadata().GetDeletionTimestamp() != nil && !deleted[n] {
				mm.set("big", n, "Deleted") // as the machine-manager would once its infrastructure is gone
				deleted[n] = true
			}
		}
		_, err := c.Get(ctx, "big")
		return len(ms) == 0 && client.IsNotFound(err)
	})
	if n := len(mm.machines("small")); n != 3 {
		t.Errorf("small has %d machine records after big's delete, want 3", n)
	}
}

// Finding 3, behind the edge: a spec over the bound that is already stored
// (an older gateway accepted it, or one with higher bounds) is not planned
// by the cluster-planner; its status says why, and its delete is carried
// out.
func TestStoredSpecOverBoundIsNotPlanned(t *testing.T) {
	sys := newSystem(t, harness.Options{})
	sys.StartAll(clusterplanner.Name, harness.Sim, harness.Gateway)
	c := sys.Client()
	ctx := context.Background()
	mm := machineManager{t: t, sys: sys}

	huge, err := manifest.Decode([]byte(clusterYAML("huge", 1000000)))
	if err != nil {
		t.Fatal(err)
	}
	manifest.Default(huge)
	huge.Metadata.Uid, huge.Metadata.Generation = "uid-huge", 1
	if _, err := sys.Clusters.Create(ctx, "cluster.huge", huge); err != nil {
		t.Fatal(err)
	}
	var msg string
	natstest.WaitFor(t, time.Minute, "huge Failed with a reason", func() bool {
		st := sys.ClusterStatus("huge")
		for _, cd := range st.GetConditions() {
			if cd.GetType() == "Ready" && cd.GetReason() == "InvalidSpec" {
				msg = cd.GetMessage()
			}
		}
		return st.GetPhase() == "Failed" && msg != ""
	})
	if !strings.Contains(msg, "spec.workerPools[0].replicas: 1000000: must be at most 1000 per pool") {
		t.Errorf("Ready condition: %q, want it to name the field and the bound", msg)
	}
	if n := len(mm.machines("huge")); n != 0 {
		t.Errorf("%d machines planned for a spec over the bound", n)
	}
	if _, err := c.Delete(ctx, "huge"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, time.Minute, "huge deleted", func() bool {
		_, err := c.Get(ctx, "huge")
		return client.IsNotFound(err)
	})
}
