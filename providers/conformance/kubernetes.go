package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
)

// Kubernetes turns on the suite's Kubernetes conformance check, for a
// provider that announces sdk.CapabilityRealKubernetes: the seed's
// conformance check, made concrete — create a cluster, run pods on it,
// change it, delete it.
type Kubernetes struct {
	// Bin lists directories of KubeBinaries, one per Kubernetes version,
	// separated by ':' (`make kube` builds them; a single directory is a
	// list of one). Empty: $CAPN_KUBE_BIN. Without them the check is
	// skipped — or fails when CAPN_REQUIRE_KUBE=1 (CI). The provider gets
	// the whole list (Env.KubeBin); the check runs the newest version, and
	// KubernetesVersions the oldest beside it.
	Bin string
	// StopKubelet freezes the kubelet of a machine of cluster (for
	// kube-local: its kwok) while the machine and its capn-node go on, so
	// that its Node goes NotReady, and undoes that when the test ends if
	// no repair did. Optional: nil skips the step "a worker whose kubelet
	// stops (its Node NotReady) is repaired" with a log line.
	StopKubelet func(t *testing.T, env *Env, cluster, machine string)
	// Kubeadm, for a provider (or a mode of it) whose machines are real
	// kubeadm nodes, turns the check into its kubeadm flavour
	// (kubernetes_kubeadm.go) and leaves out the kube-local checks
	// KubernetesVersions and KubernetesDay2. RunKubernetes runs it alone.
	Kubeadm *Kubeadm
}

// KubeBinaries are what the check needs in Kubernetes.Bin: what a
// kube-local machine runs, and kubectl and etcdctl to look at it.
var KubeBinaries = []string{"etcd", "etcdctl", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok"}

// KubeBinDir is one directory of KubeBinaries and their Kubernetes
// version.
type KubeBinDir struct {
	Dir, Version string
}

// KubeBins are the directories of list (colon-separated; empty:
// $CAPN_KUBE_BIN) that hold KubeBinaries, with their versions, sorted
// oldest first: bins[0] is the older minor an upgrade starts from,
// bins[len-1] the newest. A directory that lacks binaries is left out
// with a log line (fatal under CAPN_REQUIRE_KUBE=1); with none, the test
// is skipped, or failed under CAPN_REQUIRE_KUBE=1.
func KubeBins(t testing.TB, list string) []KubeBinDir {
	t.Helper()
	if list == "" {
		list = os.Getenv("CAPN_KUBE_BIN")
	}
	require := os.Getenv("CAPN_REQUIRE_KUBE") == "1"
	var out []KubeBinDir
	var whys []string
	for _, dir := range filepath.SplitList(list) {
		if dir == "" {
			continue
		}
		var missing []string
		for _, b := range KubeBinaries {
			if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				missing = append(missing, b)
			}
		}
		if len(missing) > 0 {
			why := fmt.Sprintf("%s has no %s", dir, strings.Join(missing, ", "))
			if require {
				t.Fatalf("CAPN_REQUIRE_KUBE=1 but %s: build the binaries with `make kube`", why)
			}
			t.Logf("left out: %s", why)
			whys = append(whys, why)
			continue
		}
		out = append(out, KubeBinDir{Dir: dir, Version: KubeVersion(t, dir)})
	}
	if len(out) > 0 {
		slices.SortStableFunc(out, func(a, b KubeBinDir) int { return manifest.CompareVersions(a.Version, b.Version) })
		return out
	}
	why := "CAPN_KUBE_BIN is not set"
	if len(whys) > 0 {
		why = strings.Join(whys, "; ")
	}
	if require {
		t.Fatalf("CAPN_REQUIRE_KUBE=1 but %s: build the binaries with `make kube`", why)
	}
	t.Skipf("%s: build the binaries with `make kube` and set CAPN_KUBE_BIN to the bin directories (make prints them: make -s kube-bin)", why)
	return nil
}

// KubeBin is the directory of the newest version of list (or
// $CAPN_KUBE_BIN): see KubeBins.
func KubeBin(t testing.TB, list string) string {
	t.Helper()
	bins := KubeBins(t, list)
	return bins[len(bins)-1].Dir
}

