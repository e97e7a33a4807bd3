//go:build linux

package node

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
// tmpfs (as at boot). In it, /run/containerd/containerd.sock (where kubeadm
// looks for containerd) is a link to the node's containerd socket, and
// /etc/hosts names the node (hosts is what the kubelet resolves its node
// name with when it has no default route to pick an address from).
func (n *node) isolateMounts(t *testing.T, sock, hostname string) {
	t.Helper()
	script := `set -eu
mount -t tmpfs -o mode=0755 capn-run /run
for d in etc var/lib var/log usr/libexec; do
  o="$CAPN_OVL/$(echo "$d" | tr / -)"
  mkdir -p "$o/upper" "$o/work"
  mount -t overlay capn-node -o "lowerdir=/$d,upperdir=$o/upper,workdir=$o/work" "/$d"
done
mkdir -p /run/containerd
ln -s "$CAPN_SOCK" /run/containerd/containerd.sock
printf '127.0.0.1 localhost\n%s %s\n' "$CAPN_NODE_IP" "$CAPN_HOSTNAME" > /etc/hosts
echo ready
exec cat
`
	cmd := exec.Command("nsenter", "--net=/run/netns/"+n.ns, "--", "unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), "CAPN_OVL="+filepath.Join(n.dir, "overlay"), "CAPN_SOCK="+sock, "CAPN_NODE_IP="+n.nodeIP, "CAPN_HOSTNAME="+hostname)
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

// discardDev is the node's discard device (discardRoute), and
// discardPeer its veth peer, which stays down.
const (
	discardDev  = "capn0"
	discardPeer = "capn0-void"
)

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
	run(t, nil, nil, "ip", "-n", n.ns, "link", "add", discardDev, "type", "veth", "peer", "name", discardPeer)
	run(t, nil, nil, "ip", "-n", n.ns, "addr", "add", n.nodeIP+"/32", "dev", discardDev)
	run(t, nil, nil, "ip", "-n", n.ns, "link", "set", discardDev, "up")
	run(t, nil, nil, "ip", "-n", n.ns, "route", "add", "default", "dev", discardDev)
	run(t, nil, nil, "ip", "-n", n.ns, "rule", "add", "priority", "32000", "lookup", "main", "suppress_prefixlength", "0")
	run(t, nil, nil, "ip", "-n", n.ns, "rule", "add", "priority", "32001", "unreachable")
	n.checkDiscard(t)
}

// checkDiscard fails the test unless the node's default route is the
// discard device's, its peer is down, and an outside address is
// unreachable from the node.
func (n *node) checkDiscard(t *testing.T) {
	t.Helper()
	if out := run(t, nil, nil, "ip", "-n", n.ns, "route", "show", "default"); !strings.HasPrefix(out, "default dev "+discardDev+" ") {
		t.Fatalf("the node's default route is not the discard device's: %q", out)
	}
	if out := run(t, nil, nil, "ip", "-n", n.ns, "-o", "link", "show", discardPeer); !strings.Contains(out, "state DOWN") || strings.Contains(out, ",UP") {
		t.Fatalf("%s, the discard device's peer, is not down: %s", discardPeer, out)
	}
	if out, err := try(nil, nil, "ip", "-n", n.ns, "route", "get", "192.0.2.200"); err == nil || !strings.Contains(err.Error(), "Network is unreachable") {
		t.Fatalf("the node routes an outside address: %q %v", out, err)
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

// TestRealNodeKubeadmInit executes capn's kubeadm bootstrap data on a real
// node: the data is rendered by capn's bootstrapper library (the kubeadm
// provider, the cluster PKI from secrets/pki, a join token) for the first
// control-plane machine, exactly as for any cloud, and run by capn-node's
// cloud-config runner in the node's namespaces (its own network and
// mounts, its own containerd with the control-plane images imported, a
// kubelet kept running as kubeadm's systemd unit would). kubeadm init must
// finish (the Cluster API sentinel written), the static pods run as real
// containers, the API server answer on the node's address to capn's admin
// kubeconfig, and the Node register.
func TestRealNodeKubeadmInit(t *testing.T) {
	s, images := needKubeadm(t)
	start := time.Now()
	const version = "v1.37.2"
	n := newNode(t)
	cluster := "real-" + n.id
	machine := cluster + "-cp-0"
	netnsBefore := run(t, nil, nil, "ip", "netns", "list")
	n.discardRoute(t)
	if _, err := os.Stat("/sys/fs/cgroup/memory/k8s.io"); os.IsNotExist(err) {
		t.Cleanup(func() { removeCgroup(t, "/k8s.io/x") })
	}
	n.isolateMounts(t, filepath.Join(n.dir, "containerd", "containerd.sock"), machine)

	// The node's containerd, with the images kubeadm's static pods run
	// imported under their ordinary names: nothing is pulled.
	cniConf := filepath.Join(n.dir, "cni-conf")
	if err := os.MkdirAll(cniConf, 0o700); err != nil {
		t.Fatal(err)
	}
	conflist := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"capn-pods","plugins":[
{"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,"hairpinMode":true,
 "ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":%q}}]}`, n.podCIDR, filepath.Join(n.dir, "cni-ipam"))
	if err := os.WriteFile(filepath.Join(cniConf, "10-capn.conflist"), []byte(conflist), 0o600); err != nil {
		t.Fatal(err)
	}
	var pause string
	for _, im := range images {
		if strings.Contains(im.ref, "/pause:") {
			pause = im.ref
		}
	}
	c := startContainerd(t, n, s, &criConfig{pauseImage: pause, cniConfDir: cniConf})
	c.ns = "k8s.io"
	for _, im := range images {
		c.ctr(t, "images", "import", "--snapshotter", "overlayfs", im.archive)
	}
	listed := c.ctr(t, "images", "ls", "-q")
	for _, im := range images {
		if !strings.Contains(listed, im.ref+"\n") {
			t.Fatalf("ctr images ls has no %s:\n%s", im.ref, listed)
		}
	}
	t.Logf("node %s: containerd up, %d images imported after %s", n.ns, len(images), time.Since(start).Round(time.Millisecond))

	// capn's bootstrap data for the first control plane.
	set, _, err := pki.Ensure(pki.Set{}, pki.Options{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := token.Generate()
	if err != nil {
		t.Fatal(err)
	}
	spec := &capnv1.BootstrapSpec{
		// The images are imported, not pulled, and kube-proxy's and
		// CoreDNS's are not built yet: kubeadm's ImagePull check would
		// try to pull those two, and nothing routes out of the node.
		// SystemVerification fails on cgroup v1 ("To explicitly enable
		// cgroups v1 support for kubelet v1.35 or newer, you must set
		// the kubelet configuration option 'FailCgroupV1' to 'false'.
		// You must also explicitly skip this validation.").
		IgnorePreflightErrors: []string{"ImagePull", "SystemVerification"},
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
	in, err := bootstrap.NewInput(&capnv1.GenerateBootstrap{
		Cluster: cluster, Machine: machine, Role: string(bootstrap.RoleControlPlane), FirstControlPlane: true,
		Version: version, Bootstrap: spec,
	}, bootstrap.Cluster{
		Endpoint: bootstrap.Endpoint{Host: n.nodeIP, Port: 6443},
		Network:  &capnv1.NetworkSpec{ServiceCidrs: []string{"10.96.0.0/12"}, ServiceDomain: "cluster.local"},
		PKI:      set,
	}, tok)
	if err != nil {
		t.Fatal(err)
	}
	out, err := kubeadm.New().Render(in)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(n.dir, "bootstrap-data")
	if err := os.WriteFile(data, out.Data, 0o600); err != nil {
		t.Fatal(err)
	}
	capnNode := buildCapnNode(t, n.dir)
	path := "PATH=" + s.kubeBin + ":" + s.bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

	// The kubelet, as kubeadm's unit runs it: it starts once kubeadm has
	// written its configuration.
	restoreKernelTunables(t)
	kubeletLog := &testkit.Buffer{}
	unit := exec.Command("nsenter", n.inNode(capnNode, "kubelet", "--kubelet", filepath.Join(s.kubeBin, "kubelet"), "--restart-sec", "2s")...)
	unit.Env = append(os.Environ(), path)
	unit.Stdout, unit.Stderr = kubeletLog, kubeletLog
	unit.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := unit.Start(); err != nil {
		t.Fatal(err)
	}
	unitExited := make(chan error, 1)
	go func() { unitExited <- unit.Wait() }()
	t.Cleanup(func() {
		_ = unit.Process.Signal(syscall.SIGTERM)
		select {
		case <-unitExited:
		case <-time.After(45 * time.Second):
			_ = unit.Process.Kill()
			<-unitExited
		}
		c.removeAll(t, netnsBefore)
		if t.Failed() {
			t.Logf("kubelet log:\n%s", tail(kubeletLog.String(), 80))
		}
	})

	// kubeadm init, by capn-node's cloud-config runner.
	initStart := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	runner := exec.CommandContext(ctx, "nsenter", n.inNode(capnNode, "cloud-config", "--data", data)...)
	runner.Env = append(os.Environ(), path)
	runnerLog := &testkit.Buffer{}
	runner.Stdout, runner.Stderr = runnerLog, runnerLog
	if err := runner.Run(); err != nil {
		t.Fatalf("capn-node cloud-config: %v after %s\n%s", err, time.Since(initStart).Round(time.Millisecond), runnerLog.String())
	}
	// kubeadm's phases (its closing advice prints the join token: left out).
	var phases []string
	for _, l := range strings.Split(runnerLog.String(), "\n") {
		if strings.HasPrefix(l, "runcmd[0] stdout: [") || strings.HasPrefix(l, "cloud-config: wrote ") {
			phases = append(phases, l)
		}
	}
	t.Logf("kubeadm init finished in %s (%s since the test began):\n%s", time.Since(initStart).Round(time.Millisecond), time.Since(start).Round(time.Millisecond), strings.Join(phases, "\n"))
	if b, err := os.ReadFile(filepath.Join(n.root, bootstrap.SentinelFile)); err != nil || string(b) != "success\n" {
		t.Fatalf("the bootstrap sentinel %s: %q %v", bootstrap.SentinelFile, b, err)
	}

	// capn's admin kubeconfig, as the bootstrapper issues it.
	ca, err := pki.ParseCA(set.CA, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pki.IssueAdmin(ca, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubeconfig.Render(kubeconfig.Input{ClusterName: cluster, Host: n.nodeIP, Port: 6443, CACertPEM: set.CA.CertPEM, ClientCertPEM: admin.CertPEM, ClientKeyPEM: admin.KeyPEM})
	if err != nil {
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
	if v, err := client.Version(ctx); err != nil || v != version {
		t.Fatalf("the API server at %s: version %q, %v", parsed.Server, v, err)
	}

	// The Node registers, and the static pods run: mirror pods Running in
	// the API, each a container running in the node's containerd.
	var node struct {
		Status struct {
			Addresses []struct{ Type, Address string } `json:"addresses"`
			NodeInfo  struct {
				KubeletVersion          string `json:"kubeletVersion"`
				ContainerRuntimeVersion string `json:"containerRuntimeVersion"`
			} `json:"nodeInfo"`
		} `json:"status"`
	}
	testkit.WaitFor(t, 2*time.Minute, "Node "+machine+" registers", func() bool {
		return client.Get(ctx, "/api/v1/nodes/"+machine, &node) == nil
	})
	want := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
	var pods struct {
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
			Status   struct {
				Phase             string `json:"phase"`
				ContainerStatuses []struct {
					Name        string `json:"name"`
					Image       string `json:"image"`
					ContainerID string `json:"containerID"`
					Ready       bool   `json:"ready"`
				} `json:"containerStatuses"`
			} `json:"status"`
		} `json:"items"`
	}
	var running []string
	testkit.WaitFor(t, 3*time.Minute, "the static pods run, mirror pods Running", func() bool {
		if err := client.Get(ctx, "/api/v1/namespaces/kube-system/pods", &pods); err != nil {
			return false
		}
		running = running[:0]
		for _, p := range pods.Items {
			if p.Status.Phase == "Running" && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].ContainerID != "" {
				running = append(running, p.Metadata.Name)
			}
		}
		for _, w := range want {
			found := false
			for _, r := range running {
				found = found || r == w+"-"+machine
			}
			if !found {
				return false
			}
		}
		return true
	})
	tasks := c.ctr(t, "tasks", "ls")
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			id := strings.TrimPrefix(cs.ContainerID, "containerd://")
			if !strings.Contains(tasks, id) {
				continue
			}
			for _, l := range strings.Split(tasks, "\n") {
				if strings.HasPrefix(l, id) && !strings.Contains(l, "RUNNING") {
					t.Errorf("%s's container %s is not running: %s", p.Metadata.Name, id, l)
				}
			}
		}
	}
	for _, w := range want {
		found := false
		for _, p := range pods.Items {
			if p.Metadata.Name == w+"-"+machine {
				id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
				found = strings.Contains(tasks, id)
			}
		}
		if !found {
			t.Errorf("%s's container is not a task of the node's containerd:\n%s", w, tasks)
		}
	}
	addr := ""
	for _, a := range node.Status.Addresses {
		if a.Type == "InternalIP" {
			addr = a.Address
		}
	}
	if addr != n.nodeIP || node.Status.NodeInfo.KubeletVersion != version {
		t.Errorf("Node %s: InternalIP %q (want %s), kubelet %q", machine, addr, n.nodeIP, node.Status.NodeInfo.KubeletVersion)
	}
	// Still nothing routes out of the node: an outside address goes to
	// the discard device.
	n.checkDiscard(t)
	t.Logf("node %s (%s): Node %s registered (%s, %s), static pods running %v; %s since the test began",
		n.ns, n.nodeIP, machine, node.Status.NodeInfo.KubeletVersion, node.Status.NodeInfo.ContainerRuntimeVersion, running, time.Since(start).Round(time.Millisecond))
}
