package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/kubeapi/kubeapitest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// kubeBin is the directory of $CAPN_KUBE_BIN's newest version with every
// binary the test runs, or the test is skipped — failed under
// CAPN_REQUIRE_KUBE=1 (CI builds them).
func kubeBin(t *testing.T) string {
	t.Helper()
	dir, why := kubeapitest.Newest(append(slices.Clone(kube.Binaries), "kubectl")...)
	if why == "" {
		return dir
	}
	if os.Getenv("CAPN_REQUIRE_KUBE") == "1" {
		t.Fatalf("%s, and CAPN_REQUIRE_KUBE=1: build them with make kube", why)
	}
	t.Skipf("%s: build the binaries with make kube and set CAPN_KUBE_BIN=$(make -s kube-bin)", why)
	return ""
}

type kubectl struct {
	t          *testing.T
	bin, admin string
	// home keeps kubectl's cache out of the real $HOME.
	home string
}

func (k kubectl) run(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(k.bin, "kubectl"), append([]string{"--kubeconfig=" + k.admin}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+k.home, "KUBECONFIG=")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func (k kubectl) json(out any, args ...string) {
	k.t.Helper()
	s, err := k.run("", append(args, "-o", "json")...)
	if err != nil {
		k.t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(s), out); err != nil {
		k.t.Fatalf("%v: %s", err, s)
	}
}

func within(t *testing.T, timeout time.Duration, what string, ok func() (bool, string)) time.Duration {
	t.Helper()
	began := time.Now()
	if err := testkit.Poll(timeout, 500*time.Millisecond, func() error {
		if done, state := ok(); !done {
			return errors.New(state)
		}
		return nil
	}); err != nil {
		t.Fatalf("%s: not within %s (last: %s)", what, timeout, err)
	}
	return time.Since(began)
}

type nodeList struct {
	Items []struct {
		Metadata struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			ProviderID string            `json:"providerID"`
			PodCIDR    string            `json:"podCIDR"`
			Taints     []kubelocal.Taint `json:"taints"`
		} `json:"spec"`
		Status struct {
			Conditions []struct{ Type, Status string } `json:"conditions"`
			NodeInfo   struct {
				KubeletVersion string `json:"kubeletVersion"`
			} `json:"nodeInfo"`
			Addresses []struct{ Type, Address string } `json:"addresses"`
		} `json:"status"`
	} `json:"items"`
}

// olderVersion is a version a minor behind version: the older one make
// kube built, if any ($CAPN_KUBE_BIN), else vMAJOR.(MINOR-1).0 (a worker
// runs only kwok, which takes any version).
func olderVersion(t *testing.T, version string) string {
	t.Helper()
	if bins, _ := kubeapitest.Bins(os.Getenv("CAPN_KUBE_BIN"), "kwok"); len(bins) > 1 && bins[0].Version != version {
		return bins[0].Version
	}
	var major, minor, patch int
	if _, err := fmt.Sscanf(version, "v%d.%d.%d", &major, &minor, &patch); err != nil || minor == 0 {
		t.Fatalf("version %q: want vMAJOR.MINOR.PATCH with MINOR > 0", version)
	}
	return fmt.Sprintf("v%d.%d.0", major, minor-1)
}

// nodeVersions is `kubectl get nodes`' VERSION column, by Node name.
func nodeVersions(t *testing.T, k kubectl) map[string]string {
	t.Helper()
	out, err := k.run("", "get", "nodes", "--no-headers", "-o", "custom-columns=NAME:.metadata.name,VERSION:.status.nodeInfo.kubeletVersion")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) == 2 {
			got[f[0]] = f[1]
		}
	}
	return got
}

// nodeReady reads the Node's Ready condition.
func nodeReady(k kubectl, name string) (bool, string) {
	s, err := k.run("", "get", "node", name, "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}")
	if err != nil {
		return false, err.Error()
	}
	if s == "" {
		return false, "no Ready condition"
	}
	return s == "True", "Ready=" + s
}

