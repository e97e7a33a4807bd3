package kubeletunit_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/kubeletunit"
	"github.com/capn-dev/capn/internal/testkit"
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

// TestRunWaitsForConfigRestartsAndStops runs the unit with /bin/sh as its
// "kubelet", which refuses the kubelet's arguments and exits at once: the
// unit starts nothing before kubeadm's config exists, restarts the binary
// after each exit, and returns when its context ends.
func TestRunWaitsForConfigRestartsAndStops(t *testing.T) {
	root := t.TempDir()
	out := &testkit.Buffer{}
	u := kubeletunit.Unit{Kubelet: "/bin/sh", Root: root, RestartDelay: 10 * time.Millisecond, Output: out}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	// Nothing starts without the config (waits of 200 ms pass).
	if testkit.Poll(600*time.Millisecond, 50*time.Millisecond, func() error {
		if strings.Contains(out.String(), "starting") {
			return nil
		}
		return errors.New("not started")
	}) == nil {
		t.Fatalf("the unit started the kubelet before %s existed:\n%s", kubeletunit.ConfigFile, out.String())
	}
	write(t, root, kubeletunit.ConfigFile, "kind: KubeletConfiguration\n")
	testkit.WaitFor(t, 10*time.Second, "the unit restarts the exited kubelet twice", func() bool {
		return strings.Count(out.String(), "kubelet unit: starting /bin/sh --bootstrap-kubeconfig=") >= 3 &&
			strings.Count(out.String(), "kubelet exited (exit status 2); restarting in 10ms") >= 2
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