// startRealKubernetes starts what every real-Kubernetes check runs on:
// the provider with the binaries of every version found (Env.KubeBin, as
// its --kube-bin) and capn beside it, and checks that the provider
// announces real Kubernetes. It returns the versions' binaries, oldest
// first, and capn.
func (s *suite) startRealKubernetes(t *testing.T, e *Env) ([]KubeBinDir, *Capn) {
	t.Helper()
	bins := KubeBins(t, s.f.Kubernetes.Bin)
	e.KubeBin = JoinKubeBins(bins)
	c := StartCapn(t, e.NATSURL)
	e.StartProvider()
	if a, _ := e.Announcement(e.Provider); !slices.Contains(a.GetCapabilities(), sdk.CapabilityRealKubernetes) {
		t.Fatalf("Features.Kubernetes is set, but %s started with Env.KubeBin=%s announces %v, not %s", e.Provider, e.KubeBin, a.GetCapabilities(), sdk.CapabilityRealKubernetes)
	}
	return bins, c
}

// JoinKubeBins is the colon-separated list of bins' directories, what a
// provider's --kube-bin takes.
func JoinKubeBins(bins []KubeBinDir) string {
	dirs := make([]string, len(bins))
	for i, b := range bins {
		dirs[i] = b.Dir
	}
	return strings.Join(dirs, string(filepath.ListSeparator))
}

var kubeVersionRe = regexp.MustCompile(`Kubernetes (v[0-9]+\.[0-9]+\.[0-9]+)`)

// KubeVersion is the version kube-apiserver in bin says it is.
func KubeVersion(t testing.TB, bin string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(bin, "kube-apiserver"), "--version").CombinedOutput()
	m := kubeVersionRe.FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("kube-apiserver --version: %v: %s", err, out)
	}
	return string(m[1])
}

// kubeManifest is the check's cluster: kube-local on the provider, 3
// control-plane machines and a pool of 2 workers. The workers' health
// policy is short for the kubelet step: a Node Ready=Unknown for 30s (the
// controller-manager's verdict on a silent kubelet) is unhealthy, and one
// of the two may be repaired (the default 40% of 2 rounds down to 0).
const kubeManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  bootstrap:
    provider: kube-local
  controlPlane:
    provider: %s
    replicas: 3
  workerPools:
  - name: workers
    provider: %s
    replicas: 2
    health:
      unhealthyConditions:
      - {type: Ready, status: Unknown, timeout: 30s}
      - {type: Ready, status: "False", timeout: 5m}
      maxUnhealthy: "1"
`

// kubeDeployment is three pods; kwok runs them (no image is pulled) on
// the workers (the control plane keeps kubeadm's NoSchedule taint).
const kubeDeployment = `apiVersion: apps/v1
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

// etcdClientURLsAnnotation is what a kube-local control-plane Node
// carries: its etcd member's client URLs (kube.EtcdClientURLsAnnotation in
// cmd/capn-node/kube, which the suite may not import: a provider's tests
// see capn only as a user does — its programs, NATS and the workload API).
const etcdClientURLsAnnotation = "kube-local.capn.dev/etcd.advertise-client-urls"

// KubeCluster drives one real-Kubernetes cluster through a capn
// deployment as a user does: the capn CLI, and kubectl and etcdctl from
// Bin with the kubeconfig capn hands out. The suite's Kubernetes check
// uses it; so can a provider's or capn's own end-to-end tests.
type KubeCluster struct {
	T        *testing.T
	Capn     *Capn
	Clusters *Clusters
	// Bin holds KubeBinaries; Version is their Kubernetes version.
	Bin, Version string
	// Name is the cluster's name.
	Name string
	// Kubeconfig is the file FetchKubeconfig wrote with `capn kubeconfig`.
	Kubeconfig string
	// Kubeadm: the cluster is kubeadm's (its etcd kubeadm's stacked etcd,
	// its client URLs on the members' static Pods), not kube-local's.
	Kubeadm bool
}

