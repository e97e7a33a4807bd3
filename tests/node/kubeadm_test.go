//go:build linux

package node

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/kubeapi"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/kubeconfig"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubeadm"
)

// needKubeadm is needStack with kubelet, kubeadm and the control-plane
// images (needImages) too.
func needKubeadm(t *testing.T) (stack, []image) {
	t.Helper()
	s := needStack(t)
	skip := t.Skipf
	if os.Getenv("CAPN_REQUIRE_NODESTACK") == "1" {
		skip = t.Fatalf
	}
	for _, b := range []string{"kubelet", "kubeadm"} {
		if _, err := os.Stat(filepath.Join(s.kubeBin, b)); s.kubeBin == "" || err != nil {
			skip("no %s in CAPN_NODESTACK_BIN's second directory %q (make nodestack)", b, s.kubeBin)
		}
	}
	for _, b := range []string{"unshare", "mount"} {
		if _, err := exec.LookPath(b); err != nil {
			skip("%s is not installed: %v", b, err)
		}
	}
	return s, needImages(t)
}

// isolateMounts gives the node a mount namespace of its own, held by a
// process for as long as the test runs, so that what kubeadm and the
// kubelet write to /etc, /var/lib, /var/log, /usr/libexec and /run stays
// the node's: each of the first four is an overlay on the host's
// directory whose upper layer is in the node's directory, /run a fresh
// tmpfs (as at boot). A host with no /lib/modules (this one: its kernel
// has no loadable modules) gets an empty one, in an overlay on the
// directory /lib is (/usr/lib on Debian 12): kube-proxy's DaemonSet mounts
// the host's /lib/modules (a hostPath of no type), and containerd's CRI
// makes a missing bind-mount source itself — without the overlay, on the
// host's /usr/lib. In it, /run/containerd/containerd.sock (where kubeadm
// looks for containerd) is a link to the node's containerd socket, and
// /etc/hosts names the node (hosts is what the kubelet resolves its node
// name with when it has no default route to pick an address from).
func (n *node) isolateMounts(t *testing.T, sock, hostname string) {
	t.Helper()
	// The process provider's real nodes get theirs the same way
	// (package realnode); here cat holds the namespace until the test
	// closes its stdin.
	args, env := n.real().MountCommand(sock, hostname, "cat")
	cmd := exec.Command("nsenter", args...)
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testkit.Buffer{}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The namespace goes when its last process does: this one, and
		// the containerd, shims and kubelet the other cleanups stop.
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the node's mount namespace was not set up: %q %v\n%s", line, err, stderr.String())
	}
	// nsenter and unshare exec; the holder is cat, pid cmd.Process.Pid.
	n.mnt = fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid)
	n.root = fmt.Sprintf("/proc/%d/root", cmd.Process.Pid)
}

// discardRoute gives the node a default route that is never used: kubeadm
// init needs one to read. With no localAPIEndpoint.advertiseAddress in its
// config (capn cannot render one: a machine's address is not known when
// its data is rendered) kubeadm takes the address of the default route's
// interface, and without any default route it falls back to 0.0.0.0, with
// which kube-apiserver exits ("Unable to find suitable network address
// ... no default routes found"). So the main table gets "default dev
// capn0", capn0 holding the node's address, while two policy rules keep
// every packet off it: the main table is looked up with its default route
// suppressed (suppress_prefixlength 0), and whatever that leaves is
// unreachable — an outside address fails at once (ENETUNREACH), as on a
// node with no default route, instead of timing out (DNS lookups of a
// pull would). capn0 is one end of a veth pair whose other end stays
// down (a veth drops what it sends while its peer is down; this kernel
// has no dummy driver), so the route leads nowhere even without the
// rules.
func (n *node) discardRoute(t *testing.T) {
	t.Helper()
	if err := n.real().DiscardRoute(); err != nil {
		t.Fatal(err)
	}
}

// checkDiscard fails the test unless the node's default route is the
// discard device's, its peer is down, and an outside address is
// unreachable from the node.
func (n *node) checkDiscard(t *testing.T) {
	t.Helper()
	if err := n.real().CheckDiscard(); err != nil {
		t.Fatal(err)
	}
}

