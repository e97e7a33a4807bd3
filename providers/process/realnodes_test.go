//go:build linux

package process_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/process/realnode"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// TestRealNodesRefuseWithoutStack: node mode without the node stack
// refuses to start, naming what is missing and the make command, and
// makes nothing.
func TestRealNodesRefuseWithoutStack(t *testing.T) {
	dir := t.TempDir()
	opts := process.Options{NodeBinary: nodeBinary, StateDir: filepath.Join(dir, "state"), RealNodes: true,
		NodeStack: filepath.Join(dir, "no-stack") + ":" + filepath.Join(dir, "no-kube"), NodeImages: filepath.Join(dir, "no-images")}
	err := opts.Validate()
	if err == nil {
		t.Fatal("node mode without a node stack validated")
	}
	for _, want := range []string{"process-real-nodes", "containerd in the node stack", "make nodestack", "kubelet", "make nodeimages"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%v", want, err)
		}
	}
	if _, err := process.New(opts); err == nil {
		t.Fatal("process.New started node mode without a node stack")
	}
	if _, err := os.Stat(opts.StateDir); !os.IsNotExist(err) {
		t.Errorf("the refused provider made its state dir: %v", err)
	}
}

// TestRealNodesAnnounceNoReboot: node mode announces stop-start and
// real-kubernetes but no reboot — its Reboot restarts the agent only, the
// node's kubelet and containers run on — so the remediator replaces an
// unhealthy real node; the default mode still announces reboot.
func TestRealNodesAnnounceNoReboot(t *testing.T) {
	caps := process.CapabilitiesOf(process.Options{RealNodes: true})
	if !slices.Equal(caps, []string{sdk.CapabilityStopStart, sdk.CapabilityRealKubernetes}) {
		t.Errorf("node mode announces %v, want [stop-start real-kubernetes]", caps)
	}
	if caps := process.CapabilitiesOf(process.Options{}); !slices.Contains(caps, sdk.CapabilityReboot) {
		t.Errorf("the default mode announces %v, without reboot", caps)
	}
}

// needRealNodes skips (fails under CAPN_REQUIRE_NODESTACK=1) unless this
// host can run real nodes with kubeadm.
func needRealNodes(t *testing.T) (stack, images string) {
	t.Helper()
	stack, images = os.Getenv("CAPN_NODESTACK_BIN"), os.Getenv("CAPN_NODEIMAGES")
	if err := realnode.ParseStack(stack).Check(true, images); err != nil {
		if os.Getenv("CAPN_REQUIRE_NODESTACK") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	// Real nodes of other packages' tests (tests/node) are the host's too.
	release, err := realnode.LockHost("realnodes", t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return stack, images
}

// freePodCIDR is a 10.252.x.0/22 no address or route of this host is in.
func freePodCIDR(t *testing.T) string {
	routes, err := realnode.Run(nil, nil, "ip", "-4", "route", "show", "table", "all")
	if err != nil {
		t.Fatal(err)
	}
	seed := int(time.Now().UnixNano() % 64)
	for i := 0; i < 64; i++ {
		b := ((seed + i) % 64) * 4
		free := true
		for j := 0; j < 4; j++ {
			free = free && !strings.Contains(routes, fmt.Sprintf("10.252.%d.", b+j))
		}
		if free {
			return fmt.Sprintf("10.252.%d.0/22", b)
		}
	}
	t.Fatal("no free 10.252.x.0/22 on this host")
	return ""
}

// realManifest is a kubeadm cluster of 1 control plane and 2 workers on
// real nodes, with what this host needs from kubeadm and the kubelet
// (docs/providers.md, real nodes): name, version, pod CIDR.
const realManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  controlPlane:
    provider: process
    replicas: 1
  workerPools:
  - name: md-0
    provider: process
    replicas: 2
  network:
    podCidrs: [%s]
    serviceCidrs: [10.96.0.0/12]
  bootstrap:
    provider: kubeadm
    ignorePreflightErrors: [SystemVerification]
    kubeletExtraArgs:
      fail-cgroupv1: "false"
      cgroup-driver: cgroupfs
      cgroups-per-qos: "false"
      enforce-node-allocatable: ""
      eviction-hard: "memory.available<1Mi,nodefs.available<1%%,imagefs.available<1%%"
      local-storage-capacity-isolation: "false"
`

// restoreKernelTunables puts back, when the test ends, the host-wide
// sysctls a kubelet sets at start (not per network namespace).
func restoreKernelTunables(t *testing.T) {
	for _, f := range []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"} {
		path := "/proc/sys/" + f
		old, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("kernel tunable %s: %v", f, err)
		}
		t.Cleanup(func() {
			if cur, _ := os.ReadFile(path); string(cur) != string(old) {
				if err := os.WriteFile(path, old, 0o644); err != nil {
					t.Errorf("restoring %s: %v", f, err)
				}
			}
		})
	}
}

// TestRealNodesRunOnlyKubeadmData: a machine whose bootstrap data is not
// the kubeadm provider's is Failed at create in node mode, with a message
// that says why, and nothing of a node is made.
func TestRealNodesRunOnlyKubeadmData(t *testing.T) {
	stack, images := needRealNodes(t)
	keepInotify(t)
	opts := process.Options{NodeBinary: nodeBinary, StateDir: t.TempDir(), RealNodes: true, NodeStack: stack, NodeImages: images, HealthPort: -1}
	t.Cleanup(func() {
		if err := process.Purge(opts); err != nil {
			t.Errorf("purge: %v", err)
		}
	})
	p, err := process.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	// A node-mode reboot would restart only the agent: not announced.
	if caps := p.Capabilities(); slices.Contains(caps, sdk.CapabilityReboot) || !slices.Contains(caps, sdk.CapabilityRealKubernetes) {
		t.Errorf("node mode's capabilities %v: want real-kubernetes, no reboot", caps)
	}
	for _, bp := range []string{"kube-local", "script"} {
		m, err := p.CreateMachine(context.Background(), &capnv1.CreateMachine{
			Cluster: "c1", Machine: "m-" + bp, Version: "v1.37.2", Role: process.RoleControlPlane,
			BootstrapProvider: bp, BootstrapChecksum: "sha256:" + strings.Repeat("0", 64),
		})
		if err != nil {
			t.Fatal(err)
		}
		if m.GetStateValue() != sdk.StateFailed || !strings.Contains(m.GetMessage(), "real nodes run kubeadm bootstrap data") || !strings.Contains(m.GetMessage(), bp) {
			t.Errorf("%s: state %s, message %q", bp, m.GetState(), m.GetMessage())
		}
	}
	if left := process.RealNodeLeftovers(opts); len(left) > 0 {
		t.Errorf("a refused machine made %v", left)
	}
}

// keepInotify puts this host's fs.inotify.max_user_instances back when the
// test ends: the provider raises it for its nodes and leaves it.
func keepInotify(t *testing.T) {
	const path = "/proc/sys/fs/inotify/max_user_instances"
	if old, err := os.ReadFile(path); err == nil {
		t.Cleanup(func() { _ = os.WriteFile(path, old, 0o644) })
	}
}
