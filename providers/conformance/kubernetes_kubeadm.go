package conformance

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

// Kubeadm is the kubeadm flavour of the Kubernetes check, for a provider
// whose machines are real Linux nodes that run capn's kubeadm bootstrap
// data (kubeadm init and join, a kubelet, containerd, a CNI): issue 26's
// proof that containers really run.
type Kubeadm struct {
	// Manifest is the cluster the check applies, given its name and the
	// Kubernetes version of Kubernetes.Bin: kubeadm bootstrap
	// (spec.bootstrap.provider: kubeadm), one control-plane machine and one
	// worker pool named "workers" of 2 machines, all on the provider, with
	// what its nodes need of kubeadm and the kubelet (network, kubelet
	// arguments). The check checks that shape, and sets the workers pool's
	// health policy itself (a Node Ready=Unknown for 30s is unhealthy, one
	// of the pool may be repaired at a time).
	Manifest func(cluster, version string) string
	// WebImage is the reference of the project's web server image
	// (tests/node/testdata/web, built FROM scratch by `capn-node image`)
	// that every node of the provider has: the check's Deployment runs it
	// with imagePullPolicy Never.
	WebImage string
	// Ready, optional, runs the provider's own checks on the Ready
	// cluster, once the web Service answered (e.g. a restart of the
	// provider while its nodes run on). When it returns the cluster must
	// be as it was: the same Running machines, every Node Ready.
	Ready func(t *testing.T, e *Env, k *KubeCluster)
}