// NewKubeCluster is cluster name on the deployment c, whose KV is js.
func NewKubeCluster(t *testing.T, c *Capn, js jetstream.JetStream, bin, name string) *KubeCluster {
	return &KubeCluster{T: t, Capn: c, Clusters: NewClusters(t, js), Bin: bin, Version: KubeVersion(t, bin), Name: name}
}

// KubeMachine is one Running machine as capn reports it: pool and uid from
// the desired machine, providerID from its status.
type KubeMachine struct {
	Pool, UID, ProviderID string
}

// kubernetes is the Kubernetes conformance check, as a user runs it:
// `capn apply` a kube-local cluster of 3 control-plane machines and 2
// workers; with the kubeconfig `capn kubeconfig` hands out, kubectl lists
// 5 Nodes Ready at the declared version with their machines' providerIDs
// and runs a Deployment of 3 pods; a label and a taint added to the
// workers pool reach its Nodes and leave them when removed, no machine
// replaced; `capn scale` takes the control plane
// 3 → 5 → 3 and etcd's voting members follow, every endpoint healthy
// (etcdctl); a worker whose kubelet stops (Kubernetes.StopKubelet; its
// Node NotReady) is repaired by the remediator — rebooted or replaced —
// and the cluster is Ready again; a worker deleted behind capn's back
// (OutOfBandDelete: kill -9 of its process) goes away, capn replaces it
// and deletes its Node;
// `capn delete` leaves nothing behind (Leftovers) and nothing in KV.
func (s *suite) kubernetes(t *testing.T, e *Env) {
	if s.f.Kubernetes.Kubeadm != nil {
		s.kubernetesKubeadm(t, e)
		return
	}
	if s.f.OutOfBandDelete == nil || s.f.Leftovers == nil || s.f.Disk == nil {
		t.Fatal("the Kubernetes check needs Features.OutOfBandDelete, Leftovers and Disk")
	}
	begin := time.Now()
	bins, c := s.startRealKubernetes(t, e)
	bin := bins[len(bins)-1].Dir
	k := NewKubeCluster(t, c, e.JS, bin, e.Cluster)
	readFile := func(machine, path string) ([]byte, bool) { return s.f.Disk.Read(t, e, e.Cluster, machine, path) }
	t.Logf("capn deployment up in %.1fs: NATS %s, gateway %s, provider %s with %s", time.Since(begin).Seconds(), e.NATSURL, c.Server, e.Provider, bin)

	// --- apply: capn makes the cluster Ready -------------------------------
	const cps = 3
	applied := time.Now()
	manifest := fmt.Sprintf(kubeManifest, e.Cluster, k.Version, e.Provider, e.Provider)
	k.Apply(manifest)
	k.Clusters.WaitReady(e.Cluster, 6*time.Minute)
	ready := time.Since(applied)
	t.Logf("cluster %s Ready in capn %.1fs after capn apply", e.Cluster, ready.Seconds())
	machines := k.Running()
	if len(machines) != cps+2 {
		t.Fatalf("capn says %s is Ready with %d Running machines %v, want %d", e.Cluster, len(machines), kubeNames(machines), cps+2)
	}

	// --- the kubeconfig capn hands out, and the Nodes -----------------------
	k.FetchKubeconfig()
	s.checkKubeconfigServer(t, e, k)
	k.CheckServerVersion()
	nodesReady := k.WaitNodes(machines, 3*time.Minute)
	t.Logf("kubectl get nodes: %d Nodes Ready at %s with their machines' providerIDs %.1fs after apply", len(machines), k.Version, nodesReady.Sub(applied).Seconds())
	k.WaitEtcd(k.ControlPlane(machines), readFile, 2*time.Minute)

	// --- a Deployment of 3 pods ---------------------------------------------
	s0 := time.Now()
	dep := filepath.Join(k.Capn.Home, "deployment.yaml")
	k.Write(dep, kubeDeployment)
	Poll(t, "kubectl apply the Deployment", 2*time.Minute, func() error {
		_, err := k.Kubectl("apply", "-f", dep)
		return err
	})
	var pods string
	Poll(t, "3 pods of Deployment pause Running", 3*time.Minute, func() (err error) {
		pods, err = k.PodsRunning(3)
		return err
	})
	podsUp := time.Since(s0)
	t.Logf("Deployment pause: 3 pods Running %.1fs after kubectl apply:\n%s", podsUp.Seconds(), pods)

	// --- the workers pool's labels and taints: in place, on the Nodes --------
	machines = s.poolLabels(t, k, manifest, withPoolLabels(manifest), machines)

	// --- the control plane 3 → 5 → 3: etcd follows ---------------------------
	var scaled []string
	for _, n := range []int{5, 3} {
		s0 := time.Now()
		k.Capn.CLI("scale", e.Cluster, "--pool", "control-plane", "--replicas", strconv.Itoa(n))
		Poll(t, fmt.Sprintf("%d Running control-plane machines", n), 10*time.Minute, func() error {
			machines = k.Running()
			if got := len(k.ControlPlane(machines)); got != n || len(machines) != n+2 {
				return fmt.Errorf("%d Running machines %v, want %d control planes and 2 workers", len(machines), kubeNames(machines), n)
			}
			return nil
		})
		k.Clusters.WaitReady(e.Cluster, 5*time.Minute)
		capnDone := time.Since(s0)
		k.WaitNodes(machines, 3*time.Minute)
		members := k.WaitEtcd(k.ControlPlane(machines), readFile, 3*time.Minute)
		scaled = append(scaled, fmt.Sprintf("%d in %.1fs", n, time.Since(s0).Seconds()))
		t.Logf("control plane scaled to %d in %.1fs (capn Running and Ready %.1fs): etcd has the %d voting members %v, every endpoint healthy; kubectl lists %d Nodes Ready and no other",
			n, time.Since(s0).Seconds(), capnDone.Seconds(), len(members), members, len(machines))
	}

	// --- a worker whose kubelet stops: capn repairs it -----------------------
	machines = s.kubeletStops(t, e, k, machines)

	// --- a worker deleted behind capn's back: capn replaces it ---------------
	_, replacedIn, replacedReady := s.outOfBandReplace(t, e, k, machines, 5*time.Minute, 3*time.Minute)

	// --- delete: nothing left -------------------------------------------------
	deleteTook := s.deleteClusterLeavesNothing(t, e, k, cps+2, 4*time.Minute)
	t.Logf("figures (3 control planes, 2 workers, %s): capn Ready %.1fs after apply; all Nodes Ready %.1fs after apply; 3 pods Running %.1fs; control plane scaled to %s; after a worker was deleted behind capn's back: replacement Running %.1fs, Nodes right %.1fs; delete %.1fs; whole check %.1fs",
		e.Provider, ready.Seconds(), nodesReady.Sub(applied).Seconds(), podsUp.Seconds(), strings.Join(scaled, ", then "), replacedIn.Seconds(), replacedReady.Seconds(),
		deleteTook.Seconds(), time.Since(begin).Seconds())
}

