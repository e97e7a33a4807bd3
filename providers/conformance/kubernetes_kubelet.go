package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// kubeWorkerPool is the worker pool of kubeManifest.
const kubeWorkerPool = "workers"

var (
	remediatorOnce sync.Once
	remediatorDir  string
	remediatorErr  error
)

// StartRemediator runs capn's remediator against natsURL until the test
// ends. It is no core program: the Kubernetes check runs it only for the
// step that is about a repair.
func StartRemediator(t *testing.T, natsURL string) {
	t.Helper()
	dir := os.Getenv(BinDirEnv)
	if dir == "" {
		remediatorOnce.Do(func() { remediatorDir, remediatorErr = BuildTemp("remediator") })
		if remediatorErr != nil {
			t.Fatal(remediatorErr)
		}
		dir = remediatorDir
	}
	StartProgram(t, filepath.Join(dir, "remediator"), []string{"CAPN_LOG_LEVEL=info", "CAPN_LOG_FORMAT=json"},
		"--nats-url="+natsURL, "--http-addr=off")
}

// kubeletStops is the Kubernetes check's step "a worker whose kubelet
// stops (its Node NotReady) is repaired", as Cluster API's
// MachineHealthCheck repairs a Machine whose Node is NotReady: the
// provider's Kubernetes.StopKubelet freezes a worker's kubelet (kwok for
// kube-local) while the machine and its capn-node live on; the
// controller-manager marks the Node Ready=Unknown, the health-watcher
// reads it and judges the machine unhealthy once kubeManifest's workers
// policy (Ready=Unknown for 30s) says so, and the remediator (started for
// this step only, in a subtest, so that the steps after it run without
// it) reboots or replaces it. The cluster is Ready again, with exactly one
// Ready Node per Running machine. It returns the Running machines after.
func (s *suite) kubeletStops(t *testing.T, e *Env, parent *KubeCluster, machines map[string]KubeMachine) map[string]KubeMachine {
	if s.f.Kubernetes.StopKubelet == nil {
		t.Log("Kubernetes.StopKubelet is nil: skipping the step \"a worker whose kubelet stops (its Node NotReady) is repaired\"")
		return machines
	}
	after := machines
	ok := t.Run("KubeletStops", func(t *testing.T) {
		k := *parent // the harness fails this subtest, not its parent
		k.T, k.Clusters = t, NewClusters(t, e.JS)
		after = kubeletStopsStep(t, e, &k, machines, s.f.Kubernetes.StopKubelet)
	})
	if !ok {
		t.FailNow()
	}
	return after
}

