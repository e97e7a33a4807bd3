// Package fleet runs a rollout of a class revision across a fleet of sim
// clusters end to end: every service (the fleet-manager with a fake clock
// for soaks), the gateway, one real embedded nats-server.
package fleet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/client"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/fleet-manager/wave"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// clock is the fleet-manager's fake clock: soaks pass when the test says.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// The class: a sim control plane of one machine, no pools (the cheapest
// cluster), a health policy that judges KernelDeadlock at once.
const classV1 = `apiVersion: capn.dev/v1alpha1
kind: ClusterClass
metadata: {name: standard}
spec:
  template:
    kubernetesVersion: v1.34.2
    controlPlane: {provider: sim, replicas: 1}
    health:
      unhealthyConditions:
      - {type: KernelDeadlock, status: "True", timeout: 0s}
  variables:
  - {name: size, type: string, default: small, enum: [small, large], paths: [/controlPlane/template/parameters/size]}
`

const fleetSize = 100

// TestRolloutInWavesHaltsOnCanaryFault is the proof: 100 clusters
// of one class in 4 label groups; revision 2 rolled out canary 2, then
// 10%, 50%, the rest, soaking 10 (fake) minutes between waves. One canary's
// machine reports KernelDeadlock (through the health subject, as NPD
// would): the health-watcher judges it unhealthy, the remediator records
// it (blocked: 1 of 1 machines), the rollout halts with the reason and the
// other 98 clusters stay at revision 1, also as time passes. With the
// fault gone and the rollout resumed, it completes.
func TestRolloutInWavesHaltsOnCanaryFault(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	clk := &clock{now: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)}
	sys := harness.New(t, harness.Options{Now: clk.Now, FleetTick: 50 * time.Millisecond})
	sys.StartAll(harness.All...)
	sys.Start(harness.Gateway)
	cl := sys.Client()
	ctx := context.Background()
	pub := events.NewPublisher(sys.JS, "test")

	if _, _, err := cl.ApplyClass(ctx, []byte(classV1)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	names := make([]string, fleetSize)
	for i := range names {
		names[i] = fmt.Sprintf("f%03d", i)
		m := fmt.Sprintf("apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: %s, labels: {group: g%d}}\nspec:\n  topology: {class: standard}\n", names[i], i%4)
		if _, _, err := cl.Apply(ctx, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, 60*time.Second, "every cluster Ready", func() bool {
		for _, n := range names {
			if !sys.IsReady(n) {
				return false
			}
		}
		return true
	})
	t.Logf("%d clusters of class standard revision 1 Ready in %s", fleetSize, time.Since(start).Round(time.Millisecond))

	v2 := strings.Replace(classV1, "kubernetesVersion: v1.34.2", "kubernetesVersion: v1.34.3", 1)
	if c, _, err := cl.ApplyClass(ctx, []byte(v2)); err != nil || c.GetStatus().GetRevision() != 2 {
		t.Fatalf("class revision 2: %v %v", c.GetStatus(), err)
	}
	// Nothing moves by itself: a new revision waits for a rollout.
	if got := revisions(t, sys, names); got[1] != fleetSize {
		t.Fatalf("revisions %v before any rollout, want all %d at 1", got, fleetSize)
	}
	ro := `apiVersion: capn.dev/v1alpha1
kind: Rollout
metadata: {name: to-r2}
spec:
  clusterSelector:
    matchExpressions: [{key: group, operator: In, values: [g0, g1, g2, g3]}]
  change: {class: standard}
  waves: ["2", "10%", "50%", "100%"]
  soak: 10m
  readyTimeout: 30m
`
	// The fleet-manager's status, read from the bucket (polled: the
	// gateway's rate limit is for users); the API serves the same record.
	status := func() *capnv1.RolloutStatus {
		e, err := sys.Observed.Get(ctx, keys.Rollout("to-r2"))
		if err != nil {
			return nil
		}
		st, err := store.Decode(e.Value(), store.New[capnv1.RolloutStatus]())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	t.Cleanup(func() {
		if t.Failed() {
			st := status()
			t.Logf("rollout: phase %s wave %d halt %q", st.GetPhase(), st.GetCurrentWave(), st.GetHaltReason())
			for _, w := range st.GetWaves() {
				t.Logf("wave %d %s soakUntil %v", w.GetIndex(), w.GetState(), w.GetSoakUntil().AsTime())
			}
			for _, c := range st.GetClusters() {
				if c.GetState() != wave.ClusterPending && c.GetState() != wave.ClusterDone {
					t.Logf("cluster %s %s %s", c.GetName(), c.GetState(), c.GetMessage())
				}
			}
		}
	})
	if r, err := cl.CreateRollout(ctx, []byte(ro)); err != nil || r.GetSpec().GetChange().GetClassRevision() != 2 {
		t.Fatalf("rollout: %v %v", r, err)
	}
	rolloutStart := time.Now()

	// The canaries f000 and f001 move and come up Ready at revision 2.
	natstest.WaitFor(t, 30*time.Second, "canaries Ready at revision 2", func() bool {
		st := status()
		return stateOf(st, "f000") == wave.ClusterReady && stateOf(st, "f001") == wave.ClusterReady
	})
	t.Logf("canary wave Ready at revision 2 in %s", time.Since(rolloutStart).Round(time.Millisecond))

	// The fault: f001's machine reports KernelDeadlock and keeps it.
	ms, err := cl.Machines(ctx, "f001", client.ListOptions{})
	if err != nil || len(ms) == 0 {
		t.Fatalf("f001 machines: %v %v", ms, err)
	}
	var faulty []string
	for _, m := range ms {
		if m.GetMetadata().GetDeletionTimestamp() == nil {
			faulty = append(faulty, m.GetMetadata().GetName())
		}
	}
	condition := func(status string) {
		for _, m := range faulty {
			now := time.Now()
			nc := &capnv1.NodeConditions{Cluster: "f001", Machine: m, Source: "test", Time: timestamppb.New(now),
				Conditions: []*capnv1.NodeCondition{{Type: "KernelDeadlock", Status: status, Reason: "DockerHung", Message: "test fault",
					LastTransitionTime: timestamppb.New(now), LastHeartbeatTime: timestamppb.New(now)}}}
			id := fmt.Sprintf("test.conditions.f001.%s.%d", m, now.UnixNano())
			if _, err := pub.Publish(ctx, events.HealthSubject("f001", m, "conditions"), events.TypeNodeConditions, id, nc); err != nil {
				t.Fatal(err)
			}
		}
	}
	condition("True")
	natstest.WaitFor(t, 30*time.Second, "rollout Halted for f001", func() bool {
		st := status()
		return st.GetPhase() == wave.PhaseHalted && strings.Contains(st.GetHaltReason(), "f001")
	})
	r, err := cl.Rollout(ctx, "to-r2")
	if err != nil || r.GetStatus().GetHaltReason() == "" {
		t.Fatalf("the API does not show the halt: %v %v", r.GetStatus(), err)
	}
	t.Logf("halted: %s", r.GetStatus().GetHaltReason())
	// A halt is final until resumed: an hour passes, the rollout is
	// planned again (a pause changes its generation; the status says
	// when a plan saw it), nothing moves.
	for range 6 {
		clk.Advance(10 * time.Minute)
	}
	paused, err := cl.RolloutAction(ctx, "to-r2", client.RolloutPause)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, "a plan after the hour", func() bool {
		return status().GetObservedGeneration() == paused.GetMetadata().GetGeneration()
	})
	if got := revisions(t, sys, names); got[2] != 2 || got[1] != fleetSize-2 {
		t.Fatalf("revisions %v while halted, want 2 at revision 2 and %d untouched", got, fleetSize-2)
	}
	if st := status(); st.GetPhase() != wave.PhaseHalted {
		t.Fatalf("phase %s an hour after the halt, want Halted", st.GetPhase())
	}

	// The fault goes; resume; the rollout completes.
	condition("False")
	natstest.WaitFor(t, 30*time.Second, "f001 healthy again", func() bool {
		rs, err := sys.Observed.Get(ctx, keys.Remediation("f001", "control-plane"))
		if err != nil {
			return true // no record: nothing unhealthy
		}
		r, err := store.Decode(rs.Value(), store.New[capnv1.RemediationStatus]())
		if err != nil {
			return false
		}
		return r.GetUnhealthy() == 0
	})
	if _, err := cl.RolloutAction(ctx, "to-r2", client.RolloutResume); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	waveDone := map[int32]time.Duration{}
	natstest.WaitFor(t, 80*time.Second, "rollout Completed", func() bool {
		st := status()
		for _, w := range st.GetWaves() {
			if w.GetState() == wave.WaveDone {
				if _, ok := waveDone[w.GetIndex()]; !ok {
					waveDone[w.GetIndex()] = time.Since(resumed)
				}
			}
		}
		// The soak passes: the clock moves to just past the soak the
		// status shows, if it is not there yet. A status read before the
		// fleet-manager wrote the next wave shows a soak already passed
		// (advancing again would age the next wave's changes past
		// readyTimeout); one read before the resume shows the soak the
		// halt ended, and the fleet-manager then soaks wave 0 anew.
		if w := currentWave(st); w != nil && w.GetState() == wave.WaveSoaking {
			advancePast(clk, w.GetSoakUntil().AsTime())
		}
		return st.GetPhase() == wave.PhaseCompleted
	})
	if got := revisions(t, sys, names); got[2] != fleetSize {
		t.Fatalf("revisions %v after the rollout, want all %d at 2", got, fleetSize)
	}
	var sizes []int
	for _, w := range status().GetWaves() {
		sizes = append(sizes, len(w.GetClusters()))
	}
	if fmt.Sprint(sizes) != "[2 8 40 50]" {
		t.Fatalf("wave sizes %v, want [2 8 40 50]", sizes)
	}
	t.Logf("resumed and completed in %s; waves done after %v (wall time, soaks on the fake clock)", time.Since(resumed).Round(time.Millisecond), waveDone)
}

// advancePast moves the clock a minute past t unless it is there already.
func advancePast(c *clock, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.now.After(t) {
		c.now = t.Add(time.Minute)
	}
}

func currentWave(st *capnv1.RolloutStatus) *capnv1.RolloutWave {
	i := int(st.GetCurrentWave())
	if i < len(st.GetWaves()) {
		return st.GetWaves()[i]
	}
	return nil
}

func stateOf(st *capnv1.RolloutStatus, name string) string {
	for _, c := range st.GetClusters() {
		if c.GetName() == name {
			return c.GetState()
		}
	}
	return ""
}

// revisions counts the clusters per pinned class revision (desired).
func revisions(t *testing.T, sys *harness.System, names []string) map[int64]int {
	t.Helper()
	out := map[int64]int{}
	for _, n := range names {
		c, _, err := sys.Clusters.Get(context.Background(), keys.Cluster(n))
		if err != nil {
			t.Fatal(err)
		}
		out[c.GetSpec().GetTopology().GetRevision()]++
	}
	return out
}

// TestRolloutWaitsForMaintenanceWindows: a class revision a rollout brings
// is a change capn starts on its own, so a cluster with maintenance
// windows is moved only inside one (the fleet-manager reads each cluster's
// spec.maintenance); the others move at once, and the status says when the
// window opens.
func TestRolloutWaitsForMaintenanceWindows(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	// Sunday noon UTC; the window opens on Monday at 03:00 UTC.
	clk := &clock{now: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)}
	opens := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	sys := harness.New(t, harness.Options{Now: clk.Now, FleetTick: 50 * time.Millisecond})
	sys.StartAll(harness.All...)
	sys.Start(harness.Gateway)
	cl := sys.Client()
	ctx := context.Background()
	if _, _, err := cl.ApplyClass(ctx, []byte(classV1)); err != nil {
		t.Fatal(err)
	}
	names := []string{"w0", "w1", "w2"}
	for _, n := range names {
		m := fmt.Sprintf("apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: %s, labels: {group: w}}\nspec:\n  topology: {class: standard}\n", n)
		if n == "w0" {
			m += "  maintenance:\n    windows: [{days: [Mon], start: \"03:00\", end: \"04:00\"}]\n"
		}
		if _, _, err := cl.Apply(ctx, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, 60*time.Second, "every cluster Ready", func() bool {
		for _, n := range names {
			if !sys.IsReady(n) {
				return false
			}
		}
		return true
	})
	v2 := strings.Replace(classV1, "kubernetesVersion: v1.34.2", "kubernetesVersion: v1.34.3", 1)
	if _, _, err := cl.ApplyClass(ctx, []byte(v2)); err != nil {
		t.Fatal(err)
	}
	ro := "apiVersion: capn.dev/v1alpha1\nkind: Rollout\nmetadata: {name: windowed}\nspec:\n  clusterSelector: {matchLabels: {group: w}}\n  change: {class: standard}\n  waves: [\"100%\"]\n  soak: 1m\n  readyTimeout: 30m\n"
	if _, err := cl.CreateRollout(ctx, []byte(ro)); err != nil {
		t.Fatal(err)
	}
	status := func() *capnv1.RolloutStatus {
		e, err := sys.Observed.Get(ctx, keys.Rollout("windowed"))
		if err != nil {
			return nil
		}
		st, err := store.Decode(e.Value(), store.New[capnv1.RolloutStatus]())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	natstest.WaitFor(t, 30*time.Second, "w1 and w2 Ready at revision 2, w0 waiting for its window", func() bool {
		st := status()
		return stateOf(st, "w1") == wave.ClusterReady && stateOf(st, "w2") == wave.ClusterReady &&
			stateOf(st, "w0") == wave.ClusterPending && st.GetNextWindow().AsTime().Equal(opens)
	})
	if got := revisions(t, sys, names); got[1] != 1 || got[2] != 2 {
		t.Fatalf("revisions %v outside w0's window, want w0 alone at 1", got)
	}
	clk.Advance(opens.Sub(clk.Now()) + 30*time.Second)
	natstest.WaitFor(t, 30*time.Second, "rollout Completed once the window opened", func() bool {
		st := status()
		if w := currentWave(st); w != nil && w.GetState() == wave.WaveSoaking {
			advancePast(clk, w.GetSoakUntil().AsTime())
		}
		return st.GetPhase() == wave.PhaseCompleted
	})
	if got := revisions(t, sys, names); got[2] != 3 {
		t.Fatalf("revisions %v after the window, want all 3 at 2", got)
	}
}
