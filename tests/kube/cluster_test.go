package kube_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1alpha1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// TestMain removes the programs TestKubeClusterEndToEnd builds.
func TestMain(m *testing.M) { conformance.Main(m) }

// clusterManifest is the test's cluster: real Kubernetes (kube-local) on
// the process provider, %d control-plane machines and a pool of 2 workers.
const clusterManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  bootstrap:
    provider: kube-local
  controlPlane:
    provider: process
    replicas: %d
  workerPools:
  - name: workers
    provider: process
    replicas: 2
`

// workerPool is the manifest's worker pool.
const workerPool = "workers"

// deploymentManifest is three pods; kwok runs them (no image is pulled)
// on the workers (the control plane keeps kubeadm's NoSchedule taint).
const deploymentManifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: pause
  namespace: default
spec:
  replicas: 3
  selector:
    matchLabels: {app: pause}
  template:
    metadata:
      labels: {app: pause}
    spec:
      automountServiceAccountToken: false
      containers:
      - name: pause
        image: pause
`

// capnPrograms are what the test runs: capn's core programs, the gateway
// (for `capn kubeconfig`), the CLI, and the process provider with
// capn-node beside it.
var capnPrograms = append(append([]string(nil), conformance.CoreProgramNames...),
	"gateway", "capn", "capn-provider-process", "capn-node")