// removeAll stops and removes every task and container of c's namespace
// (what the kubelet left), and the sandboxes' network namespaces the host
// sees that were not there before.
func (c *containerd) removeAll(t *testing.T, netnsBefore string) {
	out, _ := c.try(nil, "containers", "ls", "-q")
	for _, id := range strings.Fields(out) {
		_, _ = c.try(nil, "tasks", "kill", "-s", "SIGKILL", id)
		_ = testkit.Poll(20*time.Second, 100*time.Millisecond, func() error {
			_, err := c.try(nil, "tasks", "delete", id)
			if err != nil && !strings.Contains(err.Error(), "not found") {
				return err
			}
			return nil
		})
		_, _ = c.try(nil, "containers", "delete", id)
	}
	after, _ := try(nil, nil, "ip", "netns", "list")
	for _, l := range strings.Split(after, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && strings.HasPrefix(f[0], "cni-") && !strings.Contains(netnsBefore, f[0]) {
			cleanup(t, "ip", "netns", "del", f[0])
		}
	}
}

// buildCapnNode builds cmd/capn-node into dir.
func buildCapnNode(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "capn-node")
	run(t, nil, []string{"CGO_ENABLED=0", "GOFLAGS=-mod=readonly"}, "go", "build", "-trimpath", "-o", bin, "../../cmd/capn-node")
	return bin
}

