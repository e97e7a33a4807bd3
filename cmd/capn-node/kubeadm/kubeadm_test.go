package kubeadm_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	"github.com/capn-dev/capn/cmd/capn-node/kubeadm"
	"github.com/capn-dev/capn/internal/testkit"
)

func TestReadEtcdManifest(t *testing.T) {
	m, err := kubeadm.ReadEtcdManifest("testdata/etcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "rn-1-cp-b" || !slices.Equal(m.ClientURLs, []string{"https://10.77.3.2:2379"}) || !slices.Equal(m.PeerURLs, []string{"https://10.77.3.2:2380"}) {
		t.Errorf("member %+v", m)
	}
	if _, err := kubeadm.ReadEtcdManifest(filepath.Join(t.TempDir(), "etcd.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing manifest: %v, want fs.ErrNotExist (no stacked etcd)", err)
	}
	bad := filepath.Join(t.TempDir(), "etcd.yaml")
	if err := os.WriteFile(bad, []byte("spec:\n  containers:\n  - name: etcd\n    command: [etcd, --data-dir=/var/lib/etcd]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = kubeadm.ReadEtcdManifest(bad)
	for _, want := range []string{bad, "no --name", "no --advertise-client-urls", "no --initial-advertise-peer-urls"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a manifest without the member's flags: %v, want it to say %q", err, want)
		}
	}
}

// node is a node's root and state dir; files are written under the root.
type node struct {
	t    *testing.T
	cfg  kubeadm.Config
	root string
}

func newNode(t *testing.T, files ...string) node {
	n := node{t: t, root: t.TempDir()}
	n.cfg = kubeadm.Config{Root: n.root, StateDir: t.TempDir(), NodeName: "rn-1-cp-b", Log: zerolog.Nop()}
	for _, f := range files {
		n.write(f, "x")
	}
	return n
}

func (n node) write(path, content string) {
	p := filepath.Join(n.root, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		n.t.Fatal(err)
	}
}

// TestIsControlPlane: only a node kubeadm made a control plane (its API
// server's static pod), or one that left etcd, keeps an etcd member; a
// worker's agent runs nothing of it.
func TestIsControlPlane(t *testing.T) {
	if kubeadm.IsControlPlane(newNode(t).cfg) {
		t.Error("an empty node is a control plane")
	}
	if kubeadm.IsControlPlane(newNode(t, "/etc/kubernetes/kubelet.conf", "/var/lib/kubelet/config.yaml").cfg) {
		t.Error("a worker is a control plane")
	}
	if !kubeadm.IsControlPlane(newNode(t, "/etc/kubernetes/manifests/kube-apiserver.yaml").cfg) {
		t.Error("a node with kubeadm's API server pod is not a control plane")
	}
	left := newNode(t)
	if err := os.WriteFile(filepath.Join(left.cfg.StateDir, kubeadm.LeftFile), []byte("done\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !kubeadm.IsControlPlane(left.cfg) {
		t.Error("a control plane that left etcd (its manifests moved away) is not one")
	}
}

func run(t *testing.T, cp *kubeadm.ControlPlane) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); cp.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func condition(cp *kubeadm.ControlPlane, typ string) (kube.Condition, bool) {
	for _, c := range cp.EtcdConditions() {
		if c.Type == typ {
			return c.Condition, true
		}
	}
	return kube.Condition{}, false
}

// TestRunAfterLeaving: a restarted agent of a control plane that left
// etcd says so again (EtcdMemberRemoved=True, what was done) and touches
// nothing.
func TestRunAfterLeaving(t *testing.T) {
	n := newNode(t)
	if err := os.WriteFile(filepath.Join(n.cfg.StateDir, kubeadm.LeftFile), []byte("etcd member rn-1-cp-b (1a) removed; 1 voting members left: rn-1-cp-a healthy\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cp := kubeadm.New(n.cfg)
	run(t, cp)
	testkit.WaitFor(t, 5*time.Second, "EtcdMemberRemoved=True", func() bool {
		c, ok := condition(cp, kube.CondEtcdMemberRemoved)
		return ok && c.Status == "True" && c.Reason == kube.ReasonMemberRemoved && c.Message == "kubeadm: etcd member rn-1-cp-b (1a) removed; 1 voting members left: rn-1-cp-a healthy"
	})
	if !cp.Left() {
		t.Error("Left() false after leaving")
	}
	if len(cp.EtcdConditions()) != 1 {
		t.Errorf("conditions %+v, want EtcdMemberRemoved only", cp.EtcdConditions())
	}
}

// TestRunSaysWhatIsMissing: a control plane whose kubeadm files cannot be
// used says which (EtcdMembersHealthy=Unknown) and never says its member
// is removed.
func TestRunSaysWhatIsMissing(t *testing.T) {
	old := kube.SweepEvery
	kube.SweepEvery = 50 * time.Millisecond
	t.Cleanup(func() { kube.SweepEvery = old })
	n := newNode(t, "/etc/kubernetes/manifests/kube-apiserver.yaml")
	cp := kubeadm.New(n.cfg)
	run(t, cp)
	testkit.WaitFor(t, 5*time.Second, "EtcdMembersHealthy=Unknown naming admin.conf", func() bool {
		c, ok := condition(cp, kube.CondEtcdMembersHealthy)
		return ok && c.Status == "Unknown" && strings.Contains(c.Message, "kubeadm: ") && strings.Contains(c.Message, filepath.Join(n.root, "etc/kubernetes/admin.conf"))
	})
	if _, ok := condition(cp, kube.CondEtcdMemberRemoved); ok {
		t.Error("EtcdMemberRemoved reported by a control plane that cannot reach its API server")
	}
	if cp.Left() {
		t.Error("Left() true for a control plane that did not leave")
	}
}