// nodeSideBinaries are the processes a machine runs: none may outlive the
// cluster.
var nodeSideBinaries = []string{"capn-node", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

// e2e is one capn deployment on an embedded NATS server and the one
// cluster TestKubeClusterEndToEnd runs on it.
type e2e struct {
	t         *testing.T
	bin       string // the Kubernetes binaries
	progs     string // capn's programs
	procState string // the process provider's state dir
	home      string // HOME of capn and kubectl, and the test's files
	cluster   string
	server    string // the gateway's URL
	token     string // its admin token
	clusters  *conformance.Clusters
	wanted    *store.Bucket[*capnv1alpha1.Machine]
	// tempDirs are every directory of this test: a process whose command
	// line names one is the test's.
	tempDirs []string
}

// machine is one Running machine as capn reports it.
type machine struct {
	pool, uid, providerID string
}

// TestKubeClusterEndToEnd runs a real Kubernetes cluster through capn, as a
// user would: capn's programs as processes on an embedded NATS server, the
// process provider with --kube-bin, a kube-local cluster applied with
// `capn apply`, its admin kubeconfig from `capn kubeconfig`, and kubectl
// against it — Nodes Ready at the declared version with their machines'
// providerIDs, a Deployment Running, a worker's capn-node killed -9 and
// the machine replaced by capn, and a delete that leaves no process and
// no state behind.
func TestKubeClusterEndToEnd(t *testing.T) {
	bin := kubeBin(t)
	if testing.Short() {
		t.Skip("runs a capn deployment and a Kubernetes cluster; skipped with -short")
	}
	version := wantVersion(bin)
	begin := time.Now()
	w := &e2e{t: t, bin: bin, home: t.TempDir(), cluster: fmt.Sprintf("kube%d", time.Now().UnixNano()%1e6)}
	w.procState = filepath.Join(t.TempDir(), "process")
	w.tempDirs = append(w.tempDirs, w.home, filepath.Dir(w.procState))

	cps := controlPlaneReplicas(t, bin, version)

	// --- capn: NATS, the core programs, the gateway, the process provider --
	s := time.Now()
	progs, err := conformance.BuildTemp(capnPrograms...)
	if err != nil {
		t.Fatal(err)
	}
	w.progs = progs
	w.tempDirs = append(w.tempDirs, progs)
	t.Logf("built %s in %.1fs", strings.Join(capnPrograms, ", "), time.Since(s).Seconds())

	s = time.Now()
	env := sdktest.New(t)
	w.clusters = conformance.NewClusters(t, env.JS)
	desired, err := env.JS.KeyValue(context.Background(), events.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	w.wanted = store.NewBucket(desired, func() *capnv1alpha1.Machine { return new(capnv1alpha1.Machine) })
	// Registered before the programs, so it runs after they stopped:
	// whatever happened, no machine, endpoint or child is left running.
	t.Cleanup(func() {
		if err := process.Purge(process.Options{StateDir: w.procState}); err != nil {
			t.Errorf("purge the process provider's state: %v", err)
		}
		if left := w.leftProcesses(); len(left) > 0 {
			t.Errorf("processes left after the purge:\n%s", strings.Join(left, "\n"))
		}
	})
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	secretsKey := "CAPN_SECRETS_KEY=" + hex.EncodeToString(key)
	nats := "--nats-url=" + env.Server.URL()
	for _, name := range conformance.CoreProgramNames {
		env := []string{"CAPN_LOG_LEVEL=info", "CAPN_LOG_FORMAT=json"}
		if name == "bootstrapper" {
			env = append(env, secretsKey)
		}
		conformance.StartProgram(t, filepath.Join(progs, name), env, nats, "--http-addr=off")
	}
	w.startGateway(nats, secretsKey)
	conformance.StartProgram(t, filepath.Join(progs, "capn-provider-process"), []string{"CAPN_LOG_LEVEL=info", "CAPN_LOG_FORMAT=json"},
		nats, "--http-addr=off",
		"--kube-bin="+bin,
		"--process-state-dir="+w.procState,
		"--process-node-binary="+filepath.Join(progs, "capn-node"),
		"--process-heartbeat-every=1s",
		"--process-watch-every=250ms",
		"--process-stop-timeout=20s",
		"--process-health-port=-1",
		"--provider-reconcile-every=1s",
		"--provider-announce-every=1s",
	)
	// Registered last, so it runs first on failure: the machines' logs
	// while they are still there.
	t.Cleanup(func() {
		if t.Failed() {
			w.dumpMachineLogs()
		}
	})
	t.Logf("capn deployment up in %.1fs: NATS %s, gateway %s, process provider --kube-bin=%s", time.Since(s).Seconds(), env.Server.URL(), w.server, bin)

	// --- apply: capn makes the cluster Ready ---------------------------------
	applied := time.Now()
	manifest := filepath.Join(w.home, "cluster.yaml")
	writeFile(t, manifest, fmt.Sprintf(clusterManifest, w.cluster, version, cps))
	w.capn("apply", "-f", manifest)
	w.clusters.WaitReady(w.cluster, 6*time.Minute)
	ready := time.Since(applied)
	t.Logf("cluster %s Ready in capn %.1fs after capn apply", w.cluster, ready.Seconds())

	machines := w.running()
	if len(machines) != cps+2 {
		t.Fatalf("capn says %s is Ready with %d Running machines %v, want %d", w.cluster, len(machines), names(machines), cps+2)
	}

	// --- the kubeconfig capn hands out, and the Nodes -------------------------
	kubeconfig := filepath.Join(w.home, w.cluster+".kubeconfig")
	w.capn("kubeconfig", w.cluster, "-o", kubeconfig)
	// The kubeconfig names the cluster's endpoint (capn-node endpoint, the
	// load balancer the process provider runs), not a machine.
	ic, ok := env.Cluster(process.Name, w.cluster)
	if !ok {
		t.Fatalf("no infra record of cluster %s from the process provider", w.cluster)
	}
	ep := ic.GetControlPlaneEndpoint()
	if got, want := kubeconfigServer(t, bin, kubeconfig), fmt.Sprintf("https://%s:%d", ep.GetHost(), ep.GetPort()); got != want {
		t.Fatalf("capn kubeconfig: server %q, want the cluster's endpoint %s", got, want)
	} else {
		t.Logf("capn kubeconfig: server %s, the cluster's endpoint (%s)", got, ic.GetMessage())
	}
	w.checkServerVersion(kubeconfig, version)
	nodesReady := w.waitNodes(kubeconfig, version, machines, "", 3*time.Minute)
	t.Logf("kubectl get nodes: %d Nodes Ready at %s with their machines' providerIDs %.1fs after apply (%.1fs after capn said Ready)",
		len(machines), version, nodesReady.Sub(applied).Seconds(), nodesReady.Sub(applied.Add(ready)).Seconds())

	// --- a Deployment of 3 pods --------------------------------------------
	s = time.Now()
	dep := filepath.Join(w.home, "deployment.yaml")
	writeFile(t, dep, deploymentManifest)
	w.poll("kubectl apply the Deployment", 2*time.Minute, func() error {
		_, err := kubectl(bin, kubeconfig, "apply", "-f", dep)
		return err
	})
	var pods string
	w.poll("3 pods of Deployment pause Running", 3*time.Minute, func() (err error) {
		pods, err = podsRunning(bin, kubeconfig, 3)
		return err
	})
	podsUp := time.Since(s)
	t.Logf("Deployment pause: 3 pods Running %.1fs after kubectl apply:\n%s", podsUp.Seconds(), pods)

	// --- kill -9 a worker's capn-node: capn replaces the machine ----------------
	var victim string
	for name, m := range machines {
		if m.pool == workerPool && (victim == "" || name < victim) {
			victim = name
		}
	}
	pid := nodePID(t, w.procState, w.cluster, victim)
	victimDir := filepath.Join(w.procState, "clusters", w.cluster, "machines", victim) + string(filepath.Separator)
	var victimBins []string
	for _, p := range nodeProcesses(victimDir) {
		victimBins = append(victimBins, p.bin)
	}
	if !slices.Contains(victimBins, "capn-node") || !slices.Contains(victimBins, "kwok") {
		t.Fatalf("the /proc scan finds %v of worker %s, want its capn-node and kwok", victimBins, victim)
	}
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d (capn-node of %s): %v", pid, victim, err)
	}
	t.Logf("kill -9 %d: the capn-node of worker %s", pid, victim)
	var after map[string]machine
	w.poll("capn replacing "+victim+" with a new Running machine", 5*time.Minute, func() error {
		after = w.running()
		if len(after) != cps+2 {
			return fmt.Errorf("%d Running machines %v, want %d", len(after), names(after), cps+2)
		}
		for name, m := range after {
			if m.uid == machines[victim].uid {
				return fmt.Errorf("%s is still the killed machine (uid %s)", name, m.uid)
			}
		}
		return nil
	})
	replacedIn := time.Since(killed)
	// Nothing of the killed machine runs on: its kwok dies with its agent.
	w.poll("no process of the killed machine "+victim, time.Minute, func() error {
		if left := nodeProcesses(victimDir); len(left) > 0 {
			return fmt.Errorf("still running: %v", left)
		}
		return nil
	})
	var replacement string
	for name, m := range after {
		if m.uid != machines[name].uid {
			replacement = name
		}
	}
	if after[replacement].pool != workerPool {
		t.Fatalf("the new machine %s is in pool %q, want %s", replacement, after[replacement].pool, workerPool)
	}
	t.Logf("capn replaced %s with %s (Running, %s) %.1fs after the kill", victim, replacement,
		map[bool]string{true: "the name reused", false: "a new name"}[replacement == victim], replacedIn.Seconds())
	stale := ""
	if replacement != victim {
		stale = victim
	}
	replacedReady := w.waitNodes(kubeconfig, version, after, stale, 3*time.Minute)
	t.Logf("the replacement's Node %s Ready %.1fs after the kill", replacement, replacedReady.Sub(killed).Seconds())
	if stale != "" {
		// The dead machine's Node (nothing deletes it) goes NotReady once
		// its lease runs out: each machine's kwok renews only its own.
		var ready string
		w.poll("the dead machine's Node "+stale+" NotReady", 2*time.Minute, func() error {
			out, err := kubectl(bin, kubeconfig, "get", "node", stale, "--ignore-not-found", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
			if ready = strings.TrimSpace(out); err == nil && ready == "True" {
				err = errors.New("still Ready")
			}
			return err
		})
		t.Logf("the dead machine's Node %s Ready=%q %.1fs after the kill", stale, ready, time.Since(killed).Seconds())
	}

	// The scan for what a delete might leave sees the cluster's processes
	// now: each machine's capn-node and kwok, the control plane's etcd,
	// kube-apiserver, kube-controller-manager and kube-scheduler.
	count := map[string]int{}
	for _, p := range nodeProcesses(append([]string{w.cluster}, w.tempDirs...)...) {
		count[p.bin]++
	}
	for bin, want := range map[string]int{"capn-node": cps + 2, "kwok": cps + 2, "etcd": cps, "kube-apiserver": cps,
		"kube-controller-manager": cps, "kube-scheduler": cps} {
		if count[bin] < want {
			t.Fatalf("before the delete, the /proc scan finds %d %s processes of the cluster, want at least %d (all: %v)", count[bin], bin, want, count)
		}
	}

	// --- delete: nothing left ---------------------------------------------------
	deleted := time.Now()
	w.capn("delete", "cluster", w.cluster, "--wait", "--timeout", "4m")
	w.clusters.WaitGone(w.cluster, []string{process.Name}, 2*time.Minute)
	w.poll("nothing of the cluster left on the host", 2*time.Minute, func() error {
		left := w.leftProcesses()
		dir := filepath.Join(w.procState, "clusters", w.cluster)
		switch ents, err := os.ReadDir(dir); {
		case err == nil:
			for _, e := range ents {
				left = append(left, "state "+filepath.Join(dir, e.Name()))
			}
		case !errors.Is(err, os.ErrNotExist):
			left = append(left, "state "+dir+": "+err.Error())
		}
		if len(left) > 0 {
			return fmt.Errorf("left:\n%s", strings.Join(left, "\n"))
		}
		return nil
	})
	t.Logf("cluster deleted through capn, no process or state left, %.1fs after capn delete", time.Since(deleted).Seconds())

	t.Logf("figures (%d control plane, 2 workers): capn Ready %.1fs after apply; all Nodes Ready %.1fs after apply; 3 pods Running %.1fs; after kill -9 of a worker: replacement Running %.1fs, its Node Ready %.1fs; delete %.1fs; whole test %.1fs",
		cps, ready.Seconds(), nodesReady.Sub(applied).Seconds(), podsUp.Seconds(), replacedIn.Seconds(), replacedReady.Sub(killed).Seconds(),
		time.Since(deleted).Seconds(), time.Since(begin).Seconds())
}

// controlPlaneReplicas is 3 when the node side runs control-plane joins
// (etcd member add), else 1: what cmd/capn-node/kube says of a second
// control-plane machine.
func controlPlaneReplicas(t *testing.T, bin, version string) int {
	t.Helper()
	cfg := &kubelocal.NodeConfig{
		APIVersion: kubelocal.APIVersion, Kind: kubelocal.Kind, Cluster: "probe", NodeName: "probe-cp-1",
		Role: "control-plane", KubernetesVersion: version, Endpoint: kubelocal.Endpoint{Host: "127.0.0.1", Port: 6443},
		ServiceCIDR: kubelocal.DefaultServiceCIDR, PodCIDR: kubelocal.DefaultPodCIDR, DNSDomain: kubelocal.DefaultDNSDomain,
		BootstrapToken: "abcdef.0123456789abcdef", TokenTTL: "15m0s", CACertHash: "sha256:" + strings.Repeat("0", 64),
	}
	_, err := kube.New(cfg, kube.Options{BinDir: bin, DataDir: t.TempDir(), Address: "127.0.0.2"})
	switch {
	case errors.Is(err, kube.ErrNotBuilt):
		t.Logf("1 control-plane machine: the node side says of a second one %q", err)
		return 1
	case err != nil:
		t.Fatalf("asking the node side whether it runs a second control-plane machine: %v", err)
	}
	t.Logf("3 control-plane machines: the node side runs control-plane joins")
	return 3
}

// startGateway runs the gateway on a free port of 127.0.0.1 with an admin
// token and the secrets key, and waits until it answers.
func (w *e2e) startGateway(nats, secretsKey string) {
	t := w.t
	t.Helper()
	tok, err := gateway.GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	w.token = tok
	tokens := filepath.Join(w.home, "tokens")
	writeFile(t, tokens, tok+" admin e2e\n")
	addr := "127.0.0.1:" + freePort(t)
	w.server = "http://" + addr
	conformance.StartProgram(t, filepath.Join(w.progs, "gateway"), []string{"CAPN_LOG_LEVEL=info", "CAPN_LOG_FORMAT=json", secretsKey},
		nats, "--http-addr=off", "--addr="+addr, "--tokens-file="+tokens)
	w.poll("the gateway's /healthz", time.Minute, func() error {
		resp, err := http.Get(w.server + "/healthz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", resp.Status, b)
		}
		return nil
	})
}

// capn runs the CLI against the gateway as a user would and returns its
// standard output; it fails the test on a non-zero exit.
func (w *e2e) capn(args ...string) string {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(w.progs, "capn"), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + w.home, "XDG_CONFIG_HOME=" + filepath.Join(w.home, "xdg"),
		"CAPN_SERVER=" + w.server, "CAPN_TOKEN=" + w.token}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	if err := cmd.Run(); err != nil {
		w.t.Fatalf("capn %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	w.t.Logf("capn %s: %.1fs %s", strings.Join(args, " "), time.Since(began).Seconds(), strings.TrimSpace(stderr.String()))
	return stdout.String()
}

// running are the cluster's Running machines as capn reports them: pool
// and uid from the desired machine, providerID from its status.
func (w *e2e) running() map[string]machine {
	w.t.Helper()
	specs, err := w.wanted.List(context.Background(), "machine."+w.cluster+".")
	if err != nil {
		w.t.Fatal(err)
	}
	statuses := w.clusters.Machines(w.cluster)
	out := map[string]machine{}
	for _, e := range specs {
		name := strings.TrimPrefix(e.Key, "machine."+w.cluster+".")
		if st := statuses[name]; st.GetPhase() == "Running" && e.Value.GetMetadata().GetDeletionTimestamp() == nil {
			out[name] = machine{pool: e.Value.GetSpec().GetPool(), uid: e.Value.GetMetadata().GetUid(), providerID: st.GetProviderId()}
		}
	}
	return out
}

func names(ms map[string]machine) []string {
	var out []string
	for n, m := range ms {
		out = append(out, n+"("+m.pool+")")
	}
	sort.Strings(out)
	return out
}

// checkServerVersion checks that the kubeconfig reaches an API server of
// version through the endpoint, with the TLS capn's CA verifies.
func (w *e2e) checkServerVersion(kubeconfig, version string) {
	w.t.Helper()
	var out string
	w.poll("kubectl version with capn's kubeconfig", 2*time.Minute, func() error {
		var err error
		out, err = kubectl(w.bin, kubeconfig, "version", "-o", "json")
		return err
	})
	var v struct {
		ServerVersion struct{ GitVersion string } `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.ServerVersion.GitVersion != version {
		w.t.Fatalf("kubectl version: want server %s, got %q (%v)\n%s", version, v.ServerVersion.GitVersion, err, out)
	}
}

// nodeList is what the test reads of `kubectl get nodes -o json`.
type nodeList struct {
	Items []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			ProviderID string `json:"providerID"`
		} `json:"spec"`
		Status struct {
			NodeInfo struct {
				KubeletVersion string `json:"kubeletVersion"`
			} `json:"nodeInfo"`
			Conditions []struct {
				Type, Status string
			} `json:"conditions"`
		} `json:"status"`
	} `json:"items"`
}

// waitNodes waits until `kubectl get nodes` lists one Node per machine,
// Ready, of version, with the machine's providerID — and no other Node
// but stale (a dead machine's, which nothing deletes) — and returns when.
func (w *e2e) waitNodes(kubeconfig, version string, machines map[string]machine, stale string, timeout time.Duration) time.Time {
	w.t.Helper()
	w.poll(fmt.Sprintf("%d Nodes Ready at %s", len(machines), version), timeout, func() error {
		out, err := kubectl(w.bin, kubeconfig, "get", "nodes", "-o", "json")
		if err != nil {
			return err
		}
		var l nodeList
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			return fmt.Errorf("kubectl get nodes -o json: %v", err)
		}
		var problems []string
		seen := map[string]bool{}
		for _, n := range l.Items {
			name := n.Metadata.Name
			seen[name] = true
			m, ok := machines[name]
			if !ok {
				if name != stale {
					problems = append(problems, fmt.Sprintf("Node %s is no machine of capn's %v", name, names(machines)))
				}
				continue
			}
			ready := ""
			for _, c := range n.Status.Conditions {
				if c.Type == "Ready" {
					ready = c.Status
				}
			}
			if ready != "True" {
				problems = append(problems, fmt.Sprintf("Node %s Ready=%q", name, ready))
			}
			if n.Status.NodeInfo.KubeletVersion != version {
				problems = append(problems, fmt.Sprintf("Node %s kubeletVersion %q, want %s", name, n.Status.NodeInfo.KubeletVersion, version))
			}
			if m.providerID == "" || n.Spec.ProviderID != m.providerID {
				problems = append(problems, fmt.Sprintf("Node %s providerID %q, capn's machine says %q", name, n.Spec.ProviderID, m.providerID))
			}
		}
		for name := range machines {
			if !seen[name] {
				problems = append(problems, "no Node "+name)
			}
		}
		if len(problems) > 0 {
			sort.Strings(problems)
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	})
	return time.Now()
}

// podsRunning is nil when n pods of Deployment pause are Running; out
// lists them with their phase and Node.
func podsRunning(bin, kubeconfig string, n int) (out string, err error) {
	out, err = kubectl(bin, kubeconfig, "get", "pods", "-n", "default", "-l", "app=pause", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.status.phase} {.spec.nodeName}{"\n"}{end}`)
	if err != nil {
		return out, err
	}
	running := 0
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[1] == "Running" {
			running++
		}
	}
	if running != n {
		return out, fmt.Errorf("%d Running, want %d:\n%s", running, n, out)
	}
	return out, nil
}

// kubeconfigServer is the server kubectl reads from the kubeconfig.
func kubeconfigServer(t *testing.T, bin, path string) string {
	t.Helper()
	out, err := kubectl(bin, path, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
	if err != nil {
		t.Fatalf("kubectl config view of %s: %v", path, err)
	}
	return strings.TrimSpace(out)
}

// nodePID is the pid of a machine's capn-node, from the process
// provider's state dir, checked against /proc.
func nodePID(t *testing.T, stateDir, cluster, machine string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, "clusters", cluster, "machines", machine, "pid"))
	if err != nil {
		t.Fatalf("the pid of %s's capn-node: %v", machine, err)
	}
	var pid int
	if f := strings.Fields(string(b)); len(f) > 0 {
		pid, err = strconv.Atoi(f[0])
	}
	if pid <= 0 || err != nil {
		t.Fatalf("pid file of %s: %q", machine, b)
	}
	args := cmdline(pid)
	if len(args) == 0 || filepath.Base(args[0]) != "capn-node" || !strings.Contains(strings.Join(args, " "), "--machine="+machine) {
		t.Fatalf("pid %d of %s is not its capn-node: %q", pid, machine, args)
	}
	return pid
}

