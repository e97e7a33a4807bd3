//go:build linux

package process_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/process/realnode"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
)

// realWorld is what the real-node tests through capn share: capn's core
// services and gateway as processes, the process provider in node mode
// (in this test process, restartable), and one kubeadm cluster of 1
// control plane and 2 workers on real nodes, its 3 Nodes Ready and capn's
// cluster Ready.
type realWorld struct {
	t       *testing.T
	env     *sdktest.Env
	opts    process.Options
	c       *conformance.Capn
	k       *conformance.KubeCluster
	name    string
	begin   time.Time
	applied time.Time
	// stop stops the provider's service (a test that restarts it sets
	// the new one's).
	stop        func()
	netnsBefore string
}

// newRealWorld brings the world up: the node images plus extra (images a
// test's pods run, imported into every node), and manifest, a cluster
// manifest with three %s: name, Kubernetes version and pod CIDR
// (realManifest, or one with more settings) that makes nodes machines,
// each a Node. It skips (fails under
// CAPN_REQUIRE_NODESTACK=1) without the node stack, and removes
// everything it made when the test ends.
func newRealWorld(t *testing.T, extra []realnode.Image, manifest string, nodes int) *realWorld {
	t.Helper()
	stack, images := needRealNodes(t)
	kubeBin := conformance.KubeBin(t, "")
	w := &realWorld{t: t, begin: time.Now()}
	restoreKernelTunables(t)
	keepInotify(t)
	w.netnsBefore, _ = realnode.Run(nil, nil, "ip", "netns", "list")
	checkContainerCgroups(t)

	imgDir := nodeImagesWith(t, images, extra)

	w.env = sdktest.New(t)
	w.opts = realOptions(t, t.TempDir(), stack, imgDir)
	t.Cleanup(func() {
		if err := process.Purge(w.opts); err != nil {
			t.Errorf("purge: %v", err)
		}
	})
	t.Cleanup(func() {
		if left := process.RealNodeLeftovers(w.opts); len(left) > 0 {
			t.Logf("real nodes left before the purge: %v", left)
		}
	})
	w.stop = w.env.Run(process.NewService(w.opts, conformance.SDKOptions()))
	t.Cleanup(func() { w.stop() })
	w.announced()
	w.c = conformance.StartCapn(t, w.env.Server.URL())
	w.name = fmt.Sprintf("rn-%d", time.Now().UnixNano()%100000)
	w.k = conformance.NewKubeCluster(t, w.c, w.env.JS, kubeBin, w.name)
	podCIDR := freePodCIDR(t)
	t.Logf("capn up in %s; cluster %s at %s, pods %s", time.Since(w.begin).Round(time.Millisecond), w.name, w.k.Version, podCIDR)

	w.applied = time.Now()
	w.k.Apply(fmt.Sprintf(manifest, w.name, w.k.Version, podCIDR))
	// capn hands out the kubeconfig once the cluster has its endpoint.
	w.k.Kubeconfig = filepath.Join(w.c.Home, w.name+".kubeconfig")
	conformance.Poll(t, "capn kubeconfig "+w.name, 5*time.Minute, func() error {
		cmd := exec.Command(filepath.Join(w.c.Progs, "capn"), "kubeconfig", w.name, "-o", w.k.Kubeconfig)
		cmd.Env = []string{"HOME=" + w.c.Home, "XDG_CONFIG_HOME=" + filepath.Join(w.c.Home, "xdg"), "CAPN_SERVER=" + w.c.Server, "CAPN_TOKEN=" + w.c.Token}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	conformance.Poll(t, fmt.Sprintf("%d Nodes Ready", nodes), time.Duration(4*nodes)*time.Minute, func() error {
		ready, total, err := w.readyNodes()
		if err != nil {
			return err
		}
		if total != nodes || ready != nodes {
			return fmt.Errorf("%d Nodes, %d Ready at %s", total, ready, w.k.Version)
		}
		return nil
	})
	nodesReady := time.Since(w.applied)
	w.k.Clusters.WaitReady(w.name, 5*time.Minute)
	// Each Node is its machine's: registered with the providerID capn
	// reports for it (the provider hands it to the node's kubelet), so
	// the health-watcher reads, drains and deletes it.
	if ms := w.k.Running(); len(ms) != nodes {
		t.Fatalf("capn's cluster %s is Ready with %d Running machines, want %d", w.name, len(ms), nodes)
	} else {
		w.k.WaitNodes(ms, time.Minute)
	}
	out, _ := w.k.Kubectl("get", "nodes", "-o", "wide")
	t.Logf("%d Nodes Ready %s after capn apply (capn's cluster Ready %s):\n%s", nodes, nodesReady.Round(time.Millisecond), time.Since(w.applied).Round(time.Millisecond), out)
	return w
}

// nodeImagesWith is a node images directory (an images.txt) of the
// images of the node images directory images and extra.
func nodeImagesWith(t *testing.T, images string, extra []realnode.Image) string {
	t.Helper()
	list, err := realnode.ReadImages(images)
	if err != nil {
		t.Fatal(err)
	}
	imgDir := filepath.Join(t.TempDir(), "images")
	var lines []string
	for _, im := range append(list, extra...) {
		lines = append(lines, im.Ref+" "+im.Archive)
	}
	if err := os.MkdirAll(imgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(imgDir, "images.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return imgDir
}

// realOptions are the provider's options in node mode over stateDir,
// with the node stack and the node images directory imgDir; the test
// purges every node of stateDir when it ends.
func realOptions(t *testing.T, stateDir, stack, imgDir string) process.Options {
	opts := options(t, stateDir)
	opts.RealNodes, opts.NodeStack, opts.NodeImages = true, stack, imgDir
	opts.HeartbeatEvery, opts.WatchEvery = time.Second, time.Second
	return opts
}

// nodeList is what the tests read of kubectl get nodes -o json.
type nodeList struct {
	Items []struct {
		Metadata struct {
			Name              string            `json:"name"`
			CreationTimestamp time.Time         `json:"creationTimestamp"`
			Labels            map[string]string `json:"labels"`
		} `json:"metadata"`
		Status struct {
			Conditions []struct {
				Type               string
				Status             string
				LastTransitionTime time.Time `json:"lastTransitionTime"`
			} `json:"conditions"`
			Addresses []struct{ Type, Address string } `json:"addresses"`
			NodeInfo  struct {
				KubeletVersion string `json:"kubeletVersion"`
			} `json:"nodeInfo"`
		} `json:"status"`
	} `json:"items"`
}

// ready are the Nodes Ready at version, with when they became so.
func (nl nodeList) ready(version string) map[string]time.Time {
	out := map[string]time.Time{}
	for _, n := range nl.Items {
		for _, cond := range n.Status.Conditions {
			if cond.Type == "Ready" && cond.Status == "True" && n.Status.NodeInfo.KubeletVersion == version {
				out[n.Metadata.Name] = cond.LastTransitionTime
			}
		}
	}
	return out
}

// nodes lists the cluster's Nodes.
func (w *realWorld) nodes() (nodeList, error) {
	var nl nodeList
	out, err := w.k.Kubectl("get", "nodes", "-o", "json")
	if err != nil {
		return nl, err
	}
	return nl, json.Unmarshal([]byte(out), &nl)
}

// readyNodes counts the cluster's Nodes, and those Ready at its version.
func (w *realWorld) readyNodes() (ready, total int, err error) {
	nl, err := w.nodes()
	if err != nil {
		return 0, 0, err
	}
	return len(nl.ready(w.k.Version)), len(nl.Items), nil
}

// announced waits for the provider's announcement with real-kubernetes.
func (w *realWorld) announced() {
	conformance.Poll(w.t, "the provider's announcement with real-kubernetes", time.Minute, func() error {
		a, ok := w.env.Announcement(process.Name)
		if !ok || !slices.Contains(a.GetCapabilities(), sdk.CapabilityRealKubernetes) {
			return fmt.Errorf("announcement %v", a)
		}
		return nil
	})
}

// deleteAndCheck is `capn delete cluster --wait`, and then nothing of the
// real nodes is left on the host.
func (w *realWorld) deleteAndCheck() {
	t := w.t
	deleted := time.Now()
	w.c.CLI("delete", "cluster", w.name, "--wait", "--timeout", "5m")
	t.Logf("capn delete --wait took %s", time.Since(deleted).Round(time.Millisecond))
	conformance.Poll(t, "nothing of the real nodes left on the host", time.Minute, func() error {
		if left := process.RealNodeLeftovers(w.opts); len(left) > 0 {
			return fmt.Errorf("%v", left)
		}
		// Any other namespace new since the start (a pod's, say). The
		// nodes' and switches' own (capn-node-<lan>-<i>, capn-lan-<lan>)
		// are RealNodeLeftovers' for this provider's LAN; another test's
		// real nodes may be running beside this one (go test runs
		// packages at once).
		after, _ := realnode.Run(nil, nil, "ip", "netns", "list")
		for _, l := range strings.Split(after, "\n") {
			if f := strings.Fields(l); len(f) > 0 && !strings.Contains(w.netnsBefore, f[0]) &&
				!strings.HasPrefix(f[0], "capn-node-") && !strings.HasPrefix(f[0], "capn-lan-") {
				return fmt.Errorf("network namespace %s", f[0])
			}
		}
		return nil
	})
	t.Logf("test took %s", time.Since(w.begin).Round(time.Millisecond))
}

// containerCgroups is where containerd (cgroupfs driver, cgroup v1) puts
// the cgroup of every container of every real node on this host.
const containerCgroups = "/sys/fs/cgroup/memory/k8s.io"

// checkContainerCgroups fails the test if, when it ends, a container
// cgroup made during it is left with no process in it: a container the
// node's removal killed but whose cgroup it did not remove. Another
// test's real nodes may run beside this one, so the cgroups of live
// containers (with processes) and those there before are not ours to
// judge; a cgroup emptied a moment ago by their teardown gets 30 s.
func checkContainerCgroups(t *testing.T) {
	before := map[string]bool{}
	entries, _ := os.ReadDir(containerCgroups)
	for _, e := range entries {
		before[e.Name()] = true
	}
	t.Cleanup(func() {
		conformance.Poll(t, "no empty container cgroup left in "+containerCgroups, 30*time.Second, func() error {
			entries, _ := os.ReadDir(containerCgroups)
			var left []string
			for _, e := range entries {
				if !e.IsDir() || before[e.Name()] {
					continue
				}
				if procs, err := os.ReadFile(filepath.Join(containerCgroups, e.Name(), "cgroup.procs")); err == nil && len(strings.TrimSpace(string(procs))) == 0 {
					left = append(left, e.Name())
				}
			}
			if len(left) > 0 {
				return fmt.Errorf("empty container cgroups left: %v", left)
			}
			return nil
		})
	})
}
