//go:build linux

package conformance

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// TestHostedLeftovers: the directory of the cluster, a process that names
// it and a listener on the record's endpoint are each reported, and
// nothing once they are gone; a cluster whose name extends another's is
// not confused with it.
func TestHostedLeftovers(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, "c1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A process whose command line names a path under the directory (sh
	// stays: its $0 is the path).
	cmd := exec.Command("sh", "-c", "sleep 60; :", filepath.Join(dir, "etcd-0"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	rec := &capnv1.ControlPlaneRecord{Endpoint: &capnv1.Endpoint{Host: "127.0.0.1", Port: int32(port)}}

	left := HostedLeftovers(data, "c1", rec)
	want := []string{"directory " + dir, "process " + strconv.Itoa(cmd.Process.Pid) + ": sh -c", "something still listens on the endpoint 127.0.0.1:" + strconv.Itoa(port)}
	if len(left) != len(want) {
		t.Fatalf("leftovers %q, want %d: %q", left, len(want), want)
	}
	for i, w := range want {
		if !strings.HasPrefix(left[i], w) {
			t.Errorf("leftover %d: %q, want %q…", i, left[i], w)
		}
	}
	if other := HostedLeftovers(data, "c", nil); len(other) != 0 {
		t.Errorf("cluster c (c1's prefix): leftovers %q", other)
	}

	_ = ln.Close()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if left := HostedLeftovers(data, "c1", rec); len(left) != 0 {
		t.Errorf("after all is gone: %q", left)
	}
}

// TestRunControlPlaneNeedsItsParts: a ControlPlane without its parts is
// refused naming every missing one.
func TestRunControlPlaneNeedsItsParts(t *testing.T) {
	err := ControlPlane{}.validate()
	for _, w := range []string{"Type is required", "Setup is required", "Manifest is required", "Leftovers is required"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("validate: %v, want %q", err, w)
		}
	}
	ok := ControlPlane{Type: "hosted", Setup: func(*testing.T, *ControlPlaneEnv) {},
		Manifest:  func(string, string, int32) string { return "" },
		Leftovers: func(*testing.T, *ControlPlaneEnv, string, *capnv1.ControlPlaneRecord) []string { return nil }}
	if err := ok.validate(); err != nil {
		t.Errorf("a complete ControlPlane: %v", err)
	}
}
