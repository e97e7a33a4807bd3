package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/tests/internal/harness"
)

const (
	oldVersion = "v1.33.4"
	newVersion = "v1.34.2"
)

func setReplicas(pool string, n int32) func(*capnv1.Cluster) {
	return func(c *capnv1.Cluster) {
		for _, p := range c.Spec.WorkerPools {
			if p.Name == pool {
				p.Replicas = n
			}
		}
	}
}

func upgrade(c *capnv1.Cluster) {
	c.Spec.KubernetesVersion = newVersion
	for _, p := range c.Spec.WorkerPools {
		p.Version = newVersion
	}
}

func TestClusterLifecycle(t *testing.T) {
	w := newWorld(t)
	w.startAll()
	rec := w.record("demo")

	start := time.Now()
	w.Apply(harness.Demo)
	w.WaitReady("demo", 60*time.Second)
	t.Logf("create: 9 machines Ready in %s", time.Since(start).Round(time.Millisecond))
	w.expectPools(rec, map[string]int{"control-plane": 3, "md-0": 3, "md-1": 3})

	for _, n := range []int32{5, 1} {
		start = time.Now()
		w.MutateCluster("demo", setReplicas("md-0", n))
		w.WaitReady("demo", 60*time.Second)
		t.Logf("scale md-0 to %d in %s", n, time.Since(start).Round(time.Millisecond))
		w.expectPools(rec, map[string]int{"control-plane": 3, "md-0": int(n), "md-1": 3})
	}

	mark := rec.mark()
	start = time.Now()
	w.MutateCluster("demo", upgrade)
	w.WaitReady("demo", 120*time.Second)
	t.Logf("upgrade %s → %s in %s", oldVersion, newVersion, time.Since(start).Round(time.Millisecond))
	w.expectPools(rec, map[string]int{"control-plane": 3, "md-0": 1, "md-1": 3})
	snaps := rec.since(mark)
	checkRollout(t, snaps, map[string]bounds{
		"control-plane": {replicas: 3, surge: 1, unavailable: 0},
		"md-0":          {replicas: 1, surge: 1, unavailable: 0},
		"md-1":          {replicas: 3, surge: 2, unavailable: 1},
	})
	checkControlPlaneFirst(t, snaps)
	for pool, names := range rec.names() {
		for _, n := range names {
			if m := rec.machine(n); m.GetSpec().GetVersion() != newVersion {
				t.Errorf("pool %s machine %s still on %s", pool, n, m.GetSpec().GetVersion())
			}
		}
	}

	start = time.Now()
	w.MutateCluster("demo", func(c *capnv1.Cluster) { c.Metadata.DeletionTimestamp = timestamppb.Now() })
	w.waitGone("demo", 60*time.Second)
	t.Logf("delete in %s", time.Since(start).Round(time.Millisecond))
}

type bounds struct{ replicas, surge, unavailable int }

// checkRollout asserts, at every recorded moment of the rollout, that no
// pool had more than replicas+maxSurge machines nor fewer than
// replicas-maxUnavailable available ones.
func checkRollout(t *testing.T, snaps []snapshot, want map[string]bounds) {
	t.Helper()
	maxTotal, minAvail := map[string]int{}, map[string]int{}
	for pool := range want {
		minAvail[pool] = 1 << 30
	}
	for _, s := range snaps {
		for pool, b := range want {
			pc := s.Pools[pool]
			maxTotal[pool] = max(maxTotal[pool], pc.Total)
			minAvail[pool] = min(minAvail[pool], pc.Available)
			if pc.Total > b.replicas+b.surge {
				t.Errorf("rev %d: pool %s has %d machines, more than replicas %d + maxSurge %d (%s)", s.Revision, pool, pc.Total, b.replicas, b.surge, pc)
			}
			if pc.Available < b.replicas-b.unavailable {
				t.Errorf("rev %d: pool %s has %d available, fewer than replicas %d - maxUnavailable %d (%s)", s.Revision, pool, pc.Available, b.replicas, b.unavailable, pc)
			}
		}
	}
	for pool, b := range want {
		t.Logf("rollout %s over %d changes: at most %d machines (bound %d), at least %d available (bound %d)",
			pool, len(snaps), maxTotal[pool], b.replicas+b.surge, minAvail[pool], b.replicas-b.unavailable)
	}
}

// checkControlPlaneFirst asserts that no worker on the new version existed
// before the whole control plane ran the new version.
func checkControlPlaneFirst(t *testing.T, snaps []snapshot) {
	t.Helper()
	cpDone := -1
	for i, s := range snaps {
		cp := s.Pools["control-plane"]
		if cpDone < 0 && cp.Total == 3 && cp.AvailByVersion[newVersion] == 3 {
			cpDone = i
		}
		for pool, pc := range s.Pools {
			if pool != "control-plane" && pc.ByVersion[newVersion] > 0 && cpDone < 0 {
				t.Fatalf("rev %d: pool %s has a %s machine before the control plane finished upgrading (%s)", s.Revision, pool, newVersion, cp)
			}
		}
	}
	if cpDone < 0 {
		t.Fatal("the control plane never finished upgrading")
	}
	t.Logf("control plane finished upgrading at change %d of %d, before any worker was replaced", cpDone, len(snaps))
}

func (w *world) expectPools(rec *recorder, want map[string]int) {
	w.t.Helper()
	// The recorder may trail the status by a change or two.
	if err := testkit.Poll(5*time.Second, 20*time.Millisecond, func() error {
		got := rec.names()
		ok := len(got) == len(want)
		for pool, n := range want {
			ok = ok && len(got[pool]) == n
		}
		if !ok {
			return fmt.Errorf("machines per pool %v, want counts %v", got, want)
		}
		return nil
	}); err != nil {
		w.t.Fatal(err)
	}
	total := 0
	for _, n := range want {
		total += n
	}
	if got := len(harness.Keys(w.t, w.Observed, "infra.sim.demo.")); got != total+1 {
		w.t.Fatalf("%d sim infrastructure records, want %d machines + the cluster's", got, total+1)
	}
}

// waitGone waits until nothing of the cluster is left: no cluster key, no
// machine, no infrastructure record, no secrets.
func (w *world) waitGone(name string, timeout time.Duration) {
	w.t.Helper()
	secrets, err := w.JS.KeyValue(context.Background(), "secrets")
	if err != nil {
		w.t.Fatal(err)
	}
	left := func() []string {
		var out []string
		for _, p := range []string{"cluster." + name, "machine." + name + "."} {
			out = append(out, harness.Keys(w.t, w.Desired, p)...)
			out = append(out, harness.Keys(w.t, w.Observed, p)...)
		}
		out = append(out, harness.Keys(w.t, w.Observed, "infra.sim."+name+".")...)
		out = append(out, harness.Keys(w.t, w.Observed, "secrets."+name)...)
		for _, p := range []string{"pki." + name, "kubeconfig." + name, "bootstrap." + name + "."} {
			out = append(out, harness.Keys(w.t, secrets, p)...)
		}
		return out
	}
	if err := testkit.Poll(timeout, 50*time.Millisecond, func() error {
		if l := left(); len(l) > 0 {
			return fmt.Errorf("after %s these keys of %s are left: %v", timeout, name, l)
		}
		return nil
	}); err != nil {
		w.t.Fatal(err)
	}
}