// kubeadmWeb is the check's Deployment of the web server (3 pods on the
// workers, spread over them: at most one more on a node than on another,
// counting the pods of one revision on the Nodes they may run on — not
// the control plane's, cordoned or unreachable ones) and its ClusterIP
// Service. Format: image, token.
const kubeadmWeb = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 3
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
        whenUnsatisfiable: DoNotSchedule
        nodeTaintsPolicy: Honor
        labelSelector:
          matchLabels: {app: web}
        matchLabelKeys: [pod-template-hash]
      containers:
      - name: web
        image: %s
        imagePullPolicy: Never
        env:
        - {name: CAPN_WEB_TOKEN, value: %q}
        ports:
        - containerPort: 8080
        readinessProbe:
          httpGet: {path: /, port: 8080}
          periodSeconds: 2
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080, protocol: TCP}
`

// kubeadmManifests checks the shape of the provider's manifest and
// returns it with the check's health policy on the workers pool, and the
// same with the pool's label and taint (the poolLabels step), both as
// YAML for `capn apply`.
func kubeadmManifests(src, cluster, provider, version string) (plain, labeled string, err error) {
	c, err := manifest.Decode([]byte(src))
	if err != nil {
		return "", "", fmt.Errorf("Kubernetes.Kubeadm.Manifest: %w", err)
	}
	sp := c.GetSpec()
	var problems []error
	want := func(ok bool, format string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Errorf("Kubernetes.Kubeadm.Manifest: "+format, args...))
		}
	}
	want(c.GetMetadata().GetName() == cluster, "metadata.name %q, want the check's cluster %q", c.GetMetadata().GetName(), cluster)
	want(sp.GetKubernetesVersion() == version, "spec.kubernetesVersion %q, want %s (Kubernetes.Bin's)", sp.GetKubernetesVersion(), version)
	want(sp.GetBootstrap().GetProvider() == "kubeadm", "spec.bootstrap.provider %q, want kubeadm", sp.GetBootstrap().GetProvider())
	want(sp.GetControlPlane().GetProvider() == provider && sp.GetControlPlane().GetReplicas() == 1,
		"spec.controlPlane: provider %q, replicas %d; want %s, 1", sp.GetControlPlane().GetProvider(), sp.GetControlPlane().GetReplicas(), provider)
	pools := sp.GetWorkerPools()
	if len(pools) != 1 {
		want(false, "spec.workerPools: %d pools, want one named %s", len(pools), kubeWorkerPool)
	} else {
		p := pools[0]
		want(p.GetName() == kubeWorkerPool && p.GetProvider() == provider && p.GetReplicas() == 2,
			"spec.workerPools[0]: name %q, provider %q, replicas %d; want %s, %s, 2", p.GetName(), p.GetProvider(), p.GetReplicas(), kubeWorkerPool, provider)
		want(len(p.GetLabels()) == 0 && len(p.GetTaints()) == 0, "spec.workerPools[0]: labels %v, taints %v; want none (the check adds its own)", p.GetLabels(), p.GetTaints())
		p.Health = &capnv1.HealthPolicy{
			UnhealthyConditions: []*capnv1.UnhealthyCondition{
				{Type: "Ready", Status: "Unknown", Timeout: durationpb.New(30 * time.Second)},
				{Type: "Ready", Status: "False", Timeout: durationpb.New(5 * time.Minute)},
			},
			MaxUnhealthy: "1",
		}
	}
	if len(problems) > 0 {
		return "", "", errors.Join(problems...)
	}
	b, err := manifest.Encode(c)
	if err != nil {
		return "", "", err
	}
	l := proto.Clone(c).(*capnv1.Cluster)
	p := l.GetSpec().GetWorkerPools()[0]
	p.Labels = map[string]string{poolLabelKey: poolLabelValue}
	p.Taints = []*capnv1.Taint{{Key: poolTaintKey, Value: poolTaintValue, Effect: poolTaintEffect}}
	lb, err := manifest.Encode(l)
	if err != nil {
		return "", "", err
	}
	return string(b), string(lb), nil
}

// kubernetesKubeadm is the Kubernetes check on a provider whose machines
// are kubeadm nodes (Kubernetes.Kubeadm), as a user runs it with the capn
// CLI and kubectl with the kubeconfig `capn kubeconfig` hands out:
//   - `capn apply` of 1 control plane and 2 workers: capn Ready, 3 Nodes
//     Ready at the version with their machines' providerIDs, kubeadm's
//     etcd healthy with its 1 voting member (etcdctl with kubeadm's
//     certificates, read from the control plane's disk);
//   - a Deployment of the project's web server (3 pods over the workers)
//     with a ClusterIP Service: from a pod on one worker, the Service
//     answers through its ClusterIP and through
//     web.default.svc.cluster.local, at least once from a pod on the
//     other worker (the server's ?fetch= makes the request, asked through
//     the API server's pod proxy; its answer names the answering pod's
//     address);
//   - Kubeadm.Ready, the provider's own checks;
//   - the workers pool's label and taint reach its Nodes in place;
//   - the workers pool scaled 2 → 3 → 2 with `capn scale` (not the
//     control plane: one, for the host's memory; removing a kubeadm
//     control plane with its etcd member is a provider's own test); on
//     the way down the removed worker is drained
//     first (DrainStarted, DrainSucceeded; its web pod evicted and running
//     elsewhere, the Deployment back at 3/3), its Node deleted, nothing of
//     it left;
//   - a worker whose kubelet stops (StopKubelet) is replaced by the
//     remediator; a worker deleted behind capn's back (OutOfBandDelete) is
//     replaced, its Node deleted;
//   - `capn delete cluster --wait` leaves nothing, in KV nor on the host.
func (s *suite) kubernetesKubeadm(t *testing.T, e *Env) {
	ka := s.f.Kubernetes.Kubeadm
	var missing []string
	for _, m := range []struct {
		lacks bool
		what  string
	}{
		{s.f.OutOfBandDelete == nil, "Features.OutOfBandDelete"},
		{s.f.Leftovers == nil, "Features.Leftovers"},
		{s.f.Disk == nil || s.f.Disk.Read == nil, "Features.Disk.Read"},
		{ka.Manifest == nil, "Kubernetes.Kubeadm.Manifest"},
		{ka.WebImage == "", "Kubernetes.Kubeadm.WebImage"},
	} {
		if m.lacks {
			missing = append(missing, m.what)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("the Kubernetes check on kubeadm nodes needs %s", strings.Join(missing, ", "))
	}
	begin := time.Now()
	bins, c := s.startRealKubernetes(t, e)
	bin := bins[len(bins)-1].Dir
	k := NewKubeCluster(t, c, e.JS, bin, e.Cluster)
	k.Kubeadm = true
	readFile := func(machine, path string) ([]byte, bool) { return s.f.Disk.Read(t, e, e.Cluster, machine, path) }
	manifest, labeled, err := kubeadmManifests(ka.Manifest(e.Cluster, k.Version), e.Cluster, e.Provider, k.Version)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("capn deployment up in %.1fs: NATS %s, gateway %s, provider %s; kubectl and etcdctl from %s", time.Since(begin).Seconds(), e.NATSURL, c.Server, e.Provider, bin)

	// --- apply: capn makes the cluster Ready; the Nodes, etcd -------------
	const workers = 2
	applied := time.Now()
	k.Apply(manifest)
	k.Clusters.WaitReady(e.Cluster, 15*time.Minute)
	ready := time.Since(applied)
	t.Logf("cluster %s Ready in capn %.1fs after capn apply", e.Cluster, ready.Seconds())
	machines := k.Running()
	if len(k.ControlPlane(machines)) != 1 || len(machines) != 1+workers {
		t.Fatalf("capn says %s is Ready with the Running machines %v, want 1 control plane and %d workers", e.Cluster, kubeNames(machines), workers)
	}
	k.FetchKubeconfig()
	s.checkKubeconfigServer(t, e, k)
	k.CheckServerVersion()
	nodesReady := k.WaitNodes(machines, 5*time.Minute).Sub(applied)
	t.Logf("kubectl get nodes: %d Nodes Ready at %s with their machines' providerIDs %.1fs after apply", len(machines), k.Version, nodesReady.Seconds())
	members := k.WaitEtcd(k.ControlPlane(machines), readFile, 3*time.Minute)
	t.Logf("kubeadm's etcd: the voting members %v, every endpoint healthy (etcdctl with kubeadm's certificates)", members)

	// --- the web server's Deployment and Service ----------------------------
	token := "kubeadm-" + e.Cluster
	w := &webApp{k: k, token: token}
	s0 := time.Now()
	dep := filepath.Join(k.Capn.Home, "web.yaml")
	k.Write(dep, fmt.Sprintf(kubeadmWeb, ka.WebImage, token))
	Poll(t, "kubectl apply the web Deployment and Service", 2*time.Minute, func() error {
		_, err := k.Kubectl("apply", "-f", dep)
		return err
	})
	pods := w.wait(t, "web's 3 pods serving on both workers", 5*time.Minute, machines, 2)
	podsUp := time.Since(s0)
	t.Logf("Deployment web: 3 pods Running and Ready %.1fs after kubectl apply: %s", podsUp.Seconds(), pods)
	w.checkService(t, pods)

	if ka.Ready != nil {
		ka.Ready(t, e, k)
		if now := k.Running(); !sameMachines(now, machines) {
			t.Fatalf("after Kubeadm.Ready the Running machines are %v, were %v", kubeNames(now), kubeNames(machines))
		}
		k.WaitNodes(machines, 3*time.Minute)
	}

	// --- the workers pool's labels and taints: in place, on the Nodes --------
	machines = s.poolLabels(t, k, manifest, labeled, machines)

	// --- the workers pool 2 → 3 → 2 (not the control plane) ------------------
	t.Log("the control plane is not scaled here as on kube-local (3 → 5 → 3): this check keeps to 1 control plane for the host's memory (about 1 GiB each); a kubeadm control plane's removal with its etcd member is a provider's own test (the process provider's TestRealNodesHAControlPlane, 3 → 1); the workers pool is scaled 2 → 3 → 2 instead")
	machines, up, down := s.scaleWorkers(t, e, k, w, machines)

	// --- a worker whose kubelet stops: capn replaces it -----------------------
	machines = s.kubeletStops(t, e, k, machines)

	// --- a worker deleted behind capn's back: capn replaces it ---------------
	machines, replacedIn, replacedReady := s.outOfBandReplace(t, e, k, machines, 12*time.Minute, 5*time.Minute)
	s0 = time.Now()
	pods = w.wait(t, "web's 3 pods serving again after the repairs", 5*time.Minute, machines, 1)
	t.Logf("Deployment web back at 3/3 %.1fs after the replacement's Node was Ready: %s", time.Since(s0).Seconds(), pods)

	// --- delete: nothing left -------------------------------------------------
	deleteTook := s.deleteClusterLeavesNothing(t, e, k, len(machines), 5*time.Minute)
	t.Logf("figures (kubeadm, 1 control plane, %d workers, %s): capn Ready %.1fs after apply; all Nodes Ready %.1fs after apply; web's 3 pods Running %.1fs after kubectl apply; workers scaled up to 3 in %.1fs, down to 2 (drained first) in %.1fs; after a worker was deleted behind capn's back: replacement Running %.1fs, Nodes right %.1fs; delete %.1fs; whole check %.1fs",
		workers, e.Provider, ready.Seconds(), nodesReady.Seconds(), podsUp.Seconds(), up.Seconds(), down.Seconds(),
		replacedIn.Seconds(), replacedReady.Seconds(), deleteTook.Seconds(), time.Since(begin).Seconds())
}

// checkKubeconfigServer: the kubeconfig capn hands out names the
// cluster's endpoint, as the provider recorded it.
func (s *suite) checkKubeconfigServer(t *testing.T, e *Env, k *KubeCluster) {
	t.Helper()
	ic, ok := e.Env.Cluster(e.Provider, e.Cluster)
	if !ok {
		t.Fatalf("no infra record of cluster %s from %s", e.Cluster, e.Provider)
	}
	ep := ic.GetControlPlaneEndpoint()
	server, err := k.Kubectl("config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
	if want := fmt.Sprintf("https://%s:%d", ep.GetHost(), ep.GetPort()); err != nil || strings.TrimSpace(server) != want {
		t.Fatalf("capn kubeconfig: server %q (%v), want the cluster's endpoint %s", server, err, want)
	}
}

// sameMachines: the same machines (names and uids).
func sameMachines(a, b map[string]KubeMachine) bool {
	if len(a) != len(b) {
		return false
	}
	for n, m := range a {
		if o, ok := b[n]; !ok || o.UID != m.UID {
			return false
		}
	}
	return true
}
