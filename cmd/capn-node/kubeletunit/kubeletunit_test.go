package kubeletunit_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capn-dev/capn/cmd/capn-node/kubeletunit"
)

func write(t *testing.T, root, path, content string) {
	t.Helper()
	p := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestArgsAsTheUnitExpandsThem(t *testing.T) {
	root := t.TempDir()
	fixed := "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml"
	args, err := kubeletunit.Args(root)
	if err != nil || strings.Join(args, " ") != fixed {
		t.Fatalf("no env files: %q %v", args, err)
	}
	// As kubeadm v1.37 writes it, and a machine's own defaults.
	write(t, root, kubeletunit.FlagsEnv, `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --hostname-override=cp-0  --pod-infra-container-image=registry.k8s.io/pause:3.10.2"`+"\n")
	write(t, root, kubeletunit.DefaultsEnv, "# the machine's\n\nKUBELET_EXTRA_ARGS='--v=2'\nOTHER=x\n")
	args, err = kubeletunit.Args(root)
	want := fixed + " --container-runtime-endpoint=unix:///run/containerd/containerd.sock --hostname-override=cp-0 --pod-infra-container-image=registry.k8s.io/pause:3.10.2 --v=2"
	if err != nil || strings.Join(args, " ") != want {
		t.Fatalf("args %q (%v)\nwant %q", strings.Join(args, " "), err, want)
	}
	write(t, root, kubeletunit.DefaultsEnv, "KUBELET_EXTRA_ARGS\n")
	if _, err := kubeletunit.Args(root); err == nil || !strings.Contains(err.Error(), `default/kubelet:1: "KUBELET_EXTRA_ARGS" is not NAME=value`) {
		t.Fatalf("error %v", err)
	}
}
