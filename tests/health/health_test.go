package health

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn-npd-bridge/bridge"
	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/providers/sim"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/remediator"
)

// cluster is a manifest with cp control-plane machines, one worker pool
// md-0 of workers, and health lines under spec.health.
func cluster(name string, cp, workers int, health string) string {
	return fmt.Sprintf(`apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: v1.34.2
  controlPlane:
    provider: sim
    replicas: %d
  health:
    heartbeatGrace: 2s
%s
  workerPools:
  - name: md-0
    provider: sim
    replicas: %d
`, name, cp, health, workers)
}

// kernelDeadlock is the policy of the NPD scenarios: KernelDeadlock=True
// at once, a silent node after 2s of grace + 2s.
const kernelDeadlock = `    unhealthyConditions:
    - {type: KernelDeadlock, status: "True", timeout: 0s}
    - {type: Ready, status: Unknown, timeout: 2s}`

// replaced waits until old is gone from its pool and the pool has n
// machines running and healthy again (the replacement may take another
// name: the planner creates it before it removes the old record), and
// returns how long that took from start.
func (w *world) replaced(cluster string, old machine, n int, start time.Time, timeout time.Duration) time.Duration {
	w.t.Helper()
	defer w.dumpOnFailure(cluster)
	natstest.WaitFor(w.t, timeout, "replacement of "+old.name+" running", func() bool {
		running := 0
		for _, m := range w.pool(cluster, old.pool()) {
			if m.uid() == old.uid() {
				return false
			}
			if m.running() && m.condition("NodeHealthy") != "False" {
				running++
			}
		}
		return running >= n
	})
	return time.Since(start)
}

func TestVanishedMachineIsReplaced(t *testing.T) {
	w := newWorld(t)
	w.startAll()
	name := w.apply(cluster("vanish", 1, 3, ""))
	w.waitReady(name, 60*time.Second)
	victim := w.pool(name, "md-0")[0]

	start := time.Now()
	id := "test.vanish." + victim.uid()
	if _, err := w.pub.Publish(context.Background(), events.ProviderSubject(sim.Name, "machine", sim.VerbVanish, name, victim.name), sim.TypeVanish, id,
		&capnv1.DeleteMachine{Cluster: name, Machine: victim.name}); err != nil {
		t.Fatal(err)
	}
	took := w.replaced(name, victim, 3, start, 30*time.Second)
	t.Logf("infrastructure vanished: %s replaced, pool running again in %s (policy: at once)", victim.name, took.Round(time.Millisecond))
}

func TestSilentNodeReplacedAfterStartupTimeout(t *testing.T) {
	const startup = startupTimeout // the watcher's default in this test: the spec refuses less than 30s
	w := newWorld(t)
	w.startAll()
	name := w.apply(cluster("silent", 1, 2, ""))
	w.waitReady(name, 60*time.Second)
	// The next machine of md-0 takes ordinal 2: its node never reports.
	first := w.pool(name, "md-0")[0].name
	next := first[:strings.LastIndex(first, "-")] + "-2"
	w.silence(name, next, true)
	w.MutateCluster(name, func(c *capnv1.Cluster) { c.Spec.WorkerPools[0].Replicas = 3 })

	var silent machine
	natstest.WaitFor(t, 30*time.Second, next+" infrastructure ready", func() bool {
		for _, m := range w.pool(name, "md-0") {
			if m.name == next && m.status.GetInfrastructureReadyTime() != nil {
				silent = m
				return true
			}
		}
		return false
	})
	ready := silent.status.GetInfrastructureReadyTime().AsTime()
	natstest.WaitFor(t, 30*time.Second, next+" replaced", func() bool {
		for _, m := range w.pool(name, "md-0") {
			if m.uid() == silent.uid() {
				return m.deleting()
			}
		}
		return true
	})
	after := time.Since(ready)
	w.silence(name, next, false) // the machine in the refilled slot reports
	if after < startup {
		t.Fatalf("replaced %s after infrastructure ready, before the %s startup timeout", after, startup)
	}
	st := w.remediation(name, "md-0")
	if recs := records(st, next); len(recs) == 0 || !strings.HasPrefix(recs[0], remediator.ActionReplace) ||
		!strings.Contains(st.GetHistory()[0].GetReason(), "NodeStartupTimeout") {
		t.Fatalf("history of %s: %v", next, st.GetHistory())
	}
	t.Logf("node never reported: %s replaced %s after its infrastructure was ready (startup timeout %s)", next, after.Round(time.Millisecond), startup)
	w.replaced(name, silent, 3, time.Now(), 30*time.Second)
}

