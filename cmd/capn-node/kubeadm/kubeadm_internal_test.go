package kubeadm

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestStopStaticPods: a control plane that left moves kubeadm's four
// control-plane manifests out of the kubelet's dir (as kubeadm reset
// removes them) and leaves any other static pod; again, nothing moves.
func TestStopStaticPods(t *testing.T) {
	c := New(Config{Root: t.TempDir()})
	dir := c.cfg.path(ManifestsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range append(slices.Clone(ControlPlaneManifests), "user-pod.yaml") {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	moved, err := c.stopStaticPods()
	if err != nil || !slices.Equal(moved, ControlPlaneManifests) {
		t.Fatalf("moved %v, %v; want %v", moved, err, ControlPlaneManifests)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 1 || left[0].Name() != "user-pod.yaml" {
		t.Errorf("left in %s: %v", dir, left)
	}
	for _, f := range ControlPlaneManifests {
		if b, err := os.ReadFile(filepath.Join(c.cfg.path(LeftManifestsDir), f)); err != nil || string(b) != f {
			t.Errorf("%s in %s: %q %v", f, LeftManifestsDir, b, err)
		}
	}
	if moved, err := c.stopStaticPods(); err != nil || len(moved) != 0 {
		t.Errorf("again: moved %v, %v", moved, err)
	}
}