func kubeletStopsStep(t *testing.T, e *Env, k *KubeCluster, machines map[string]KubeMachine, stop func(*testing.T, *Env, string, string)) map[string]KubeMachine {
	ctx := context.Background()
	healths := store.NewBucket(k.Clusters.observed, store.New[capnv1.NodeHealth]())
	rems := store.NewBucket(k.Clusters.observed, store.New[capnv1.RemediationStatus]())
	var victim string
	for name, m := range machines {
		if m.Pool == kubeWorkerPool && (victim == "" || name < victim) {
			victim = name
		}
	}
	if victim == "" {
		t.Fatalf("no worker among %v", kubeNames(machines))
	}
	health := func() *capnv1.NodeHealth {
		h, _, err := healths.Get(ctx, keys.Node(k.Name, victim))
		if err != nil {
			return nil
		}
		return h
	}
	nodeReady := func() (string, string) {
		out, err := k.Kubectl("get", "node", victim, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason}`)
		if err != nil {
			return "error", err.Error()
		}
		f := strings.Fields(out)
		for len(f) < 2 {
			f = append(f, "")
		}
		return f[0], f[1]
	}
	until := func(what string, timeout, every time.Duration, check func() error) time.Time {
		t.Helper()
		if err := natstest.Poll(timeout, every, check); err != nil {
			t.Fatalf("%s: not within %s; last: %v", what, timeout, err)
		}
		return time.Now()
	}
	// The health-watcher reads the worker's Node: its Ready is in the record.
	until("the health-watcher recording Node "+victim+"'s Ready=True", time.Minute, 250*time.Millisecond, func() error {
		h := health()
		if i := slices.IndexFunc(h.GetConditions(), func(c *capnv1.NodeCondition) bool {
			return c.GetType() == "Ready" && c.GetSource() == "kubernetes" && c.GetStatusValue() == capnv1.ConditionTrue
		}); i < 0 || !h.GetHealthy() {
			return fmt.Errorf("record of %s: healthy %v, conditions %v", victim, h.GetHealthy(), h.GetConditions())
		}
		return nil
	})
	StartRemediator(t, e.NATSURL)

	stopped := time.Now()
	stop(t, e, k.Name, victim)
	var status, reason string
	notReady := until("Node "+victim+" NotReady (kubectl)", 3*time.Minute, time.Second, func() error {
		if status, reason = nodeReady(); status != "Unknown" && status != "False" {
			return fmt.Errorf("kubectl: Node %s Ready=%s %s", victim, status, reason)
		}
		return nil
	})
	t.Logf("Node %s Ready=%s (%s) %.1fs after its kubelet stopped", victim, status, reason, notReady.Sub(stopped).Seconds())

	// The record turns unhealthy for the Node's Ready, naming the Node; a
	// repair may already have cleared it, which its record then shows.
	fromNode := func(msg string) bool {
		return strings.Contains(msg, "Node "+victim+" Ready=") && strings.Contains(msg, "read from the workload cluster")
	}
	repair := func() *capnv1.RemediationRecord {
		st, _, err := rems.Get(ctx, keys.Remediation(k.Name, kubeWorkerPool))
		if err != nil {
			return nil
		}
		for _, r := range slices.Backward(st.GetHistory()) {
			if r.GetMachine() == victim && r.GetTime().AsTime().After(stopped) {
				return r
			}
		}
		return nil
	}
	var why string
	unhealthy := until("NodeHealth of "+victim+" unhealthy for its Node's Ready", 3*time.Minute, 250*time.Millisecond, func() error {
		h := health()
		for _, r := range h.GetUnhealthyReasons() {
			if !h.GetHealthy() && r.GetType() == "Ready" && fromNode(r.GetMessage()) {
				why = r.GetMessage()
				return nil
			}
		}
		if r := repair(); r != nil && fromNode(r.GetReason()) {
			why = r.GetReason()
			return nil
		}
		return fmt.Errorf("healthy %v, reasons %v", h.GetHealthy(), h.GetUnhealthyReasons())
	})
	t.Logf("NodeHealth of %s unhealthy: %s", victim, why)
	var rec *capnv1.RemediationRecord
	repaired := until("a repair of "+victim+" by the remediator", 3*time.Minute, 250*time.Millisecond, func() error {
		if rec = repair(); rec == nil {
			return errors.New("no remediation record of " + victim)
		}
		return nil
	})
	if !fromNode(rec.GetReason()) {
		t.Errorf("the repair's reason %q does not name Node %s's Ready", rec.GetReason(), victim)
	}
	t.Logf("repair of %s: %s (%s) at %s", victim, rec.GetAction(), rec.GetReason(), rec.GetTime().AsTime().Format(time.RFC3339Nano))

	// Repaired: the cluster Ready, every Running machine healthy, exactly
	// one Ready Node per Running machine.
	var after map[string]KubeMachine
	Poll(t, fmt.Sprintf("%d Running machines, every one healthy", len(machines)), 8*time.Minute, func() error {
		after = k.Running()
		if len(after) != len(machines) {
			return fmt.Errorf("%d Running machines %v, want %d", len(after), kubeNames(after), len(machines))
		}
		var sick []string
		for name := range after {
			if h, _, err := healths.Get(ctx, keys.Node(k.Name, name)); err == nil && !h.GetHealthy() {
				sick = append(sick, fmt.Sprintf("%s: %v", name, h.GetUnhealthyReasons()))
			}
		}
		if len(sick) > 0 {
			sort.Strings(sick)
			return errors.New("unhealthy: " + strings.Join(sick, "; "))
		}
		return nil
	})
	k.Clusters.WaitReady(k.Name, 5*time.Minute)
	readyAgain := k.WaitNodes(after, 3*time.Minute)
	outcome := "rebooted"
	if m, ok := after[victim]; !ok || m.UID != machines[victim].UID {
		outcome = "replaced"
		for name, m := range after {
			if _, was := machines[name]; !was || m.UID != machines[name].UID {
				outcome += " by " + name
			}
		}
	} else if rec.GetAction() != "reboot" {
		t.Fatalf("the repair was %s, yet %s kept its uid", rec.GetAction(), victim)
	}
	t.Logf("kubelet of %s stopped → Node %s %.1fs → NodeHealth unhealthy %.1fs → repair (%s, %s) %.1fs → cluster Ready, exactly one Ready Node per Running machine %.1fs; step %.1fs",
		victim, status, notReady.Sub(stopped).Seconds(), unhealthy.Sub(notReady).Seconds(), rec.GetAction(), outcome,
		repaired.Sub(unhealthy).Seconds(), readyAgain.Sub(repaired).Seconds(), time.Since(stopped).Seconds())
	return after
}