// TestRealNodeKubeadmJoin executes capn's kubeadm bootstrap data on two
// real nodes of one LAN: the data is rendered by capn's bootstrapper
// library (the kubeadm provider, the cluster PKI from secrets/pki, a join
// token, the CA hash) exactly as for any cloud, and run by capn-node's
// cloud-config runner in each node's namespaces (its own network and
// mounts, its own containerd, a kubelet kept running as kubeadm's systemd
// unit would).
//
// First the control plane (issue 26 step 2): kubeadm init finishes (the
// Cluster API sentinel written), the static pods run as real containers,
// the API server answers on the node's address to capn's admin kubeconfig,
// and the Node registers. Then a worker (step 3): kubeadm join with capn's
// token and CA hash against it finishes, its Node registers; each Node
// gets a pod CIDR from the cluster's (kube-controller-manager's
// --allocate-node-cidrs), each node's containerd renders its bridge CNI
// config from it, the test routes each node's pods between the node
// namespaces and from the host, and both Nodes become Ready. Last, a pod
// the scheduler puts on the worker runs a real container (the web image,
// FROM scratch, written by capn-node image) with an address from the
// worker's CIDR, and a pod on the control-plane node reaches it.
func TestRealNodeKubeadmJoin(t *testing.T) {
	s, images := needKubeadm(t)
	start := time.Now()
	const (
		version = "v1.37.2"
		webRef  = "capn.local/test/web:v1"
	)
	l := newLAN(t)
	cluster := "real-" + l.id
	cpName, workerName := cluster+"-cp-0", cluster+"-md-0"
	netnsBefore := run(t, nil, nil, "ip", "netns", "list")
	if _, err := os.Stat("/sys/fs/cgroup/memory/k8s.io"); os.IsNotExist(err) {
		t.Cleanup(func() { removeCgroup(t, "/k8s.io/x") })
	}
	// Before any kubelet starts: the values to put back.
	restoreKernelTunables(t)
	if _, err := os.Stat("/lib/modules"); os.IsNotExist(err) {
		t.Cleanup(func() {
			if _, err := os.Stat("/lib/modules"); err == nil {
				t.Errorf("a node made /lib/modules on the host (kube-proxy's hostPath): it belongs in the node's overlay")
			}
		})
	}
	raiseInotifyInstances(t, 1024)
	dir := t.TempDir()
	capnNode := buildCapnNode(t, dir)
	// The web image FROM scratch, written by capn-node image (package
	// ociimage), as hack/nodeimages.sh writes the control plane's.
	web := image{webRef, filepath.Join(dir, "web.tar")}
	run(t, nil, nil, capnNode, "image", "--ref", webRef, "--out", web.archive, "--file", "web="+buildWeb(t, dir), "--entrypoint", "/web")
	path := "PATH=" + s.kubeBin + ":" + s.bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	kubectl := findKubectl()

	// The control-plane node, with every image kubeadm's static pods run
	// imported under its ordinary name: nothing is pulled.
	cp := startKubeNode(t, s, l, cpName, capnNode, path, append(append([]image{}, images...), web), netnsBefore)
	cp.discardRoute(t)
	t.Logf("%s: containerd up, %d images imported after %s", cpName, len(images)+1, time.Since(start).Round(time.Millisecond))

	// capn's bootstrap data.
	set, _, err := pki.Ensure(pki.Set{}, pki.Options{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := token.Generate()
	if err != nil {
		t.Fatal(err)
	}
	spec := &capnv1.BootstrapSpec{
		// Every image kubeadm lists is imported (hack/nodeimages.sh), so
		// its ImagePull check pulls nothing and passes.
		// SystemVerification fails on cgroup v1 ("To explicitly enable
		// cgroups v1 support for kubelet v1.35 or newer, you must set
		// the kubelet configuration option 'FailCgroupV1' to 'false'.
		// You must also explicitly skip this validation."), for init
		// and join alike.
		IgnorePreflightErrors: []string{"SystemVerification"},
		// What this host needs from its kubelet, as a pool's
		// bootstrap.kubeletExtraArgs (docs/providers.md, real nodes):
		KubeletExtraArgs: map[string]string{
			// cgroup v1 host: v1.37 refuses it unless told.
			"fail-cgroupv1": "false",
			// No systemd: kubeadm's KubeletConfiguration says systemd.
			"cgroup-driver": "cgroupfs",
			// No kubepods hierarchy shared by the nodes of one host.
			"cgroups-per-qos":          "false",
			"enforce-node-allocatable": "",
			// As the kubelet test: this host's disks are fuller than the
			// default thresholds.
			"eviction-hard":                    "memory.available<1Mi,nodefs.available<1%,imagefs.available<1%",
			"local-storage-capacity-isolation": "false",
		},
	}
	render := func(machine string, role bootstrap.Role, first bool) []byte {
		t.Helper()
		in, err := bootstrap.NewInput(&capnv1.GenerateBootstrap{
			Cluster: cluster, Machine: machine, Role: string(role), FirstControlPlane: first,
			Version: version, Bootstrap: spec,
		}, bootstrap.Cluster{
			Endpoint: bootstrap.Endpoint{Host: cp.nodeIP, Port: 6443},
			Network:  &capnv1.NetworkSpec{PodCidrs: []string{l.podCIDR}, ServiceCidrs: []string{"10.96.0.0/12"}, ServiceDomain: "cluster.local"},
			PKI:      set,
		}, tok)
		if err != nil {
			t.Fatal(err)
		}
		out, err := kubeadm.New().Render(in)
		if err != nil {
			t.Fatal(err)
		}
		return out.Data
	}

	// kubeadm init, by capn-node's cloud-config runner.
	initStart := time.Now()
	phases := cp.cloudConfig(t, capnNode, path, render(cpName, bootstrap.RoleControlPlane, true))
	t.Logf("kubeadm init finished in %s (%s since the test began):\n%s", time.Since(initStart).Round(time.Millisecond), time.Since(start).Round(time.Millisecond), strings.Join(phases, "\n"))
	initDone := time.Now()

	// capn's admin kubeconfig, as the bootstrapper issues it.
	ca, err := pki.ParseCA(set.CA, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pki.IssueAdmin(ca, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubeconfig.Render(kubeconfig.Input{ClusterName: cluster, Host: cp.nodeIP, Port: 6443, CACertPEM: set.CA.CertPEM, ClientCertPEM: admin.CertPEM, ClientKeyPEM: admin.KeyPEM})
	if err != nil {
		t.Fatal(err)
	}
	kcFile := filepath.Join(dir, "admin.conf")
	if err := os.WriteFile(kcFile, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	parsed, err := kubeconfig.Parse(kc)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubeapi.NewClient(parsed.Server, parsed.CACertPEM, parsed.ClientCertPEM, parsed.ClientKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if v, err := client.Version(ctx); err != nil || v != version {
		t.Fatalf("the API server at %s: version %q, %v", parsed.Server, v, err)
	}
	kubectlOut := func(args ...string) string {
		if kubectl == "" {
			return "(no kubectl in CAPN_KUBE_BIN)"
		}
		return run(t, nil, nil, kubectl, append([]string{"--kubeconfig", kcFile}, args...)...)
	}

	// The Node registers, and the static pods run: mirror pods Running in
	// the API, each a container running in the node's containerd.
	cpNode := getNode(ctx, t, client, cpName, 2*time.Minute, func(n *kubeNodeObject) error { return nil })
	want := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
	var pods podList
	var running []string
	waitAPI(t, 3*time.Minute, "the static pods run, mirror pods Running", func() error {
		if err := client.Get(ctx, "/api/v1/namespaces/kube-system/pods", &pods); err != nil {
			return err
		}
		running = running[:0]
		for _, p := range pods.Items {
			if p.Status.Phase == "Running" && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].ContainerID != "" {
				running = append(running, p.Metadata.Name)
			}
		}
		for _, w := range want {
			if !slices.Contains(running, w+"-"+cpName) {
				return fmt.Errorf("%s is not running; running: %v", w, running)
			}
		}
		return nil
	})
	tasks := cp.c.ctr(t, "tasks", "ls")
	for _, w := range want {
		found := false
		for _, p := range pods.Items {
			if p.Metadata.Name == w+"-"+cpName {
				id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
				for _, l := range strings.Split(tasks, "\n") {
					found = found || strings.HasPrefix(l, id) && strings.Contains(l, "RUNNING")
				}
			}
		}
		if !found {
			t.Errorf("%s's container is not a running task of the node's containerd:\n%s", w, tasks)
		}
	}
	if addr := cpNode.internalIP(); addr != cp.nodeIP || cpNode.Status.NodeInfo.KubeletVersion != version {
		t.Errorf("Node %s: InternalIP %q (want %s), kubelet %q", cpName, addr, cp.nodeIP, cpNode.Status.NodeInfo.KubeletVersion)
	}
	t.Logf("%s (%s): Node registered (%s, %s), static pods running %v; %s since the test began",
		cpName, cp.nodeIP, cpNode.Status.NodeInfo.KubeletVersion, cpNode.Status.NodeInfo.ContainerRuntimeVersion, running, time.Since(start).Round(time.Millisecond))

	// The worker: a second node on the LAN, with no default route at all
	// (a worker's kubeadm join needs no advertise address), with the
	// images a worker runs imported: the sandbox, kube-proxy (a
	// DaemonSet), CoreDNS (its Deployment may land there) and web.
	var workerImages []image
	for _, im := range images {
		for _, name := range []string{"/pause:", "/kube-proxy:", "/coredns:"} {
			if strings.Contains(im.ref, name) {
				workerImages = append(workerImages, im)
			}
		}
	}
	if len(workerImages) != 3 {
		t.Fatalf("CAPN_NODEIMAGES lacks pause, kube-proxy or coredns (make nodeimages): %v", images)
	}
	worker := startKubeNode(t, s, l, workerName, capnNode, path, append(workerImages, web), netnsBefore)
	worker.checkNoDefault(t)
	joinStart := time.Now()
	phases = worker.cloudConfig(t, capnNode, path, render(workerName, bootstrap.RoleWorker, false))
	t.Logf("kubeadm join finished in %s (%s after init):\n%s", time.Since(joinStart).Round(time.Millisecond), time.Since(initDone).Round(time.Millisecond), strings.Join(phases, "\n"))
	if _, err := os.Stat(filepath.Join(worker.root, "/etc/kubernetes/kubelet.conf")); err != nil {
		t.Errorf("%s: no kubelet.conf after the join (TLS bootstrap): %v", workerName, err)
	}

	// Each Node gets a pod CIDR of its own from the cluster's; the nodes
	// and the host route to each other's pods.
	_, clusterNet, err := net.ParseCIDR(l.podCIDR)
	if err != nil {
		t.Fatal(err)
	}
	withCIDR := func(n *kubeNodeObject) error {
		_, c, err := net.ParseCIDR(n.Spec.PodCIDR)
		if err != nil {
			return fmt.Errorf("spec.podCIDR %q: %v", n.Spec.PodCIDR, err)
		}
		if ones, _ := c.Mask.Size(); !clusterNet.Contains(c.IP) || ones != 24 {
			return fmt.Errorf("spec.podCIDR %s is not a /24 of the cluster's %s", c, l.podCIDR)
		}
		return nil
	}
	workerNode := getNode(ctx, t, client, workerName, 3*time.Minute, withCIDR)
	cpNode = getNode(ctx, t, client, cpName, time.Minute, withCIDR)
	cp.podCIDR, worker.podCIDR = cpNode.Spec.PodCIDR, workerNode.Spec.PodCIDR
	if cp.podCIDR == worker.podCIDR {
		t.Fatalf("both Nodes have pod CIDR %s", cp.podCIDR)
	}
	l.routePods(t, []*node{cp.node, worker.node})
	for _, kn := range []*kubeNode{cp, worker} {
		nodeObj := getNode(ctx, t, client, kn.machine, 3*time.Minute, func(n *kubeNodeObject) error {
			if r, why := n.ready(); r != "True" {
				return fmt.Errorf("Ready is %q: %s", r, why)
			}
			return nil
		})
		conf, err := os.ReadFile(filepath.Join(kn.cniConfDir, "10-containerd-net.conflist"))
		if err != nil || !strings.Contains(string(conf), `"subnet":"`+kn.podCIDR+`"`) {
			t.Errorf("%s: containerd's CNI config is not rendered with %s: %v\n%s", kn.machine, kn.podCIDR, err, conf)
		}
		if addr := nodeObj.internalIP(); addr != kn.nodeIP {
			t.Errorf("Node %s: InternalIP %q, want %s", kn.machine, addr, kn.nodeIP)
		}
	}
	nodesReady := time.Now()
	readyAfter := nodesReady.Sub(initDone)
	nodesOut := kubectlOut("get", "nodes", "-o", "wide")
	if kubectl != "" {
		for _, kn := range []*kubeNode{cp, worker} {
			ok := false
			for _, line := range strings.Split(nodesOut, "\n") {
				f := strings.Fields(line)
				ok = ok || len(f) > 5 && f[0] == kn.machine && f[1] == "Ready" && slices.Contains(f, kn.nodeIP)
			}
			if !ok {
				t.Errorf("kubectl get nodes does not show %s Ready at %s:\n%s", kn.machine, kn.nodeIP, nodesOut)
			}
		}
	}
	t.Logf("both Nodes Ready %s after kubeadm init began, %s after it finished, %s after kubeadm join began (%s since the test began); pod CIDRs %s: %s, %s: %s; routes %v\n%s",
		(readyAfter + initDone.Sub(initStart)).Round(time.Millisecond), readyAfter.Round(time.Millisecond), time.Since(joinStart).Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond), cpName, cp.podCIDR, workerName, worker.podCIDR, l.routes, nodesOut)
	// Still nothing routes out of either node.
	cp.checkDiscard(t)
	worker.checkNoDefault(t)

	// A pod the scheduler puts on the worker runs a real container with an
	// address from the worker's CIDR; the host reaches it through the
	// route to the worker's pods.
	workerToken, cpToken := "worker-"+l.id, "cp-"+l.id
	webPod := func(name, node, token, fetch string) kubeapi.Object {
		env := []any{map[string]any{"name": "CAPN_WEB_TOKEN", "value": token}}
		if fetch != "" {
			env = append(env, map[string]any{"name": "CAPN_WEB_FETCH", "value": fetch})
		}
		return kubeapi.Object{Collection: "/api/v1/namespaces/default/pods", Name: name, Body: map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": name, "namespace": "default"},
			"spec": map[string]any{
				"nodeSelector":                 map[string]any{"kubernetes.io/hostname": node},
				"tolerations":                  []any{map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}},
				"automountServiceAccountToken": false,
				"containers": []any{map[string]any{
					"name": "web", "image": webRef, "imagePullPolicy": "Never", "env": env,
					"ports": []any{map[string]any{"containerPort": 8080}},
				}},
			},
		}}
	}
	runPod := func(o kubeapi.Object, kn *kubeNode) podObject {
		t.Helper()
		waitAPI(t, time.Minute, "create pod "+o.Name, func() error {
			// The default ServiceAccount comes with the controller-manager.
			_, err := client.Create(ctx, o)
			return err
		})
		var p podObject
		waitAPI(t, 3*time.Minute, "pod "+o.Name+" Running on "+kn.machine, func() error {
			if err := client.Get(ctx, o.Path(), &p); err != nil {
				return err
			}
			if p.Status.Phase != "Running" || p.Status.PodIP == "" {
				return fmt.Errorf("phase %q, node %q, pod IP %q, conditions %v", p.Status.Phase, p.Spec.NodeName, p.Status.PodIP, p.Status.Conditions)
			}
			return nil
		})
		_, podNet, _ := net.ParseCIDR(kn.podCIDR)
		if p.Spec.NodeName != kn.machine || p.Status.HostIP != kn.nodeIP || podNet == nil || !podNet.Contains(net.ParseIP(p.Status.PodIP)) {
			t.Fatalf("pod %s runs on %q (host %s) with %s; want %s (%s), an address of %s", o.Name, p.Spec.NodeName, p.Status.HostIP, p.Status.PodIP, kn.machine, kn.nodeIP, kn.podCIDR)
		}
		return p
	}
	get := func(url string) string {
		t.Helper()
		var body string
		hc := &http.Client{Timeout: 5 * time.Second}
		waitAPI(t, time.Minute, "GET "+url, func() error {
			resp, err := hc.Get(url)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			body = string(b)
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		})
		return body
	}
	podStart := time.Now()
	wp := runPod(webPod("web-worker", workerName, workerToken, ""), worker)
	body := get("http://" + net.JoinHostPort(wp.Status.PodIP, "8080") + "/")
	if !strings.Contains(body, "token="+workerToken+"\n") || !strings.Contains(body, "addr="+wp.Status.PodIP+"/24\n") {
		t.Fatalf("the worker's pod %s did not answer with its token and address:\n%s", wp.Status.PodIP, body)
	}
	workerTasks := worker.c.ctr(t, "tasks", "ls")
	if id := strings.TrimPrefix(wp.containerID(), "containerd://"); id == "" || !strings.Contains(workerTasks, id) {
		t.Errorf("web-worker's container %q is not a task of the worker's containerd:\n%s", id, workerTasks)
	}
	t.Logf("web-worker Running on %s at %s after %s; answered the host:\n%s", workerName, wp.Status.PodIP, time.Since(podStart).Round(time.Millisecond), body)

	// A pod on the control-plane node reaches the worker's pod: control
	// plane's cni0 → its eth0 → the LAN → the worker's eth0 → its cni0.
	cpp := runPod(webPod("web-cp", cpName, cpToken, "http://"+net.JoinHostPort(wp.Status.PodIP, "8080")+"/"), cp)
	body = get("http://" + net.JoinHostPort(cpp.Status.PodIP, "8080") + "/")
	if !strings.Contains(body, "token="+cpToken+"\n") || !strings.Contains(body, "fetched token="+workerToken+"\n") || !strings.Contains(body, "fetched addr="+wp.Status.PodIP+"/24\n") {
		t.Fatalf("the control plane's pod %s did not reach the worker's pod %s:\n%s", cpp.Status.PodIP, wp.Status.PodIP, body)
	}
	t.Logf("web-cp on %s at %s reached web-worker at %s:\n%s\n%s", cpName, cpp.Status.PodIP, wp.Status.PodIP, body, kubectlOut("get", "pods", "-A", "-o", "wide"))

	// kubeadm's add-ons run from the nodes' own images: kube-proxy (its
	// DaemonSet, in iptables mode, one pod in each node's namespace) and
	// CoreDNS (its Deployment of two), each pod Ready.
	addonsStart := time.Now()
	readyPod := func(p podObject) error {
		for _, c := range p.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" && p.Status.Phase == "Running" {
				return nil
			}
		}
		return fmt.Errorf("phase %q, conditions %v, containers %v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
	}
	waitPods := func(namespace, selector string, want int, timeout time.Duration) []podObject {
		t.Helper()
		var list podList
		waitAPI(t, timeout, namespace+" pods "+selector+" Ready", func() error {
			list = podList{}
			if err := client.Get(ctx, "/api/v1/namespaces/"+namespace+"/pods?labelSelector="+url.QueryEscape(selector), &list); err != nil {
				return err
			}
			if len(list.Items) != want {
				return fmt.Errorf("%d pods, want %d", len(list.Items), want)
			}
			for _, p := range list.Items {
				if err := readyPod(p); err != nil {
					return fmt.Errorf("%s on %q: %v", p.Metadata.Name, p.Spec.NodeName, err)
				}
			}
			return nil
		})
		return list.Items
	}
	onNodes := func(pods []podObject) map[string]string {
		m := map[string]string{}
		for _, p := range pods {
			m[p.Metadata.Name] = p.Spec.NodeName
		}
		return m
	}
	proxies := waitPods("kube-system", "k8s-app=kube-proxy", 2, 4*time.Minute)
	if on := onNodes(proxies); !slices.Contains(slices.Collect(maps.Values(on)), cpName) || !slices.Contains(slices.Collect(maps.Values(on)), workerName) {
		t.Fatalf("kube-proxy does not run on both nodes: %v", on)
	}
	dns := waitPods("kube-system", "k8s-app=kube-dns", 2, 4*time.Minute)
	t.Logf("kube-proxy %v and CoreDNS %v Ready %s after both Nodes were (%s after the pods' checks)", onNodes(proxies), onNodes(dns), time.Since(nodesReady).Round(time.Millisecond), time.Since(addonsStart).Round(time.Millisecond))

	// A Deployment of web on the worker behind a Service: the pod on the
	// control-plane node reaches it through the Service's ClusterIP (the
	// control-plane node's kube-proxy rules) and through its DNS name
	// (CoreDNS, itself reached through the kube-dns Service).
	svcStart := time.Now()
	svcToken := "svc-" + l.id
	deploy := kubeapi.Object{Collection: "/apis/apps/v1/namespaces/default/deployments", Name: "web", Body: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "default"},
		"spec": map[string]any{
			"replicas": 2,
			"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
				"spec": map[string]any{
					"nodeSelector":                 map[string]any{"kubernetes.io/hostname": workerName},
					"automountServiceAccountToken": false,
					"containers": []any{map[string]any{
						"name": "web", "image": webRef, "imagePullPolicy": "Never",
						"env":            []any{map[string]any{"name": "CAPN_WEB_TOKEN", "value": svcToken}},
						"ports":          []any{map[string]any{"containerPort": 8080}},
						"readinessProbe": map[string]any{"httpGet": map[string]any{"path": "/", "port": 8080}, "periodSeconds": 2},
					}},
				},
			},
		},
	}}
	svc := kubeapi.Object{Collection: "/api/v1/namespaces/default/services", Name: "web", Body: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": "web", "namespace": "default"},
		"spec": map[string]any{
			"selector": map[string]any{"app": "web"},
			"ports":    []any{map[string]any{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}},
		},
	}}
	for _, o := range []kubeapi.Object{deploy, svc} {
		if _, err := client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	backends := waitPods("default", "app=web", 2, 3*time.Minute)
	var backendIPs []string
	for _, p := range backends {
		if p.Spec.NodeName != workerName {
			t.Fatalf("the Deployment's pod %s runs on %q, not the worker", p.Metadata.Name, p.Spec.NodeName)
		}
		backendIPs = append(backendIPs, p.Status.PodIP)
	}
	var service struct {
		Spec struct {
			ClusterIP string `json:"clusterIP"`
		} `json:"spec"`
	}
	if err := client.Get(ctx, svc.Path(), &service); err != nil || net.ParseIP(service.Spec.ClusterIP) == nil {
		t.Fatalf("Service web: clusterIP %q, %v", service.Spec.ClusterIP, err)
	}
	// fetchVia asks the pod at podIP to fetch target, until the answer
	// comes from one of the Deployment's pods.
	fetchVia := func(podIP, target string) string {
		t.Helper()
		var body string
		hc := &http.Client{Timeout: 10 * time.Second}
		u := "http://" + net.JoinHostPort(podIP, "8080") + "/?fetch=" + url.QueryEscape(target)
		waitAPI(t, 2*time.Minute, podIP+" fetches "+target, func() error {
			resp, err := hc.Get(u)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			body = string(b)
			if !strings.Contains(body, "fetched token="+svcToken+"\n") {
				return fmt.Errorf("the answer is not the Deployment's:\n%s", body)
			}
			for _, ip := range backendIPs {
				if strings.Contains(body, "fetched addr="+ip+"/24\n") {
					return nil
				}
			}
			return fmt.Errorf("the answer is from none of the Deployment's pods %v:\n%s", backendIPs, body)
		})
		return body
	}
	viaIP := fetchVia(cpp.Status.PodIP, "http://"+service.Spec.ClusterIP+"/")
	t.Logf("web-cp on %s reached Service web at its ClusterIP %s (pods %v on %s) %s after the Deployment was created:\n%s",
		cpName, service.Spec.ClusterIP, backendIPs, workerName, time.Since(svcStart).Round(time.Millisecond), viaIP)
	dnsStart := time.Now()
	viaDNS := fetchVia(cpp.Status.PodIP, "http://web.default.svc.cluster.local/")
	t.Logf("web-cp reached http://web.default.svc.cluster.local/ through CoreDNS in %s:\n%s", time.Since(dnsStart).Round(time.Millisecond), viaDNS)
	// And from the worker's own pod: its DNS queries go through the
	// worker's kube-proxy rules to CoreDNS wherever it runs, and the
	// Service's answer may come from a pod on the same node (back out of
	// the bridge it came in on: br_netfilter, on in the node's namespace).
	fetchVia(wp.Status.PodIP, "http://web.default.svc.cluster.local/")
	fetchVia(wp.Status.PodIP, "http://web/")
	t.Logf("web-worker on %s reached it too, by its full name and by web (the pod's DNS search path)", workerName)
	// The Service's rules are kube-proxy's, in each node's own network
	// namespace (iptables-nft: nf_tables tables of that namespace; read
	// with the host's iptables-nft-save, whatever its iptables
	// alternative is).
	for _, kn := range []*kubeNode{cp, worker} {
		rules := run(t, nil, nil, "ip", "netns", "exec", kn.ns, "iptables-nft-save", "-t", "nat")
		if !strings.Contains(rules, "-d "+service.Spec.ClusterIP+"/32 -p tcp") || !strings.Contains(rules, "default/web:http") {
			t.Errorf("%s: the nat table of its namespace has no rule for Service web at %s:\n%s", kn.machine, service.Spec.ClusterIP, tail(rules, 40))
		}
	}
	if rules := run(t, nil, nil, "iptables-nft-save", "-t", "nat"); strings.Contains(rules, service.Spec.ClusterIP) {
		t.Errorf("the host's own nat table has a rule for the Service's %s: kube-proxy wrote outside its node", service.Spec.ClusterIP)
	}
	// Still nothing routes out of either node.
	cp.checkDiscard(t)
	worker.checkNoDefault(t)
	t.Logf("%s", kubectlOut("get", "pods,services,endpointslices", "-A", "-o", "wide"))

	for _, kn := range []*kubeNode{cp, worker} {
		kib, procs := kn.rss(t)
		t.Logf("%s: RSS %.0f MiB in %d processes", kn.machine, float64(kib)/1024, procs)
	}
	t.Logf("test took %s", time.Since(start).Round(time.Millisecond))
}

