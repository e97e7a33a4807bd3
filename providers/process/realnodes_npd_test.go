//go:build linux

package process_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/process/realnode"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// npdVersion is the node-problem-detector release `make npd` builds
// (NPD_VERSION in the Makefile, which exports CAPN_NPD_BIN).
const npdVersion = "v1.36.0"

// npdRef is the image the test builds FROM scratch around that binary.
const npdRef = "capn.local/npd/node-problem-detector:" + npdVersion

// npdBinary is $CAPN_NPD_BIN or `make npd`'s cache path. Without it the
// test skips — and fails under CAPN_REQUIRE_NODESTACK=1 or in CI, which
// build it (tests/internal/npdtest is the same rule for tests/, which
// providers may not import).
func npdBinary(t *testing.T) string {
	t.Helper()
	path := os.Getenv("CAPN_NPD_BIN")
	if path == "" {
		home, _ := os.UserHomeDir()
		path = filepath.Join(home, ".cache", "capn", "npd", npdVersion, "node-problem-detector")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&0o111 == 0 {
		msg := fmt.Sprintf("node-problem-detector %s not found at %s: build it with `make npd`", npdVersion, path)
		if os.Getenv("CAPN_REQUIRE_NODESTACK") == "1" || os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// npdHealthManifest is realManifest with a health policy: a Node whose
// KernelDeadlock is True is unhealthy at once; one of the 2 workers may
// be repaired (the default 40% would hold 1 of 2 back).
const npdHealthManifest = realManifest + `  health:
    unhealthyConditions:
    - {type: Ready, status: Unknown, timeout: 5m}
    - {type: Ready, status: "False", timeout: 5m}
    - {type: KernelDeadlock, status: "True", timeout: 0s}
    maxUnhealthy: "1"
`

// npdKernelLog is the node's kernel log the DaemonSet's NPD watches.
const npdKernelLog = "/var/log/kern.log"

// npdManifest is upstream's deployment (deployment/rbac.yaml and
// node-problem-detector.yaml of the release) cut to the kernel monitor on
// one plain log file: the ServiceAccount bound to Kubernetes' own
// system:node-problem-detector ClusterRole, the monitor's config, and the
// DaemonSet on every node (taints tolerated) whose Kubernetes exporter
// (in-cluster config: the API server's Service through kube-proxy) sets
// the conditions of its Node (NODE_NAME). The log is a hostPath file the
// kubelet creates when missing (FileOrCreate), in the node's own /var/log.
// No privilege, no /dev/kmsg: the kernel monitor reads the file only.
// Format: the image.
const npdManifest = `apiVersion: v1
kind: ServiceAccount
metadata: {name: node-problem-detector, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: npd-binding}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:node-problem-detector"}
subjects:
- {kind: ServiceAccount, name: node-problem-detector, namespace: kube-system}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: node-problem-detector-config, namespace: kube-system}
data:
  kernel-monitor.json: |
    {
      "plugin": "filelog",
      "pluginConfig": {"timestamp": "^.{15}", "message": "kernel: \\[.*\\] (.*)", "timestampFormat": "Jan _2 15:04:05"},
      "logPath": "` + npdKernelLog + `",
      "lookback": "5m",
      "bufferSize": 10,
      "source": "kernel-monitor",
      "conditions": [{"type": "KernelDeadlock", "reason": "KernelHasNoDeadlock", "message": "kernel has no deadlock"}],
      "rules": [
        {"type": "temporary", "reason": "OOMKilling", "pattern": "Killed process \\d+ (.+) total-vm:\\d+kB, anon-rss:\\d+kB, file-rss:\\d+kB.*"},
        {"type": "temporary", "reason": "TaskHung", "pattern": "task \\S+:\\w+ blocked for more than \\w+ seconds\\."},
        {"type": "permanent", "condition": "KernelDeadlock", "reason": "DockerHung", "pattern": "task docker:\\w+ blocked for more than \\w+ seconds\\."}
      ]
    }
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: node-problem-detector
  namespace: kube-system
  labels: {app: node-problem-detector}
spec:
  selector:
    matchLabels: {app: node-problem-detector}
  template:
    metadata:
      labels: {app: node-problem-detector}
    spec:
      serviceAccountName: node-problem-detector
      containers:
      - name: node-problem-detector
        image: %s
        imagePullPolicy: Never
        command:
        - /node-problem-detector
        - --config.system-log-monitor=/config/kernel-monitor.json
        env:
        - name: NODE_NAME
          valueFrom:
            fieldRef: {fieldPath: spec.nodeName}
        volumeMounts:
        - {name: kernlog, mountPath: ` + npdKernelLog + `, readOnly: true}
        - {name: config, mountPath: /config, readOnly: true}
      volumes:
      - name: kernlog
        hostPath: {path: ` + npdKernelLog + `, type: FileOrCreate}
      - name: config
        configMap:
          name: node-problem-detector-config
          items:
          - {key: kernel-monitor.json, path: kernel-monitor.json}
      tolerations:
      - {effect: NoSchedule, operator: Exists}
      - {effect: NoExecute, operator: Exists}
`

// TestRealNodeNPDDrivesARepair is issue 26's node-health proof on real
// nodes: the real node-problem-detector runs as upstream deploys it — a
// DaemonSet, its image built here FROM scratch around `make npd`'s static
// binary and imported into every node — on a kubeadm cluster of 1 control
// plane and 2 workers that capn made on the process provider's real nodes
// (newRealWorld, shared with TestRealNodesHAControlPlane). A kernel line
// "task docker:1234 blocked for more than 120 seconds." in a worker's own
// /var/log/kern.log (written inside the node's mount namespace) makes its
// NPD set KernelDeadlock=True on the worker's Node; the health-watcher
// reads the Node (matched to the machine by the providerID the node's
// kubelet registered with) into the machine's NodeHealth; the remediator
// replaces the machine (node mode announces no reboot: a provider reboot
// restarts only the agent, not the node's kubelet, containers and NPD);
// the old Node goes, the replacement joins with NPD running on it
// (KernelDeadlock=False), and the cluster is Ready again with 2 Ready
// workers. Each step is timed.
func TestRealNodeNPDDrivesARepair(t *testing.T) {
	needRealNodes(t)
	npd := npdBinary(t)
	work := t.TempDir()
	if out, err := exec.Command(nodeBinary, "image", "--ref", npdRef, "--out", filepath.Join(work, "npd.tar"),
		"--file", "node-problem-detector="+npd, "--entrypoint", "/node-problem-detector").CombinedOutput(); err != nil {
		t.Fatalf("capn-node image: %v\n%s", err, out)
	}
	w := newRealWorld(t, []realnode.Image{{Ref: npdRef, Archive: filepath.Join(work, "npd.tar")}}, npdHealthManifest, 3)
	k, name := w.k, w.name
	conformance.StartRemediator(t, w.env.Server.URL())
	if a, _ := w.env.Announcement(process.Name); slices.Contains(a.GetCapabilities(), "reboot") {
		t.Fatalf("node mode announces reboot: %v", a.GetCapabilities())
	}

	ctx := context.Background()
	observed, err := w.env.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	healths := store.NewBucket(observed, func() *capnv1.NodeHealth { return new(capnv1.NodeHealth) })
	rems := store.NewBucket(observed, func() *capnv1.RemediationStatus { return new(capnv1.RemediationStatus) })
	health := func(machine string) *capnv1.NodeHealth {
		h, _, err := healths.Get(ctx, "node."+name+"."+machine)
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
	nodeCondition := func(node, typ string) string {
		out, err := k.Kubectl("get", "node", node, "--ignore-not-found", "-o",
			fmt.Sprintf(`jsonpath={.status.conditions[?(@.type==%q)].status}`, typ))
		if err != nil {
			return "error: " + err.Error()
		}
		return strings.TrimSpace(out)
	}
	// quick polls (250ms) for the timings; what is not within timeout
	// fails the test with the last state.
	until := func(what string, timeout time.Duration, ok func() bool) time.Time {
		t.Helper()
		if err := natstest.Poll(timeout, 250*time.Millisecond, func() error {
			if ok() {
				return nil
			}
			return errors.New("not yet")
		}); err != nil {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		return time.Now()
	}

	// Every Node carries its machine's providerID (the node's kubelet
	// registered with it), the health-watcher's key to the Node.
	machines := k.Running()
	if len(machines) != 3 {
		t.Fatalf("capn says %s is Ready with %d Running machines %v, want 3", name, len(machines), machines)
	}
	k.WaitNodes(machines, 2*time.Minute)
	var victim string
	var workers []string
	for m, km := range machines {
		if km.Pool == "md-0" {
			workers = append(workers, m)
		}
	}
	slices.Sort(workers)
	if len(workers) != 2 {
		t.Fatalf("workers %v, want 2", workers)
	}
	victim = workers[0]
	victimUID := machines[victim].UID

	// NPD on every node: the DaemonSet from the image built here.
	dsFile := filepath.Join(w.c.Home, "npd.yaml")
	k.Write(dsFile, fmt.Sprintf(npdManifest, npdRef))
	deployed := time.Now()
	conformance.Poll(t, "kubectl apply node-problem-detector", 2*time.Minute, func() error {
		_, err := k.Kubectl("apply", "-f", dsFile)
		return err
	})
	for _, m := range workers {
		until("NPD's KernelDeadlock=False on Node "+m, 3*time.Minute, func() bool { return nodeCondition(m, "KernelDeadlock") == "False" })
	}
	npdUp := time.Since(deployed)
	until("the health-watcher recording "+victim+"'s KernelDeadlock=False", time.Minute, func() bool {
		h := health(victim)
		return recorded(h, "KernelDeadlock") == "False" && h.GetNodeName() == victim
	})
	out, _ := k.Kubectl("get", "pods", "-n", "kube-system", "-l", "app=node-problem-detector", "-o", "wide")
	t.Logf("NPD's DaemonSet reported KernelDeadlock=False on both workers %s after kubectl apply:\n%s", npdUp.Round(time.Millisecond), out)

	// The kernel of the victim's node says docker hung: a line in its own
	// /var/log/kern.log, through the node's mount namespace.
	kernLog := nodeFile(t, w.opts.StateDir, name, victim, npdKernelLog)
	injected := time.Now()
	line := fmt.Sprintf("%s %s kernel: [12345.678901] task docker:1234 blocked for more than 120 seconds.\n", time.Now().UTC().Format("Jan _2 15:04:05"), victim)
	f, err := os.OpenFile(kernLog, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("the node's kernel log: %v", err)
	}
	if _, err := f.WriteString(line); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	condSet := until("KernelDeadlock=True on Node "+victim, 2*time.Minute, func() bool { return nodeCondition(victim, "KernelDeadlock") == "True" })
	if other := nodeCondition(workers[1], "KernelDeadlock"); other != "False" {
		t.Errorf("the other worker %s's KernelDeadlock is %q: the line was the victim's node's only", workers[1], other)
	}
	seen := until("NodeHealth of "+victim+" unhealthy for KernelDeadlock", time.Minute, func() bool {
		h := health(victim)
		return h != nil && !h.GetHealthy() && slices.ContainsFunc(h.GetUnhealthyReasons(), func(r *capnv1.Condition) bool { return r.GetType() == "KernelDeadlock" })
	})
	var repair *capnv1.RemediationRecord
	started := until("a repair of "+victim, 2*time.Minute, func() bool {
		st, _, err := rems.Get(ctx, "remediation."+name+".md-0")
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
	t.Logf("repair of %s: %s (%s)", victim, repair.GetAction(), repair.GetReason())
	if repair.GetAction() != "replace" {
		t.Errorf("the repair is %q, want replace (node mode has no reboot)", repair.GetAction())
	}

	var after map[string]conformance.KubeMachine
	var replacement string
	replaced := until("3 Running machines, the victim replaced, every one healthy", 10*time.Minute, func() bool {
		after = k.Running()
		if len(after) != 3 {
			return false
		}
		replacement = ""
		for m, km := range after {
			if km.UID == victimUID {
				return false
			}
			if km.Pool == "md-0" && !slices.Contains(workers, m) {
				replacement = m
			}
			if h := health(m); h == nil || !h.GetHealthy() {
				return false
			}
		}
		return replacement != ""
	})
	k.Clusters.WaitReady(name, 5*time.Minute)
	// Exactly one Ready Node per Running machine, with its providerID:
	// the victim's Node was deleted by the health-watcher.
	nodesReady := k.WaitNodes(after, 5*time.Minute)
	until("NPD's KernelDeadlock=False on the replacement's Node "+replacement, 3*time.Minute, func() bool {
		return nodeCondition(replacement, "KernelDeadlock") == "False"
	})
	ready := 0
	for m, km := range after {
		if km.Pool == "md-0" && nodeCondition(m, "Ready") == "True" {
			ready++
		}
	}
	if ready != 2 {
		t.Fatalf("%d Ready workers after the repair, want 2 (%v)", ready, after)
	}
	out, _ = k.Kubectl("get", "nodes", "-o", "wide")
	t.Logf("%s replaced by %s; capn's cluster Ready, 2 Ready workers:\n%s", victim, replacement, out)
	t.Logf("timings: kernel line → KernelDeadlock=True on the Node %.1fs → seen by capn (NodeHealth unhealthy) %.1fs → repair (%s) started %.1fs → replacement Running and healthy %.1fs → cluster Ready, 3 Nodes Ready %.1fs; line to Ready %.1fs",
		condSet.Sub(injected).Seconds(), seen.Sub(condSet).Seconds(), repair.GetAction(), started.Sub(seen).Seconds(),
		replaced.Sub(started).Seconds(), nodesReady.Sub(replaced).Seconds(), nodesReady.Sub(injected).Seconds())
	w.deleteAndCheck()
}

// nodeFile is path inside the real node of machine (its own mounts, seen
// through the process that holds them).
func nodeFile(t *testing.T, stateDir, cluster, machine, path string) string {
	t.Helper()
	nss, err := process.RealNodeNamespaces(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	ns, ok := nss[cluster+"/"+machine]
	if !ok {
		t.Fatalf("no real node of %s/%s among %v", cluster, machine, nss)
	}
	index := ns[strings.LastIndexByte(ns, '-')+1:]
	n := &realnode.Node{NS: ns, Dir: filepath.Join(stateDir, "realnodes", index)}
	if _, ok := n.Holder(); !ok {
		t.Fatalf("the real node %s of %s has no holder of its mounts", ns, machine)
	}
	pid, _ := n.Holder()
	return filepath.Join(fmt.Sprintf("/proc/%d/root", pid), path)
}