// outOfBandReplace is the Kubernetes check's step "a worker deleted
// behind capn's back is replaced": Features.OutOfBandDelete removes the
// first worker of machines; capn replaces it (a new Running machine, a
// new uid) within replace, nothing naming it is left (Leftovers), and
// within nodes exactly one Ready Node per Running machine is listed — the
// dead machine's Node deleted by capn (the health-watcher), as Cluster
// API's machine controller deletes a deleted machine's Node. It returns
// the Running machines after, and how long the replacement and the Nodes
// took from the delete.
func (s *suite) outOfBandReplace(t *testing.T, e *Env, k *KubeCluster, machines map[string]KubeMachine, replace, nodes time.Duration) (map[string]KubeMachine, time.Duration, time.Duration) {
	t.Helper()
	var victim string
	for name, m := range machines {
		if m.Pool == kubeWorkerPool && (victim == "" || name < victim) {
			victim = name
		}
	}
	if victim == "" {
		t.Fatalf("no worker among %v", kubeNames(machines))
	}
	if before := s.leftoversOf(t, e, victim); len(before) == 0 {
		t.Fatalf("Leftovers lists nothing naming the running worker %s: it cannot show what the kill leaves", victim)
	}
	killed := time.Now()
	s.f.OutOfBandDelete(t, e, e.Cluster, victim)
	var after map[string]KubeMachine
	Poll(t, "capn replacing "+victim+" with a new Running machine", replace, func() error {
		after = k.Running()
		if len(after) != len(machines) {
			return fmt.Errorf("%d Running machines %v, want %d", len(after), kubeNames(after), len(machines))
		}
		for name, m := range after {
			if m.UID == machines[victim].UID {
				return fmt.Errorf("%s is still the deleted machine (uid %s)", name, m.UID)
			}
		}
		return nil
	})
	replacedIn := time.Since(killed)
	s.waitNothingOf(t, e, victim)
	replacedReady := k.WaitNodes(after, nodes).Sub(killed)
	t.Logf("capn replaced %s %.1fs after it was deleted behind its back; the dead Node gone and the replacement's Node Ready %.1fs after", victim, replacedIn.Seconds(), replacedReady.Seconds())
	return after, replacedIn, replacedReady
}