func cmdline(pid int) []string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// nodeProc is a live process of a machine: capn-node or a Kubernetes
// component.
type nodeProc struct {
	pid  int
	bin  string
	line string // its command line
}

func (p nodeProc) String() string {
	line := p.line
	if len(line) > 300 {
		line = line[:300] + "…"
	}
	return fmt.Sprintf("pid %d: %s", p.pid, line)
}

// nodeProcesses are the live processes of machines (nodeSideBinaries)
// whose command line mentions any of words.
func nodeProcesses(words ...string) []nodeProc {
	ents, _ := os.ReadDir("/proc")
	var out []nodeProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		args := cmdline(pid)
		if len(args) == 0 || !slices.Contains(nodeSideBinaries, filepath.Base(args[0])) {
			continue
		}
		line := strings.Join(args, " ")
		if !slices.ContainsFunc(words, func(w string) bool { return strings.Contains(line, w) }) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && isZombie(string(st)) {
			continue // exited, its parent not yet reaped
		}
		out = append(out, nodeProc{pid: pid, bin: filepath.Base(args[0]), line: line})
	}
	return out
}

// leftProcesses are the live machine processes whose command line names
// the test's directories or its cluster.
func (w *e2e) leftProcesses() []string {
	var out []string
	for _, p := range nodeProcesses(append([]string{w.cluster}, w.tempDirs...)...) {
		out = append(out, p.String())
	}
	return out
}

