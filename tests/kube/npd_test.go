package kube_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/tests/internal/npdtest"
)

// npdClusterManifest: kube-local on the process provider, 1 control plane
// and 1 worker; KernelDeadlock=True is unhealthy at once, and a pool of one
// may be repaired (maxUnhealthy 100%).
const npdClusterManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  bootstrap:
    provider: kube-local
  health:
    unhealthyConditions:
    - {type: Ready, status: Unknown, timeout: 5m}
    - {type: Ready, status: "False", timeout: 5m}
    - {type: KernelDeadlock, status: "True", timeout: 0s}
    maxUnhealthy: 100%%
  controlPlane:
    provider: process
    replicas: 1
  workerPools:
  - name: workers
    provider: process
    replicas: 1
`

// TestNPDKubernetesExporterDrivesARepair runs the real node-problem-detector
// with its Kubernetes exporter against a real cluster capn made (1 control
// plane, 1 worker on the process provider): a kernel "task docker:1234
// blocked for more than 120 seconds." line makes NPD set KernelDeadlock=True
// on the worker's Node, the health-watcher reads it from the API server
// into the machine's NodeHealth, the remediator repairs the machine (a
// reboot first, by the policy), and the cluster is Ready again with a
// Ready Node. The NPD of a rebooted node starts again on a new boot's log
// (KernelDeadlock=False); a replaced machine's Node goes with it.
func TestNPDKubernetesExporterDrivesARepair(t *testing.T) {
	bin := conformance.KubeBin(t, "")
	npdBin := npdtest.Binary(t)
	if testing.Short() {
		t.Skip("runs a capn deployment, a Kubernetes cluster and node-problem-detector; skipped with -short")
	}
	begin := time.Now()
	env := sdktest.New(t)
	c := conformance.StartCapn(t, env.Server.URL())
	startProcessProvider(t, bin, env.Server.URL())
	k := conformance.NewKubeCluster(t, c, env.JS, bin, fmt.Sprintf("npd%d", time.Now().UnixNano()%1e6))
	ctx := context.Background()
	observed, err := env.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	healths := store.NewBucket(observed, func() *capnv1.NodeHealth { return new(capnv1.NodeHealth) })
	rems := store.NewBucket(observed, func() *capnv1.RemediationStatus { return new(capnv1.RemediationStatus) })

	applied := time.Now()
	k.Apply(fmt.Sprintf(npdClusterManifest, k.Name, k.Version))
	k.Clusters.WaitReady(k.Name, 6*time.Minute)
	machines := k.Running()
	if len(machines) != 2 {
		t.Fatalf("capn says %s is Ready with %d Running machines %v, want 2", k.Name, len(machines), machines)
	}
	k.FetchKubeconfig()
	out, err := k.Kubectl("config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
	if err != nil {
		t.Fatal(err)
	}
	server := strings.TrimSpace(out)
	k.WaitNodes(machines, 3*time.Minute)
	t.Logf("cluster %s Ready with its 2 Nodes %.1fs after capn apply (API server %s)", k.Name, time.Since(applied).Seconds(), server)
	var victim string
	for name, m := range machines {
		if m.Pool == workerPool {
			victim = name
		}
	}
	victimUID := machines[victim].UID

	nodeCondition := func(node, typ string) string {
		out, err := k.Kubectl("get", "node", node, "--ignore-not-found", "-o",
			fmt.Sprintf(`jsonpath={.status.conditions[?(@.type==%q)].status}`, typ))
		if err != nil {
			return "error: " + err.Error()
		}
		return strings.TrimSpace(out)
	}
	health := func(machine string) *capnv1.NodeHealth {
		h, _, err := healths.Get(ctx, "node."+k.Name+"."+machine)
		if err != nil {
			return nil
		}
		return h
	}
	recorded := func(h *capnv1.NodeHealth, typ string) string {
		for _, c := range h.GetConditions() {
			if c.GetType() == typ {
				return c.GetStatus()
			}
		}
		return ""
	}
	// quick polls (250ms) for the timings.
	until := func(what string, timeout time.Duration, ok func() bool) time.Time {
		t.Helper()
		if testkit.Poll(timeout, 250*time.Millisecond, func() error {
			if ok() {
				return nil
			}
			return errors.New("not yet")
		}) != nil {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		return time.Now()
	}

	// NPD on the worker: its exporter sets KernelDeadlock=False on the Node,
	// and the health-watcher records the Node's conditions.
	n := startNPD(t, npdBin, filepath.Join(c.Home, "npd-1"), server, k.Kubeconfig, victim)
	until("NPD's KernelDeadlock=False on Node "+victim, 2*time.Minute, func() bool { return nodeCondition(victim, "KernelDeadlock") == "False" })
	until("the health-watcher recording the Node's KernelDeadlock=False", time.Minute, func() bool {
		h := health(victim)
		return recorded(h, "KernelDeadlock") == "False" && h.GetNodeName() == victim
	})

	// The kernel says docker hung.
	appended := time.Now()
	n.kernelLine(t, victim, "task docker:1234 blocked for more than 120 seconds.")
	condSet := until("KernelDeadlock=True on Node "+victim+" (kubectl)", 2*time.Minute, func() bool { return nodeCondition(victim, "KernelDeadlock") == "True" })
	unhealthy := until("NodeHealth of "+victim+" unhealthy for KernelDeadlock", time.Minute, func() bool {
		h := health(victim)
		return h != nil && !h.GetHealthy() && slices.ContainsFunc(h.GetUnhealthyReasons(), func(r *capnv1.Condition) bool { return r.GetType() == "KernelDeadlock" })
	})
	var repair *capnv1.RemediationRecord
	repaired := until("a repair of "+victim, 2*time.Minute, func() bool {
		st, _, err := rems.Get(ctx, "remediation."+k.Name+"."+workerPool)
		if err != nil {
			return false
		}
		for _, r := range st.GetHistory() {
			if r.GetMachine() == victim {
				repair = r
				return true
			}
		}
		return false
	})
	t.Logf("repair of %s: %s (%s) recorded at %s", victim, repair.GetAction(), repair.GetReason(), repair.GetTime().AsTime().Format(time.RFC3339Nano))

	// The node's NPD goes with its boot: a rebooted node's starts again on
	// a new boot's log (KernelDeadlock=False); a replaced machine has none.
	n.stop()
	if repair.GetAction() == "reboot" {
		startNPD(t, npdBin, filepath.Join(c.Home, "npd-2"), server, k.Kubeconfig, victim)
	}
	var after map[string]conformance.KubeMachine
	conformance.Poll(t, "2 Running machines, every one healthy", 8*time.Minute, func() error {
		after = k.Running()
		if len(after) != 2 {
			return fmt.Errorf("%d Running machines %v", len(after), after)
		}
		for name := range after {
			if h := health(name); h != nil && !h.GetHealthy() {
				return fmt.Errorf("%s unhealthy: %v", name, h.GetUnhealthyReasons())
			}
		}
		return nil
	})
	k.Clusters.WaitReady(k.Name, 5*time.Minute)
	// Exactly one Node per Running machine: a replaced machine's Node was
	// deleted by the health-watcher.
	readyAgain := k.WaitNodes(after, 3*time.Minute)
	outcome := "rebooted"
	for name, m := range after {
		if m.Pool == workerPool && m.UID != victimUID {
			outcome = "replaced by " + name
		}
	}
	if outcome == "rebooted" && repair.GetAction() != "reboot" {
		t.Fatalf("the repair was %s, yet the worker kept its uid", repair.GetAction())
	}
	t.Logf("%s %s; the cluster Ready with its Nodes Ready (the worker's KernelDeadlock=%s)", victim, outcome, nodeCondition(victimOr(after), "KernelDeadlock"))
	t.Logf("timings: kernel line → KernelDeadlock=True on the Node %.1fs → NodeHealth unhealthy %.1fs → repair (%s) %.1fs → cluster Ready, Nodes Ready %.1fs; whole test %.1fs",
		condSet.Sub(appended).Seconds(), unhealthy.Sub(condSet).Seconds(), repair.GetAction(), repaired.Sub(unhealthy).Seconds(),
		readyAgain.Sub(repaired).Seconds(), time.Since(begin).Seconds())
}

// workerPool is the manifest's worker pool.
const workerPool = "workers"

// victimOr is the worker among machines.
func victimOr(machines map[string]conformance.KubeMachine) string {
	for name, m := range machines {
		if m.Pool == workerPool {
			return name
		}
	}
	return ""
}