// kubeNodeObject is the part of a Node the test reads.
type kubeNodeObject struct {
	Spec struct {
		PodCIDR string `json:"podCIDR"`
	} `json:"spec"`
	Status struct {
		Addresses  []struct{ Type, Address string } `json:"addresses"`
		Conditions []struct{ Type, Status, Reason, Message string }
		NodeInfo   struct {
			KubeletVersion          string `json:"kubeletVersion"`
			ContainerRuntimeVersion string `json:"containerRuntimeVersion"`
		} `json:"nodeInfo"`
	} `json:"status"`
}

func (n *kubeNodeObject) internalIP() string {
	for _, a := range n.Status.Addresses {
		if a.Type == "InternalIP" {
			return a.Address
		}
	}
	return ""
}

// ready is the Node's Ready condition: its status, and why.
func (n *kubeNodeObject) ready() (status, why string) {
	for _, c := range n.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status, c.Reason + ": " + c.Message
		}
	}
	return "", "no Ready condition"
}

// getNode waits until Node name exists and check passes, and returns it.
func getNode(ctx context.Context, t *testing.T, client *kubeapi.Client, name string, timeout time.Duration, check func(*kubeNodeObject) error) *kubeNodeObject {
	t.Helper()
	var n kubeNodeObject
	waitAPI(t, timeout, "Node "+name, func() error {
		n = kubeNodeObject{}
		if err := client.Get(ctx, "/api/v1/nodes/"+name, &n); err != nil {
			return err
		}
		return check(&n)
	})
	return &n
}

// podObject is the part of a Pod the test reads.
type podObject struct {
	Metadata struct{ Name string } `json:"metadata"`
	Spec     struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase             string `json:"phase"`
		PodIP             string `json:"podIP"`
		HostIP            string `json:"hostIP"`
		Conditions        []struct{ Type, Status, Reason, Message string }
		ContainerStatuses []struct {
			Name         string `json:"name"`
			ContainerID  string `json:"containerID"`
			RestartCount int    `json:"restartCount"`
			// State is why a container does not run (waiting: the
			// reason, e.g. ErrImagePull or CrashLoopBackOff).
			State map[string]struct {
				Reason  string `json:"reason"`
				Message string `json:"message"`
			} `json:"state"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

func (p *podObject) containerID() string {
	if len(p.Status.ContainerStatuses) == 0 {
		return ""
	}
	return p.Status.ContainerStatuses[0].ContainerID
}

type podList struct {
	Items []podObject `json:"items"`
}
