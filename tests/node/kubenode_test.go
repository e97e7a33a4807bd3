//go:build linux

package node

import (
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
	"github.com/capn-dev/capn/providers/process/realnode"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
)

// kubeNode is a real node that runs kubeadm's bootstrap data: a node of a
// LAN with a mount namespace of its own, its own containerd (CRI on, the
// CNI config rendered from the pod CIDR its Node is given, images
// imported), and a kubelet kept running as kubeadm's systemd unit would.
type kubeNode struct {
	*node
	machine    string
	c          *containerd
	kubeletLog *testkit.Buffer
	cniConfDir string
}

// cniTemplate is the bridge CNI config every node's containerd renders
// once its kubelet hands it the Node's pod CIDR: cni0 is the pods' gateway
// on the node, addresses from host-local; no masquerade (the other nodes
// and the host route to each node's pods).
const cniTemplate = realnode.CNITemplate

// startKubeNode makes the next node of l for machine: mounts, containerd
// with images imported (the first whose name is pause is the sandbox
// image), and the kubelet unit (capn-node kubelet), which starts the
// kubelet once kubeadm has written its configuration. Everything stops
// when the test ends; what the kubelet left in containerd is removed, and
// the pods' network namespaces not in netnsBefore.
func startKubeNode(t *testing.T, s stack, l *lan, machine, capnNode, path string, images []image, netnsBefore string) *kubeNode {
	t.Helper()
	n := l.addNode(t)
	n.isolateMounts(t, filepath.Join(n.dir, "containerd", "containerd.sock"), machine)
	kn := &kubeNode{node: n, machine: machine, kubeletLog: &testkit.Buffer{}, cniConfDir: filepath.Join(n.dir, "cni-conf")}
	if err := os.MkdirAll(kn.cniConfDir, 0o700); err != nil {
		t.Fatal(err)
	}
	tmpl := filepath.Join(n.dir, "cni.conflist.tmpl")
	if err := os.WriteFile(tmpl, []byte(fmt.Sprintf(cniTemplate, filepath.Join(n.dir, "cni-ipam"))), 0o600); err != nil {
		t.Fatal(err)
	}
	var pause string
	for _, im := range images {
		if pause == "" && strings.Contains(im.ref, "/pause:") {
			pause = im.ref
		}
	}
	if pause == "" {
		t.Fatalf("no pause image among %v", images)
	}
	kn.c = startContainerd(t, n, s, &criConfig{pauseImage: pause, cniConfDir: kn.cniConfDir, cniConfTemplate: tmpl})
	kn.c.ns = "k8s.io"
	for _, im := range images {
		kn.c.ctr(t, "images", "import", "--snapshotter", "overlayfs", im.archive)
	}
	listed := kn.c.ctr(t, "images", "ls", "-q")
	for _, im := range images {
		if !strings.Contains(listed, im.ref+"\n") {
			t.Fatalf("%s: ctr images ls has no %s:\n%s", machine, im.ref, listed)
		}
	}

	unit := exec.Command("nsenter", n.inNode(capnNode, "kubelet", "--kubelet", filepath.Join(s.kubeBin, "kubelet"), "--restart-sec", "2s")...)
	unit.Env = append(os.Environ(), path)
	unit.Stdout, unit.Stderr = kn.kubeletLog, kn.kubeletLog
	unit.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := unit.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- unit.Wait() }()
	t.Cleanup(func() {
		_ = unit.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(45 * time.Second):
			_ = unit.Process.Kill()
			<-exited
		}
		kn.c.removeAll(t, netnsBefore)
		if t.Failed() {
			t.Logf("%s: kubelet log:\n%s", machine, tail(kn.kubeletLog.String(), 60))
		}
	})
	return kn
}

// cloudConfig runs the machine's bootstrap data with capn-node's
// cloud-config runner in the node's namespaces, and checks the Cluster API
// sentinel; it returns kubeadm's phase lines (its closing advice, which
// prints the join token, is left out).
func (kn *kubeNode) cloudConfig(t *testing.T, capnNode, path string, data []byte) []string {
	t.Helper()
	file := filepath.Join(kn.dir, "bootstrap-data")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	runner := exec.CommandContext(ctx, "nsenter", kn.inNode(capnNode, "cloud-config", "--data", file)...)
	runner.Env = append(os.Environ(), path)
	log := &testkit.Buffer{}
	runner.Stdout, runner.Stderr = log, log
	if err := runner.Run(); err != nil {
		t.Fatalf("%s: capn-node cloud-config: %v after %s\n%s", kn.machine, err, time.Since(began).Round(time.Millisecond), log.String())
	}
	var phases []string
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.HasPrefix(l, "runcmd[0] stdout: [") || strings.HasPrefix(l, "cloud-config: wrote ") {
			phases = append(phases, l)
		}
	}
	if b, err := os.ReadFile(filepath.Join(kn.root, bootstrap.SentinelFile)); err != nil || string(b) != "success\n" {
		t.Fatalf("%s: the bootstrap sentinel %s: %q %v\n%s", kn.machine, bootstrap.SentinelFile, b, err, log.String())
	}
	return phases
}

// findKubectl is kubectl from the first directory of CAPN_KUBE_BIN that
// has one (make -s kube-bin), or "".
func findKubectl() string {
	for _, d := range filepath.SplitList(os.Getenv("CAPN_KUBE_BIN")) {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "kubectl")); err == nil {
			return filepath.Join(d, "kubectl")
		}
	}
	return ""
}

// waitAPI polls check every 250 ms (an API server on a loaded host) until
// it returns nil, and fails the test with its last error after timeout.
func waitAPI(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	if err := testkit.Poll(timeout, 250*time.Millisecond, check); err != nil {
		t.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
}

// raiseInotifyInstances raises fs.inotify.max_user_instances to at least
// min for as long as the test runs, and puts the old value back after. A
// node's containerd (its CNI config watcher), kubelet and API server each
// take several inotify instances, all counted against root's one limit
// (128 by default), which other Kubernetes processes on a shared host may
// have used up: containerd's CRI then fails to load ("failed to create
// fsnotify watcher: couldn't initialize inotify: too many open files")
// and kubeadm finds no CRI. Lowering it back takes nothing from a process
// that holds instances; only new ones wait for room, as before.
func raiseInotifyInstances(t *testing.T, min int) {
	t.Helper()
	const path = "/proc/sys/fs/inotify/max_user_instances"
	old, raised, err := realnode.RaiseInotifyInstances(min)
	if err != nil {
		t.Fatal(err)
	}
	if !raised {
		return
	}
	cur := strings.TrimSpace(string(old))
	t.Logf("fs.inotify.max_user_instances %s → %d for the test", cur, min)
	t.Cleanup(func() {
		if err := os.WriteFile(path, old, 0o644); err != nil {
			t.Errorf("restoring %s to %s: %v", path, cur, err)
		}
	})
}