// leftoversOf are the things Leftovers lists that name machine.
func (s *suite) leftoversOf(t *testing.T, e *Env, machine string) []string {
	var out []string
	for _, l := range s.f.Leftovers(t, e, e.Cluster) {
		if strings.Contains(l, machine) {
			out = append(out, l)
		}
	}
	return out
}

// waitNothingOf waits (a minute) until Leftovers lists nothing naming
// machine, a machine deleted.
func (s *suite) waitNothingOf(t *testing.T, e *Env, machine string) {
	t.Helper()
	Poll(t, "nothing of the deleted worker "+machine+" left on the host", time.Minute, func() error {
		if left := s.leftoversOf(t, e, machine); len(left) > 0 {
			return fmt.Errorf("still there: %v", left)
		}
		return nil
	})
}

// deleteClusterLeavesNothing is the Kubernetes check's last step: `capn delete
// cluster --wait` (within wait), then nothing of the cluster in KV nor
// on the host (Leftovers, which must list at least one thing per machine
// of the n before). It returns how long the delete took.
func (s *suite) deleteClusterLeavesNothing(t *testing.T, e *Env, k *KubeCluster, n int, wait time.Duration) time.Duration {
	t.Helper()
	if left := s.f.Leftovers(t, e, e.Cluster); len(left) < n {
		t.Fatalf("before the delete, Leftovers lists %d things for %d machines: it cannot show what a delete leaves (%v)", len(left), n, left)
	}
	deleted := time.Now()
	k.Capn.CLI("delete", "cluster", e.Cluster, "--wait", "--timeout", wait.String())
	k.Clusters.WaitGone(e.Cluster, []string{e.Provider}, 2*time.Minute)
	Poll(t, "nothing of the cluster left on the host", 2*time.Minute, func() error {
		if left := s.f.Leftovers(t, e, e.Cluster); len(left) > 0 {
			return fmt.Errorf("left:\n%s", strings.Join(left, "\n"))
		}
		return nil
	})
	return time.Since(deleted)
}

// Apply writes manifest to a file and runs `capn apply -f` with it.
func (k *KubeCluster) Apply(manifest string) {
	k.T.Helper()
	path := filepath.Join(k.Capn.Home, k.Name+".yaml")
	k.Write(path, manifest)
	k.Capn.CLI("apply", "-f", path)
}

// FetchKubeconfig writes the cluster's admin kubeconfig with `capn
// kubeconfig NAME -o FILE` into Kubeconfig.
func (k *KubeCluster) FetchKubeconfig() {
	k.T.Helper()
	k.Kubeconfig = filepath.Join(k.Capn.Home, k.Name+".kubeconfig")
	k.Capn.CLI("kubeconfig", k.Name, "-o", k.Kubeconfig)
}

// Write writes a file (0644).
func (k *KubeCluster) Write(path, content string) {
	k.T.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		k.T.Fatal(err)
	}
}