func rss(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// TestControlPlane runs the node side of one kube-local control-plane
// machine on 127.0.0.1 from a rendered plan with a real PKI, and checks it
// with kubectl: the version, the Node Ready by kwok with its labels, a
// Deployment's 3 pods Running, the join material; then a worker (on
// 127.0.0.2) joins through a CSR and runs pods, keeps its certificate over
// a restart, and its Node goes NotReady once it is stopped; then a restart
// of the control plane over the same data dir, and that nothing is left
// running.
func TestControlPlane(t *testing.T) {
	requireLinux(t)
	bin := kubeBin(t)
	version, err := kube.BinaryVersion(t.Context(), filepath.Join(bin, "kube-apiserver"))
	if err != nil {
		t.Fatal(err)
	}
	set, _, err := pki.Ensure(pki.Set{}, pki.Options{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 5)
	p := kube.Ports{EtcdClient: ports[0], EtcdPeer: ports[1], APIServer: ports[2], ControllerManager: ports[3], Scheduler: ports[4]}
	cfg, dir := machine{
		Name: "kl-cp-0", Version: version, Host: "127.0.0.1", Port: p.APIServer,
		Labels:  map[string]string{"tier": "control", "node.kubernetes.io/pool": "cp"},
		Network: &capnv1.NetworkSpec{PodCidrs: []string{"10.244.0.0/16"}, ServiceCidrs: []string{"10.96.0.0/12"}, ServiceDomain: "cluster.local"},
	}.render(t, set)
	t.Logf("data dir %s, ports %s, Kubernetes %s", dir, p, version)

	startMachine := func(cfg *kubelocal.NodeConfig, dir, address string) (*kube.Runtime, func()) {
		return runMachine(t, cfg, kube.Options{BinDir: bin, DataDir: dir, Address: address, ProviderID: "process://kl/" + cfg.NodeName, Ports: p})
	}
	start := func() (*kube.Runtime, func()) { return startMachine(cfg, dir, "127.0.0.1") }

	rt, stop := start()
	k := kubectl{t: t, bin: bin, admin: rt.Layout().AdminKubeconfig(), home: t.TempDir()}

	apiReady := within(t, 4*time.Minute, "kube-apiserver /readyz", func() (bool, string) {
		c, _ := rt.Condition()
		return rt.Ready(), c.Reason + ": " + c.Message
	})
	t.Logf("kube-apiserver ready %s after start", apiReady.Round(time.Millisecond))

	var v struct {
		ServerVersion struct{ GitVersion string } `json:"serverVersion"`
	}
	k.json(&v, "version")
	if v.ServerVersion.GitVersion != cfg.KubernetesVersion {
		t.Errorf("server version %s, declared %s", v.ServerVersion.GitVersion, cfg.KubernetesVersion)
	}

	cpReady := within(t, 3*time.Minute, "Node kl-cp-0 Ready", func() (bool, string) { return nodeReady(k, "kl-cp-0") })
	t.Logf("Node Ready %s after start", (apiReady + cpReady).Round(time.Millisecond))
	var nodes nodeList
	k.json(&nodes, "get", "nodes")
	if len(nodes.Items) != 1 {
		t.Fatalf("%d nodes, want the control plane's", len(nodes.Items))
	}
	n := nodes.Items[0]
	if n.Metadata.Name != "kl-cp-0" || n.Spec.ProviderID != "process://kl/kl-cp-0" || n.Status.NodeInfo.KubeletVersion != version {
		t.Errorf("node %s providerID %s kubeletVersion %s", n.Metadata.Name, n.Spec.ProviderID, n.Status.NodeInfo.KubeletVersion)
	}
	for key, want := range map[string]string{"node-role.kubernetes.io/control-plane": "", "tier": "control", "node.kubernetes.io/pool": "cp", "kubernetes.io/hostname": "kl-cp-0"} {
		if got, ok := n.Metadata.Labels[key]; !ok || got != want {
			t.Errorf("label %s = %q (%v), want %q", key, got, ok, want)
		}
	}
	if !slices.Contains(n.Spec.Taints, kubelocal.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: "NoSchedule"}) {
		t.Errorf("taints %+v", n.Spec.Taints)
	}
	if !slices.Contains(n.Status.Addresses, struct{ Type, Address string }{"InternalIP", "127.0.0.1"}) {
		t.Errorf("addresses %+v", n.Status.Addresses)
	}

	// kwok runs pods: a Deployment of 3 that tolerates the control-plane taint.
	const deploy = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
      containers: [{name: web, image: registry.k8s.io/pause:3.10}]
`
	if _, err := k.run(deploy, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	podsRunning := within(t, 3*time.Minute, "3 pods Running", func() (bool, string) {
		s, err := k.run("", "get", "pods", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.status.phase}/{.spec.nodeName}/{.status.podIP} {end}")
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, f := range strings.Fields(s) {
			if strings.HasPrefix(f, "Running/kl-cp-0/10.244.") {
				running++
			}
		}
		return running == 3, s
	})
	t.Logf("3 pods Running %s after the Deployment was applied", podsRunning.Round(time.Millisecond))

	// The join material, as kubeadm's bootstrap-token phase leaves it.
	var sec struct {
		Type string            `json:"type"`
		Data map[string]string `json:"data"`
	}
	k.json(&sec, "get", "secret", "-n", "kube-system", "bootstrap-token-abcdef")
	if sec.Type != "bootstrap.kubernetes.io/token" || sec.Data["auth-extra-groups"] == "" || sec.Data["expiration"] == "" {
		t.Errorf("token secret %+v", sec)
	}
	for _, crb := range []string{"kubeadm:kubelet-bootstrap", "kubeadm:node-autoapprove-bootstrap", "kubeadm:node-autoapprove-certificate-rotation", "kubeadm:get-nodes", "kubeadm:apiserver-kubelet-client"} {
		if _, err := k.run("", "get", "clusterrolebinding", crb); err != nil {
			t.Error(err)
		}
	}
	// The bootstrap token really authenticates, in the join group.
	tokenConf := filepath.Join(t.TempDir(), "token.conf")
	if err := os.WriteFile(tokenConf, fmt.Appendf(nil, "apiVersion: v1\nkind: Config\nclusters: [{name: kl, cluster: {server: 'https://127.0.0.1:%d', certificate-authority: '%s'}}]\nusers: [{name: joiner, user: {token: '%s'}}]\ncontexts: [{name: j, context: {cluster: kl, user: joiner}}]\ncurrent-context: j\n",
		p.APIServer, filepath.Join(rt.Layout().PKIDir(), "ca.crt"), cfg.BootstrapToken), 0o600); err != nil {
		t.Fatal(err)
	}
	joiner := kubectl{t: t, bin: bin, admin: tokenConf, home: k.home}
	if out, err := joiner.run("", "auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}"); err != nil || !strings.Contains(out, "system:bootstrappers:kubeadm:default-node-token") {
		t.Errorf("whoami with the bootstrap token: %q %v", out, err)
	}
	// ...and may post CSRs and get nodes, as kubeadm's RBAC allows, but not list secrets.
	for args, want := range map[string]string{"create certificatesigningrequests": "yes", "get nodes": "yes", "list secrets": "no"} {
		out, _ := joiner.run("", append([]string{"auth", "can-i"}, strings.Fields(args)...)...)
		if strings.TrimSpace(out) != want {
			t.Errorf("bootstrap token can-i %s: %q, want %s", args, out, want)
		}
	}
	// The controller-manager's bootstrapsigner signs cluster-info with the
	// token, as joining nodes expect.
	within(t, time.Minute, "cluster-info signed with the bootstrap token", func() (bool, string) {
		out, err := k.run("", "get", "configmap", "-n", "kube-public", "cluster-info", "-o", "jsonpath={.data}")
		return err == nil && strings.Contains(out, "jws-kubeconfig-abcdef"), out
	})

	// A worker joins as a kubelet's TLS bootstrap does. Its token is its
	// own, registered in the cluster as the bootstrapper would. It is a
	// minor behind the control plane, as a pool is in the middle of an
	// upgrade: its Node reports its own version.
	wtok := token.Token{ID: "wrkr01", Secret: "0123456789wrkr01"}
	wversion := olderVersion(t, version)
	wcfg, wdir := machine{
		Name: "kl-md-0", Role: bootstrap.RoleWorker, Version: wversion, Host: "127.0.0.1", Port: p.APIServer, Token: wtok,
		Labels: map[string]string{"node.kubernetes.io/pool": "md-0"},
	}.render(t, set)
	secret, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": token.SecretType,
		"metadata":   map[string]any{"name": token.SecretName(wtok), "namespace": token.SecretNamespace},
		"stringData": token.SecretData(wtok, time.Now().Add(15*time.Minute), "worker join"),
	})
	if _, err := k.run(string(secret), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	wrt, wstop := startMachine(wcfg, wdir, "127.0.0.2")
	workerReady := within(t, 3*time.Minute, "Node kl-md-0 Ready", func() (bool, string) { return nodeReady(k, "kl-md-0") })
	t.Logf("worker: Node Ready %s after start (client certificate after %s)", workerReady.Round(time.Millisecond), wrt.Milestones()["credentials"].Round(time.Millisecond))
	wkc, err := kube.ReadKubeconfig(wrt.Layout().KubeconfigPath("kubelet"))
	if err != nil {
		t.Fatal(err)
	}
	wcert, _ := pki.ParseCertificate(wkc.Client().CertPEM)
	if wcert.Subject.CommonName != "system:node:kl-md-0" || wcert.CheckSignatureFrom(mustCA(t, set.CA).Cert) != nil {
		t.Errorf("worker certificate %s, signed by the cluster CA: %v", wcert.Subject, wcert.CheckSignatureFrom(mustCA(t, set.CA).Cert))
	}
	csrs := func() []string {
		s, err := k.run("", "get", "csr", "-o", "jsonpath={range .items[*]}{.spec.username}/{.status.conditions[0].type}/{.status.certificate} {end}")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range strings.Fields(s) {
			if strings.HasPrefix(f, "system:bootstrap:wrkr01/") || strings.HasPrefix(f, "system:node:kl-md-0/") {
				out = append(out, f)
			}
		}
		return out
	}
	if got := csrs(); len(got) != 1 || !strings.HasPrefix(got[0], "system:bootstrap:wrkr01/Approved/LS0t") {
		t.Errorf("CSRs of the worker %v, want one from its bootstrap token, approved and issued", got)
	}
	var wn nodeList
	k.json(&wn, "get", "nodes", "--field-selector=metadata.name=kl-md-0")
	if len(wn.Items) != 1 || wn.Items[0].Spec.ProviderID != "process://kl/kl-md-0" || wn.Items[0].Status.NodeInfo.KubeletVersion != wversion ||
		wn.Items[0].Metadata.Labels["node.kubernetes.io/pool"] != "md-0" || wn.Items[0].Metadata.Labels["node-role.kubernetes.io/control-plane"] != "" {
		t.Errorf("worker node %+v", wn.Items)
	} else if _, cp := wn.Items[0].Metadata.Labels["node-role.kubernetes.io/control-plane"]; cp || !slices.Contains(wn.Items[0].Status.Addresses, struct{ Type, Address string }{"InternalIP", "127.0.0.2"}) {
		t.Errorf("worker node labels %v addresses %v", wn.Items[0].Metadata.Labels, wn.Items[0].Status.Addresses)
	}
	// Pods for the worker run there, by the worker's kwok with the node's
	// own credentials.
	const md = `apiVersion: apps/v1
kind: Deployment
metadata: {name: md, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: md}}
  template:
    metadata: {labels: {app: md}}
    spec:
      nodeSelector: {node.kubernetes.io/pool: md-0}
      containers: [{name: md, image: registry.k8s.io/pause:3.10}]
`
	if _, err := k.run(md, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Minute, "2 pods Running on the worker", func() (bool, string) {
		s, err := k.run("", "get", "pods", "-l", "app=md", "-o", "jsonpath={range .items[*]}{.status.phase}/{.spec.nodeName} {end}")
		return err == nil && strings.Count(s, "Running/kl-md-0") == 2, s
	})
	// kubectl get nodes shows each Node at its machine's version, kwok
	// having made them Ready and run their pods.
	if got, want := nodeVersions(t, k), map[string]string{"kl-cp-0": version, "kl-md-0": wversion}; !maps.Equal(got, want) {
		t.Errorf("kubectl get nodes: VERSION %v, want %v", got, want)
	} else {
		t.Logf("kubectl get nodes: VERSION %v", got)
	}
	// The node's own credentials are enough for kwok: nothing forbidden.
	if b, _ := os.ReadFile(wrt.Supervisor().LogPath("kwok")); bytes.Contains(b, []byte("forbidden")) {
		t.Errorf("the worker's kwok was refused something:\n%s", b)
	}
	// A restarted worker keeps its certificate: no second CSR.
	wstop()
	wrt, wstop = startMachine(wcfg, wdir, "127.0.0.2")
	within(t, 2*time.Minute, "the worker registered again", func() (bool, string) {
		_, ok := wrt.Milestones()["kwok-started"]
		return ok, ""
	})
	if got := csrs(); len(got) != 1 {
		t.Errorf("CSRs after a restart %v, want still one", got)
	}
	// A stopped worker's Node goes NotReady: nothing renews its Lease.
	wstop()
	if testing.Short() {
		t.Log("-short: not waiting for the stopped worker's Node to go NotReady")
	} else {
		gone := within(t, 3*time.Minute, "the stopped worker's Node NotReady", func() (bool, string) {
			ready, state := nodeReady(k, "kl-md-0")
			return !ready && state != "no Ready condition", state
		})
		t.Logf("worker stopped: Node NotReady %s later", gone.Round(time.Second))
	}

	total := 0
	for _, st := range rt.Supervisor().Status() {
		kb := rss(st.PID)
		total += kb
		t.Logf("%-24s pid %-7d starts %d RSS %6.1f MiB", st.Name, st.PID, st.Starts, float64(kb)/1024)
		if st.Starts != 1 {
			t.Errorf("%s started %d times: %s", st.Name, st.Starts, st.LastExit)
		}
	}
	t.Logf("control plane + kwok RSS %.1f MiB", float64(total)/1024)

	// The agent restarts over the same data dir: certificates kept, etcd's
	// data still there, the Node still registered.
	stop()
	restarted := time.Now()
	rt, stop = start()
	within(t, 4*time.Minute, "kube-apiserver /readyz after a restart", func() (bool, string) { return rt.Ready(), "" })
	within(t, 2*time.Minute, "registered after a restart", func() (bool, string) {
		_, ok := rt.Milestones()["kwok-started"]
		return ok, ""
	})
	t.Logf("restart: ready and registered %s after start", time.Since(restarted).Round(time.Millisecond))
	within(t, 2*time.Minute, "the Deployment still available", func() (bool, string) {
		s, err := k.run("", "get", "deploy", "web", "-o", "jsonpath={.status.availableReplicas}")
		return err == nil && s == "3", s
	})
	stop()

	// Nothing of either machine is left running. Every child names its
	// machine's data dir in its arguments; other tests may run the same
	// binaries meanwhile.
	var left []string
	for _, pr := range processes(t) {
		if strings.Contains(pr.Cmdline, dir) || strings.Contains(pr.Cmdline, wdir) {
			left = append(left, fmt.Sprintf("%d %s", pr.PID, pr.Cmdline))
		}
	}
	if len(left) > 0 {
		t.Errorf("processes left after stop:\n%s", strings.Join(left, "\n"))
	}
}
