package conformance

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// day2Manifest is the day-2 check's cluster: 3 control planes and 3
// workers at the older version, the workers rolled one at a time (a new
// one first, then an old one drained and deleted). labels is the workers'
// labels and taints block, indented for the pool ("" for none).
const day2Manifest = `apiVersion: capn.dev/v1alpha1
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
    replicas: %d
    strategy: {maxSurge: 1, maxUnavailable: 0}
%s`

// day2Web is 6 pods spread over the workers, and a PodDisruptionBudget
// that lets one go at a time.
const day2Web = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 6
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      automountServiceAccountToken: false
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: ScheduleAnyway
        labelSelector:
          matchLabels: {app: web}
      containers:
      - name: web
        image: web
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: web-pdb
  namespace: default
spec:
  minAvailable: 5
  selector:
    matchLabels: {app: web}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: day2
  namespace: default
data:
  written: before-the-upgrade
`

// kubernetesDay2 is the Kubernetes check's second half, issue 18's proof
// that capn's day-2 operations are safe for workloads on a real control
// plane (real etcd, API server, controller-manager and scheduler; kwok
// for the kubelets): a cluster at the older of two Kubernetes versions is
// upgraded to the newer with a PodDisruptionBudget in force, its workers
// scaled down, a machine held by a pre-drain hook, hibernated and woken.
// (The pool's labels and taints changing in place is the Kubernetes
// check's step.)
func (s *suite) kubernetesDay2(t *testing.T, e *Env) {
	begin := time.Now()
	bins, c := s.startRealKubernetes(t, e)
	if len(bins) < 2 {
		t.Fatalf("the day-2 check upgrades across two Kubernetes versions; the binaries found are only %v: run make kube (KUBE_VERSIONS)", bins)
	}
	older, newer := bins[len(bins)-2], bins[len(bins)-1]
	k := NewKubeCluster(t, c, e.JS, newer.Dir, e.Cluster) // kubectl and etcdctl of the newer version
	k.Version = older.Version
	readFile := func(machine, path string) ([]byte, bool) { return s.f.Disk.Read(t, e, e.Cluster, machine, path) }
	figures := map[string]string{}

	// --- create at the older version --------------------------------------
	applied := time.Now()
	k.Apply(fmt.Sprintf(day2Manifest, e.Cluster, older.Version, e.Provider, e.Provider, 3, ""))
	k.Clusters.WaitReady(e.Cluster, 8*time.Minute)
	machines := k.Running()
	k.FetchKubeconfig()
	k.WaitNodes(machines, 3*time.Minute)
	figures["create"] = fmt.Sprintf("%.1fs", time.Since(applied).Seconds())
	t.Logf("3 control planes and 3 workers at %s: cluster Ready and every Node Ready %.1fs after capn apply", older.Version, time.Since(applied).Seconds())
	pki := k.etcdPKI(k.ControlPlane(machines)[0], readFile)
	k.WaitEtcd(k.ControlPlane(machines), readFile, 2*time.Minute)

	web := filepath.Join(k.Capn.Home, "web.yaml")
	k.Write(web, day2Web)
	Poll(t, "kubectl apply the Deployment web, its PDB and a ConfigMap", 2*time.Minute, func() error {
		_, err := k.Kubectl("apply", "-f", web)
		return err
	})
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	pods := k.WatchPods(ctx, &wg, "app=web")
	nodes := k.WatchNodes(ctx, &wg, "app=web")
	Poll(t, "6 pods of Deployment web Ready", 3*time.Minute, func() error {
		if n := pods.Ready(); n != 6 {
			return fmt.Errorf("%d Ready", n)
		}
		return nil
	})
	Poll(t, "PodDisruptionBudget web-pdb allows 1 disruption", 2*time.Minute, func() error {
		out, err := k.Kubectl("get", "pdb", "web-pdb", "-n", "default", "-o", "jsonpath={.status.currentHealthy}/{.status.disruptionsAllowed}")
		if err != nil || strings.TrimSpace(out) != "6/1" {
			return fmt.Errorf("currentHealthy/disruptionsAllowed %q (%v)", out, err)
		}
		return nil
	})

	// --- upgrade to the newer version -------------------------------------
	pods.ResetMin()
	api := k.WatchAPI(ctx, &wg, "/api/v1/namespaces/default/configmaps/day2")
	etcd := k.WatchEtcd(ctx, &wg, pki)
	up := time.Now()
	k.Capn.CLI("upgrade", e.Cluster, "--version", newer.Version, "--wait")
	k.Version = newer.Version
	machines = k.Running()
	k.WaitNodes(machines, 3*time.Minute)
	k.WaitEtcd(k.ControlPlane(machines), readFile, 2*time.Minute)
	upgraded := time.Since(up)
	drains := nodes.Drains()
	if stranded := nodes.StrandedPods(); len(stranded) > 0 {
		t.Errorf("Nodes deleted with pods of web still bound to them (no drain): %v", stranded)
	}
	if m := pods.Minimum(); m < 5 {
		t.Errorf("during the upgrade only %d pods of web were Ready: the PodDisruptionBudget (minAvailable 5) was violated", m)
	}
	if f := etcd.Fewest(); f < 3 {
		t.Errorf("during the upgrade etcd had %d voting members, want 3 or more throughout: %s", f, etcd.Report())
	}
	t.Logf("upgrade %s → %s: %.1fs; fewest Ready pods of web %d (PDB minAvailable 5); etcd %s; API through the endpoint: %s; drains (cordon → Node deleted): %s",
		older.Version, newer.Version, upgraded.Seconds(), pods.Minimum(), etcd.Report(), api.Report(), fmtDurations(drains))
	figures["upgrade"] = fmt.Sprintf("%.1fs (fewest Ready pods %d of 6; API errors and longest gap: %s)", upgraded.Seconds(), pods.Minimum(), api.Report())
	figures["drain per node"] = "median " + median(drains)

	// --- scale the workers 3 → 2: the removed Node is drained first --------
	before, deletedBefore := len(nodes.Drains()), nodes.DeletedCount()
	pods.ResetMin()
	sc := time.Now()
	k.Capn.CLI("scale", e.Cluster, "--pool", kubeWorkerPool, "--replicas", "2", "--wait")
	Poll(t, "2 workers Running", 5*time.Minute, func() error {
		machines = k.Running()
		if w := len(machines) - len(k.ControlPlane(machines)); w != 2 {
			return fmt.Errorf("%d workers Running: %v", w, kubeNames(machines))
		}
		return nil
	})
	k.WaitNodes(machines, 3*time.Minute)
	Poll(t, "the Node witness saw the removed worker's Node deleted", 2*time.Minute, func() error {
		if n := nodes.DeletedCount(); n < deletedBefore+1 {
			return fmt.Errorf("%d Nodes deleted, want %d", n, deletedBefore+1)
		}
		return nil
	})
	if after := nodes.Drains(); len(after) != before+1 {
		t.Errorf("scale 3 → 2: %d Nodes cordoned and deleted, want 1 more than %d", len(after), before)
	}
	if stranded := nodes.StrandedPods(); len(stranded) > 0 {
		t.Errorf("Nodes deleted with pods of web still bound to them: %v", stranded)
	}
	if m := pods.Minimum(); m < 5 {
		t.Errorf("during the scale-down only %d pods of web were Ready", m)
	}
	figures["scale workers 3 → 2"] = fmt.Sprintf("%.1fs", time.Since(sc).Seconds())

	// --- a pre-drain hook holds a deletion until released ------------------
	s.day2Hook(t, k, nodes, figures)
	machines = k.Running()

	uids := map[string]string{}
	for n, m := range machines {
		uids[n] = m.UID
	}

	// --- hibernate and wake --------------------------------------------------
	hb := time.Now()
	k.Capn.CLI("hibernate", e.Cluster, "--wait")
	figures["hibernate"] = fmt.Sprintf("%.1fs", time.Since(hb).Seconds())
	wk := time.Now()
	k.Capn.CLI("wake", e.Cluster, "--wait")
	machines = k.Running()
	k.WaitNodes(machines, 3*time.Minute)
	Poll(t, "6 pods of web Ready after the wake", 3*time.Minute, func() error {
		if n := pods.Ready(); n != 6 {
			return fmt.Errorf("%d Ready", n)
		}
		return nil
	})
	figures["wake"] = fmt.Sprintf("%.1fs", time.Since(wk).Seconds())
	if out, err := k.Kubectl("get", "configmap", "day2", "-n", "default", "-o", "jsonpath={.data.written}"); err != nil || out != "before-the-upgrade" {
		t.Errorf("ConfigMap day2 after upgrade, hibernate and wake: %q (%v), want the data written before", out, err)
	}
	for n, m := range k.Running() {
		if uids[n] != "" && uids[n] != m.UID {
			t.Errorf("hibernate/wake replaced machine %s", n)
		}
	}
	stop()
	wg.Wait()

	k.Capn.CLI("delete", "cluster", e.Cluster, "--wait", "--timeout", "4m")
	k.Clusters.WaitGone(e.Cluster, []string{e.Provider}, 2*time.Minute)
	var rows []string
	for _, step := range []string{"create", "upgrade", "drain per node", "scale workers 3 → 2", "pre-drain hook", "hibernate", "wake"} {
		rows = append(rows, fmt.Sprintf("| %s | %s |", step, figures[step]))
	}
	t.Logf("real cluster figures (3 control planes, 3 workers, %s → %s, %s; whole check %.1fs):\n| step | time |\n|---|---|\n%s",
		older.Version, newer.Version, e.Provider, time.Since(begin).Seconds(), strings.Join(rows, "\n"))
}

// day2Hook: a pre-drain hook on a worker holds its deletion (`capn delete
// machine`) — the machine stays Deleting, its Node schedulable, while its
// replacement comes up — until the hook is released; then the Node is
// drained and deleted.
func (s *suite) day2Hook(t *testing.T, k *KubeCluster, nodes *NodeWitness, figures map[string]string) {
	var victim string
	for name, m := range k.Running() {
		if m.Pool == kubeWorkerPool && (victim == "" || name < victim) {
			victim = name
		}
	}
	k.Capn.CLI("hook", "add", k.Name, victim, "--phase", "pre-drain", "--name", "conformance", "--holder", "conformance-suite")
	k.Capn.CLI("delete", "machine", victim, "--cluster", k.Name)
	held := time.Now()
	status := func() *capnv1.MachineStatus { return k.Clusters.Machines(k.Name)[victim] }
	Poll(t, victim+" Deleting, held by the pre-drain hook", 2*time.Minute, func() error {
		st := status()
		for _, c := range st.GetConditions() {
			if c.GetType() == "PreDrainDeleteHookSucceeded" && c.GetStatus() == "False" {
				return nil
			}
		}
		return fmt.Errorf("%s is %s with conditions %v", victim, st.GetPhase(), st.GetConditions())
	})
	// The replacement comes up while the victim is held: many passes of
	// every service, and still no drain.
	Poll(t, "a replacement worker Running", 5*time.Minute, func() error {
		if w := len(k.Running()) - len(k.ControlPlane(k.Running())); w < 2 {
			return fmt.Errorf("%d workers Running besides %s", w, victim)
		}
		return nil
	})
	if st := status(); st.GetPhaseValue() != capnv1.MachineDeleting {
		t.Fatalf("%s is %s, want still Deleting while the hook holds it", victim, st.GetPhase())
	}
	nodes.mu.Lock()
	_, cordoned := nodes.Cordoned[victim]
	nodes.mu.Unlock()
	if cordoned {
		t.Fatalf("Node %s was cordoned while a pre-drain hook held its machine", victim)
	}
	heldFor := time.Since(held)
	k.Capn.CLI("hook", "release", k.Name, victim, "--phase", "pre-drain", "--name", "conformance", "--holder", "conformance-suite")
	rel := time.Now()
	Poll(t, victim+" gone after the hook's release", 5*time.Minute, func() error {
		if st, ok := k.Clusters.Machines(k.Name)[victim]; ok {
			return fmt.Errorf("%s is %s", victim, st.GetPhase())
		}
		return nil
	})
	// The witness records a deletion after asking which pods were left on
	// the Node: wait for it to have seen the deletion.
	Poll(t, "the Node witness saw "+victim+"'s Node deleted", time.Minute, func() error {
		if !nodes.SawDeleted(victim) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	if _, ok := nodes.Drains()[victim]; !ok {
		t.Errorf("Node %s was not cordoned before it was deleted", victim)
	}
	figures["pre-drain hook"] = fmt.Sprintf("held %.1fs (until released), then drained and deleted in %.1fs", heldFor.Seconds(), time.Since(rel).Seconds())
}

func fmtDurations(d map[string]time.Duration) string {
	names := slices.Sorted(maps.Keys(d))
	var out []string
	for _, n := range names {
		out = append(out, fmt.Sprintf("%s %.1fs", n, d[n].Seconds()))
	}
	return strings.Join(out, ", ")
}

func median(d map[string]time.Duration) string {
	if len(d) == 0 {
		return "n/a"
	}
	v := slices.Collect(maps.Values(d))
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	return fmt.Sprintf("%.1fs of %d (max %.1fs)", v[len(v)/2].Seconds(), len(v), v[len(v)-1].Seconds())
}