// isZombie reads the state field of /proc/<pid>/stat (after the command
// name in parentheses).
func isZombie(stat string) bool {
	i := strings.LastIndexByte(stat, ')')
	return i >= 0 && strings.HasPrefix(strings.TrimSpace(stat[i+1:]), "Z")
}

// poll runs check every second until it succeeds; after timeout the test
// fails with the last error.
func (w *e2e) poll(what string, timeout time.Duration, check func() error) {
	w.t.Helper()
	if ok, last := w.eventually(timeout, check); !ok {
		w.t.Fatalf("%s: not within %s; last: %v", what, timeout, last)
	}
}

// eventually runs check every second until it succeeds (true) or timeout
// passes (false, the last error).
func (w *e2e) eventually(timeout time.Duration, check func() error) (bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, err
		}
		time.Sleep(time.Second)
	}
}

// dumpMachineLogs logs the tails of every machine's capn-node log and
// Kubernetes component logs, and of the cluster endpoint's log.
func (w *e2e) dumpMachineLogs() {
	root := filepath.Join(w.procState, "clusters")
	var files []string
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".log") {
			files = append(files, path)
		}
		return nil
	})
	if len(files) == 0 {
		w.t.Logf("no machine logs under %s", root)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		rel, _ := filepath.Rel(root, f)
		w.t.Logf("--- tail of %s ---\n%s", rel, strings.Join(lines, "\n"))
	}
}