// Run runs a binary of Bin and returns its standard output.
func (k *KubeCluster) Run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(k.Bin, name), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + k.Capn.Home}
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return string(out), err
	}
	return string(out), nil
}

// Kubectl runs kubectl with Kubeconfig.
func (k *KubeCluster) Kubectl(args ...string) (string, error) {
	return k.Run("kubectl", append([]string{"--kubeconfig=" + k.Kubeconfig, "--request-timeout=20s"}, args...)...)
}

// Running are the cluster's Running machines as capn reports them.
func (k *KubeCluster) Running() map[string]KubeMachine {
	k.T.Helper()
	prefix := keys.MachinesOf(k.Name)
	specs, err := k.Clusters.wanted.List(context.Background(), prefix)
	if err != nil {
		k.T.Fatal(err)
	}
	statuses := k.Clusters.Machines(k.Name)
	out := map[string]KubeMachine{}
	for _, e := range specs {
		name := strings.TrimPrefix(e.Key, prefix)
		if st := statuses[name]; st.GetPhaseValue() == capnv1.MachineRunning && e.Value.GetMetadata().GetDeletionTimestamp() == nil {
			out[name] = KubeMachine{Pool: e.Value.GetSpec().GetPool(), UID: e.Value.GetMetadata().GetUid(), ProviderID: st.GetProviderId()}
		}
	}
	return out
}

func kubeNames(ms map[string]KubeMachine) []string {
	var out []string
	for n, m := range ms {
		out = append(out, n+"("+m.Pool+")")
	}
	sort.Strings(out)
	return out
}

// ControlPlane are the names of the control-plane machines among machines.
func (k *KubeCluster) ControlPlane(machines map[string]KubeMachine) []string {
	var out []string
	for name, m := range machines {
		if m.Pool == "control-plane" {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// CheckServerVersion: the kubeconfig reaches an API server of the
// declared version through the endpoint, with TLS capn's CA verifies.
func (k *KubeCluster) CheckServerVersion() {
	k.T.Helper()
	var out string
	Poll(k.T, "kubectl version with capn's kubeconfig", 2*time.Minute, func() (err error) {
		out, err = k.Kubectl("version", "-o", "json")
		return err
	})
	var v struct {
		ServerVersion struct{ GitVersion string } `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.ServerVersion.GitVersion != k.Version {
		k.T.Fatalf("kubectl version: want server %s, got %q (%v)\n%s", k.Version, v.ServerVersion.GitVersion, err, out)
	}
}

// kubeNodes is what the check reads of `kubectl get nodes -o json`.
type kubeNodes struct {
	Items []struct {
		Metadata struct {
			Name        string            `json:"name"`
			Annotations map[string]string `json:"annotations"`
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

// WaitNodes waits until `kubectl get nodes` lists exactly one Node per
// machine, Ready, of the declared version, with the machine's providerID,
// and returns when.
func (k *KubeCluster) WaitNodes(machines map[string]KubeMachine, timeout time.Duration) time.Time {
	k.T.Helper()
	Poll(k.T, fmt.Sprintf("exactly %d Nodes, Ready at %s", len(machines), k.Version), timeout, func() error {
		out, err := k.Kubectl("get", "nodes", "-o", "json")
		if err != nil {
			return err
		}
		var l kubeNodes
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
				problems = append(problems, fmt.Sprintf("Node %s is no Running machine of capn's %v", name, kubeNames(machines)))
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
			if n.Status.NodeInfo.KubeletVersion != k.Version {
				problems = append(problems, fmt.Sprintf("Node %s kubeletVersion %q, want %s", name, n.Status.NodeInfo.KubeletVersion, k.Version))
			}
			if m.ProviderID == "" || n.Spec.ProviderID != m.ProviderID {
				problems = append(problems, fmt.Sprintf("Node %s providerID %q, capn's machine says %q", name, n.Spec.ProviderID, m.ProviderID))
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

// PodsRunning is nil when n pods of Deployment pause are Running.
func (k *KubeCluster) PodsRunning(n int) (string, error) {
	out, err := k.Kubectl("get", "pods", "-n", "default", "-l", "app=pause", "-o",
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