// fakeNPD serves node-problem-detector's metrics as NPD v1.36.0 does with
// the kernel monitor; deadlock flips KernelDeadlock.
type fakeNPD struct {
	deadlock atomic.Bool
	srv      *httptest.Server
}

func newFakeNPD(t *testing.T) *fakeNPD {
	f := &fakeNPD{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		v := 0
		if f.deadlock.Load() {
			v = 1
		}
		fmt.Fprintf(w, "# TYPE problem_counter counter\nproblem_counter{reason=\"DockerHung\"} %d\nproblem_counter{reason=\"TaskHung\"} %d\n"+
			"# TYPE problem_gauge gauge\nproblem_gauge{reason=\"DockerHung\",type=\"KernelDeadlock\"} %d\n", v, v, v)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// deadlockScenario runs the bridge for victim against NPD's metrics at
// url, calls trigger (which makes NPD report KernelDeadlock), and checks
// the repair ladder: NodeHealthy=False, a reboot, then — the deadlock
// outliving the reboot — a replacement.
func deadlockScenario(t *testing.T, w *world, name string, victim machine, url string, trigger func()) {
	t.Helper()
	w.StartService(bridge.Name, bridge.NewService(bridge.Config{URL: url, Cluster: name, Machine: victim.name, Interval: 200 * time.Millisecond}))
	start := time.Now()
	trigger()
	natstest.WaitFor(t, 30*time.Second, victim.name+" rebooted", func() bool {
		return slices.ContainsFunc(records(w.remediation(name, "md-0"), victim.name), func(r string) bool { return strings.HasPrefix(r, remediator.ActionReboot) })
	})
	rebooted := time.Since(start)
	defer w.dumpOnFailure(name)
	natstest.WaitFor(t, 10*time.Second, victim.name+" NodeHealthy=False in its status", func() bool {
		for _, m := range w.pool(name, "md-0") {
			if m.name == victim.name && m.uid() == victim.uid() {
				return m.condition("NodeHealthy") == "False"
			}
		}
		return false
	})
	natstest.WaitFor(t, 30*time.Second, victim.name+" replaced after the reboot did not help", func() bool {
		recs := records(w.remediation(name, "md-0"), victim.name)
		return slices.Contains(recs, remediator.ActionReboot+"/"+remediator.OutcomeFailed) &&
			slices.ContainsFunc(recs, func(r string) bool { return strings.HasPrefix(r, remediator.ActionReplace) })
	})
	replacedAt := time.Since(start)
	w.Stop(bridge.Name) // the node is gone; so is its bridge
	if replacedAt-rebooted < rebootTimeout-time.Second {
		t.Fatalf("replaced %s after the reboot, before the reboot timeout %s", replacedAt-rebooted, rebootTimeout)
	}
	t.Logf("KernelDeadlock: %s rebooted after %s, replaced after %s (reboot timeout %s); history %v", victim.name,
		rebooted.Round(time.Millisecond), replacedAt.Round(time.Millisecond), rebootTimeout, records(w.remediation(name, "md-0"), victim.name))
	w.replaced(name, victim, 3, start, 30*time.Second)
}

func TestKernelDeadlockRebootThenReplace(t *testing.T) {
	w := newWorld(t)
	w.startAll()
	name := w.apply(cluster("deadlock", 1, 3, kernelDeadlock))
	w.waitReady(name, 60*time.Second)
	npd := newFakeNPD(t)
	deadlockScenario(t, w, name, w.pool(name, "md-0")[0], npd.srv.URL, func() { npd.deadlock.Store(true) })
}

func TestHalfPoolFailureIsNotRemediated(t *testing.T) {
	w := newWorld(t)
	w.startAll()
	name := w.apply(cluster("half", 1, 4, kernelDeadlock))
	w.waitReady(name, 60*time.Second)
	pool := w.pool(name, "md-0")
	for _, m := range pool[:2] {
		w.conditions(name, m.name, "KernelDeadlock", "True", "DockerHung", time.Now())
	}
	var msg string
	natstest.WaitFor(t, 20*time.Second, "md-0 RemediationBlocked", func() bool {
		c := blockedCondition(w.remediation(name, "md-0"))
		msg = c.GetMessage()
		return c.GetStatus() == "True" && c.GetReason() == remediator.BlockedTooManyUnhealthy
	})
	if !strings.Contains(msg, "2 of 4 machines unhealthy (50%)") || !strings.Contains(msg, "maxUnhealthy 40% of 4 = 1") {
		t.Fatalf("the condition does not say why with the numbers: %q", msg)
	}
	// Hold: nothing is touched while half the pool is down.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range w.pool(name, "md-0") {
			if m.deleting() || m.uid() != uidOf(pool, m.name) {
				t.Fatalf("%s was touched", m.name)
			}
		}
		if h := w.remediation(name, "md-0").GetHistory(); len(h) > 0 {
			t.Fatalf("a repair was recorded: %v", h)
		}
		time.Sleep(100 * time.Millisecond) //sleep-ok: the poll of a 3s hold in which nothing may be touched
	}
	t.Logf("half of md-0 down: RemediationBlocked=True %s: %s", remediator.BlockedTooManyUnhealthy, msg)
}

func uidOf(ms []machine, name string) string {
	for _, m := range ms {
		if m.name == name {
			return m.uid()
		}
	}
	return ""
}

func TestControlPlaneQuorum(t *testing.T) {
	w := newWorld(t)
	w.startAll()
	name := w.apply(cluster("quorum", 3, 1, kernelDeadlock+"\n    maxUnhealthy: \"100%\""))
	w.waitReady(name, 90*time.Second)
	cps := w.pool(name, "control-plane")
	if len(cps) != 3 {
		t.Fatalf("%d control-plane machines", len(cps))
	}
	a, b := cps[0], cps[1]

	// Two of three members down: repairing either would cost etcd its quorum.
	t1 := time.Now()
	w.conditions(name, a.name, "KernelDeadlock", "True", "DockerHung", t1)
	w.conditions(name, b.name, "KernelDeadlock", "True", "DockerHung", t1)
	var msg string
	natstest.WaitFor(t, 20*time.Second, "control plane RemediationBlocked by quorum", func() bool {
		c := blockedCondition(w.remediation(name, "control-plane"))
		msg = c.GetMessage()
		return c.GetStatus() == "True" && c.GetReason() == remediator.BlockedControlPlaneQuorum
	})
	if !strings.Contains(msg, "would leave 1 healthy of 2 control-plane members; etcd quorum needs 2") {
		t.Fatalf("message %q", msg)
	}
	time.Sleep(2 * time.Second) //sleep-ok: a blocked repair leaves nothing to wait for; 2s of the remediator's checks
	for _, m := range w.pool(name, "control-plane") {
		if m.deleting() {
			t.Fatalf("%s deleted while two of three members were down", m.name)
		}
	}
	t.Logf("two of three control-plane members down: %s", msg)

	// One member down: it is repaired, and the control plane never has
	// fewer than two healthy members meanwhile.
	w.conditions(name, b.name, "KernelDeadlock", "False", "KernelHasNoDeadlock", time.Now())
	natstest.WaitFor(t, 20*time.Second, b.name+" healthy again", func() bool {
		for _, m := range w.pool(name, "control-plane") {
			if m.name == b.name {
				return m.condition("NodeHealthy") == "True"
			}
		}
		return false
	})
	var mu sync.Mutex
	minHealthy, maxDeleting := 3, 0
	stop := w.observe(name, func(ms map[string]machine) {
		healthy, deleting := 0, 0
		for _, m := range ms {
			if m.pool() != "control-plane" {
				continue
			}
			switch {
			case m.deleting():
				deleting++
			case m.running() && m.condition("NodeHealthy") != "False":
				healthy++
			}
		}
		mu.Lock()
		defer mu.Unlock()
		minHealthy, maxDeleting = min(minHealthy, healthy), max(maxDeleting, deleting)
	})
	took := w.replaced(name, a, 3, time.Now(), 60*time.Second)
	stop()
	mu.Lock()
	defer mu.Unlock()
	if maxDeleting > 1 || minHealthy < 2 {
		t.Fatalf("control plane went below quorum: at most %d deleting at once, at least %d healthy", maxDeleting, minHealthy)
	}
	t.Logf("one member down: %s repaired in %s (%v); healthy members never below %d, deleting at once at most %d",
		a.name, took.Round(time.Millisecond), records(w.remediation(name, "control-plane"), a.name), minHealthy, maxDeleting)
}
