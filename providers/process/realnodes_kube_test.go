//go:build linux

package process_test

import (
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/process/realnode"
	"github.com/capn-dev/capn/services/daemon"
)

// webRef is the project's web server image (tests/node/testdata/web) as
// the real-node tests build it FROM scratch.
const webRef = "capn.local/test/web:v1"

// buildWebImage builds the web server and its image (capn-node image)
// into dir and returns the image.
func buildWebImage(t *testing.T, dir string) realnode.Image {
	t.Helper()
	web := filepath.Join(dir, "web")
	build := exec.Command("go", "build", "-trimpath", "-o", web, "../../tests/node/testdata/web")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build web: %v\n%s", err, out)
	}
	archive := filepath.Join(dir, "web.tar")
	if out, err := exec.Command(nodeBinary, "image", "--ref", webRef, "--out", archive, "--file", "web="+web, "--entrypoint", "/web").CombinedOutput(); err != nil {
		t.Fatalf("capn-node image: %v\n%s", err, out)
	}
	return realnode.Image{Ref: webRef, Archive: archive}
}

// TestRealNodesKubernetes is issue 26's provider proof: the provider
// conformance suite's Kubernetes check, kubeadm flavour
// (conformance.RunKubernetes with Kubernetes.Kubeadm), on the process
// provider in node mode — every machine a real node on this host whose
// capn-node agent runs the machine's kubeadm bootstrap data. capn's core
// services and CLI make a cluster of 1 control plane and 2 workers; its
// Nodes Ready, kubeadm's etcd healthy; a Deployment of the project's web
// server really runs and its Service answers a pod on one worker, by
// ClusterIP and by DNS name, from a pod on the other; the workers pool is
// labelled, scaled 2 → 3 → 2 (drained first), a worker whose kubelet is
// stopped (SIGSTOP) and one whose whole node is killed are replaced; the
// delete leaves nothing. On the Ready cluster (Kubeadm.Ready) this
// provider's own checks: RSS per node, no route out of any node, and a
// restart of the provider while the nodes run on (web still answers,
// every agent heartbeats through the new provider's relay).
func TestRealNodesKubernetes(t *testing.T) {
	stack, images := needRealNodes(t)
	restoreKernelTunables(t)
	keepInotify(t)
	checkContainerCgroups(t)
	netnsBefore, _ := realnode.Run(nil, nil, "ip", "netns", "list")
	imgDir := nodeImagesWith(t, images, []realnode.Image{buildWebImage(t, t.TempDir())})
	kubeadmManifest := strings.Replace(realManifest, "  - name: md-0\n", "  - name: workers\n", 1)
	if kubeadmManifest == realManifest {
		t.Fatal("realManifest's worker pool changed: no md-0 pool to name workers")
	}

	conformance.RunKubernetes(t, conformance.Provider{
		Name: process.Name,
		New: func(t *testing.T, env *conformance.Env) daemon.Service {
			return process.NewService(realOptions(t, env.Dir, stack, imgDir), env.SDK)
		},
	}, conformance.Features{
		OutOfBandDelete: func(t *testing.T, env *conformance.Env, cluster, machine string) {
			killRealNode(t, env.Dir, cluster, machine)
		},
		Disk: &conformance.Disk{
			Read: func(_ *testing.T, env *conformance.Env, cluster, machine, path string) ([]byte, bool) {
				return readNodeFile(env.Dir, cluster, machine, path)
			},
		},
		Leftovers: realLeftovers(netnsBefore),
		Kubernetes: &conformance.Kubernetes{
			StopKubelet: func(t *testing.T, env *conformance.Env, cluster, machine string) {
				stopRealKubelet(t, env.Dir, cluster, machine)
			},
			Kubeadm: &conformance.Kubeadm{
				Manifest: func(cluster, version string) string {
					return fmt.Sprintf(kubeadmManifest, cluster, version, freePodCIDR(t))
				},
				WebImage: webRef,
				Ready:    realNodesReady,
			},
		},
	})
}

// realNodeOf is the network namespace and directory of a machine's real
// node.
func realNodeOf(stateDir, cluster, machine string) (ns, dir string, err error) {
	nss, err := process.RealNodeNamespaces(stateDir)
	if err != nil {
		return "", "", err
	}
	ns, ok := nss[cluster+"/"+machine]
	if !ok {
		return "", "", fmt.Errorf("no real node of %s/%s: %v", cluster, machine, nss)
	}
	return ns, filepath.Join(stateDir, "realnodes", ns[strings.LastIndexByte(ns, '-')+1:]), nil
}

// readNodeFile reads path as the machine's node sees it: through the
// root of the process that holds the node's mounts (its /etc overlay,
// where kubeadm wrote /etc/kubernetes).
func readNodeFile(stateDir, cluster, machine, path string) ([]byte, bool) {
	_, dir, err := realNodeOf(stateDir, cluster, machine)
	if err != nil {
		return nil, false
	}
	pid, err := os.ReadFile(filepath.Join(dir, realnode.HolderPIDFile))
	if err != nil {
		return nil, false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(pid)), "root", path))
	return b, err == nil
}

// killRealNode removes a machine's node behind capn's back: kill -9 of
// every process of it (containerd, the shims, the containers, the
// kubelet and its unit, the agent, the holder of its mounts), until none
// is left.
func killRealNode(t *testing.T, stateDir, cluster, machine string) {
	t.Helper()
	ns, _, err := realNodeOf(stateDir, cluster, machine)
	if err != nil {
		t.Fatal(err)
	}
	killed := map[int]bool{}
	conformance.Poll(t, "every process of "+machine+"'s node killed", 30*time.Second, func() error {
		procs := realnode.Processes(ns)
		for _, pid := range procs {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed[pid] = true
		}
		if len(procs) > 0 {
			return fmt.Errorf("%d processes left in %s", len(procs), ns)
		}
		return nil
	})
	t.Logf("real node of %s (%s) killed: kill -9 of its %d processes", machine, ns, len(killed))
}

// stopRealKubelet SIGSTOPs the kubelet of a machine's node (its unit,
// capn-node kubelet, waits on it and starts nothing while it is stopped),
// so that its Node goes NotReady while the node and its agent run on;
// SIGCONT when the test ends if it is still there.
func stopRealKubelet(t *testing.T, stateDir, cluster, machine string) {
	t.Helper()
	ns, _, err := realNodeOf(stateDir, cluster, machine)
	if err != nil {
		t.Fatal(err)
	}
	isKubelet := func(pid int) bool {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		return err == nil && filepath.Base(strings.SplitN(string(b), "\x00", 2)[0]) == "kubelet"
	}
	var pids []int
	for _, pid := range realnode.Processes(ns) {
		if isKubelet(pid) {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		t.Fatalf("want one kubelet process in %s (%s), found %v", ns, machine, pids)
	}
	pid := pids[0]
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("kill -STOP %d: %v", pid, err)
	}
	t.Logf("kubelet of %s (pid %d in %s) stopped with SIGSTOP", machine, pid, ns)
	t.Cleanup(func() {
		if isKubelet(pid) {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
}

// realNodeRef finds the node index an entry of RealNodeLeftovers is
// about: a node's namespace, directory (and the processes and mounts
// under it), or a host route via its address.
var (
	realNodeRef = regexp.MustCompile(`capn-node-[0-9a-f]+-([0-9]+)\b|/realnodes/([0-9]+)(?:/|$|\s)`)
	routeVia    = regexp.MustCompile(` via ([0-9.]+)`)
)

// realLeftovers is Features.Leftovers for node mode: the cluster's
// directory and the processes run from it, what of the real nodes is
// still on the host (process.RealNodeLeftovers) — each entry about a
// node prefixed with the machine it is or was ("node of <machine>: "),
// remembered across calls since a deleted machine's record goes first —
// and any network namespace made since the test began that is no node's
// or switch's (a pod's, say; those of another test's nodes may come and
// go).
func realLeftovers(netnsBefore string) func(*testing.T, *conformance.Env, string) []string {
	var mu sync.Mutex
	was := map[string][]string{} // node index → the machines it was
	ipIndex := map[string]string{}
	return func(t *testing.T, env *conformance.Env, cluster string) []string {
		mu.Lock()
		defer mu.Unlock()
		nss, err := process.RealNodeNamespaces(env.Dir)
		if err != nil {
			t.Fatal(err)
		}
		is := map[string]string{}
		for cm, ns := range nss {
			m := strings.TrimPrefix(cm, cluster+"/")
			i := ns[strings.LastIndexByte(ns, '-')+1:]
			is[i] = m
			if !slices.Contains(was[i], m) {
				was[i] = append(was[i], m)
			}
			if im, ok := env.Machine(process.Name, cluster, m); ok {
				for _, a := range im.GetAddresses() {
					if a.GetType() == "InternalIP" {
						ipIndex[a.GetAddress()] = i
					}
				}
			}
		}
		owner := func(entry string) string {
			var i string
			if m := realNodeRef.FindStringSubmatch(entry); m != nil {
				i = m[1] + m[2]
			} else if m := routeVia.FindStringSubmatch(entry); m != nil {
				i = ipIndex[m[1]]
			}
			if i == "" {
				return ""
			}
			if m := is[i]; m != "" {
				return m
			}
			return strings.Join(was[i], ",")
		}
		out := leftovers(env.Dir, cluster)
		for _, l := range process.RealNodeLeftovers(process.Options{StateDir: env.Dir}) {
			if o := owner(l); o != "" {
				l = "node of " + o + ": " + l
			}
			out = append(out, l)
		}
		after, _ := realnode.Run(nil, nil, "ip", "netns", "list")
		for _, l := range strings.Split(after, "\n") {
			if f := strings.Fields(l); len(f) > 0 && !strings.Contains(netnsBefore, f[0]) &&
				!strings.HasPrefix(f[0], "capn-node-") && !strings.HasPrefix(f[0], "capn-lan-") {
				out = append(out, "network namespace "+f[0]+" (made since the test began)")
			}
		}
		return out
	}
}

// realNodesReady is Kubeadm.Ready for node mode, on the Ready cluster
// with web's pods serving: each node's RSS is logged; no node has a route
// out; and the provider restarts while the nodes run on (their own
// sessions): a new provider reads them back from the state dir, web's
// pods still answer the host through the provider's routes, and every
// node's agent heartbeats through the new provider's relay.
func realNodesReady(t *testing.T, e *conformance.Env, k *conformance.KubeCluster) {
	nss, err := process.RealNodeNamespaces(e.Dir)
	if err != nil || len(nss) != 3 {
		t.Fatalf("real node namespaces %v, %v", nss, err)
	}
	for _, m := range slices.Sorted(maps.Keys(nss)) {
		kib, procs := realnode.RSS(nss[m])
		t.Logf("%s (%s): RSS %.0f MiB in %d processes", m, nss[m], float64(kib)/1024, procs)
		n := &realnode.Node{NS: nss[m]}
		if err := n.CheckNoDefault(); err != nil && n.CheckDiscard() != nil {
			t.Errorf("%s: a route out: %v", m, err)
		}
	}
	out, err := k.Kubectl("get", "pods", "-n", "default", "-l", "app=web", "-o", "jsonpath={.items[*].status.podIP}")
	ips := strings.Fields(out)
	if err != nil || len(ips) == 0 {
		t.Fatalf("web's pod IPs: %q %v", out, err)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	answer := func(ip string) error {
		resp, err := hc.Get("http://" + net.JoinHostPort(ip, "8080") + "/")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "addr="+ip+"/") {
			return fmt.Errorf("pod %s answered %s:\n%s", ip, resp.Status, b)
		}
		return nil
	}
	webAnswers := func(when string) {
		conformance.Poll(t, "each of web's pods "+strings.Join(ips, ", ")+" answers the host "+when, time.Minute, func() error {
			for _, ip := range ips {
				if err := answer(ip); err != nil {
					return err
				}
			}
			return nil
		})
	}
	webAnswers("before the provider's restart")

	// The last heartbeats while no provider runs (no relay): those after
	// are the new relay's.
	restarted := time.Now()
	e.StopProvider()
	beats := map[string]string{}
	for m := range nss {
		_, id, _ := e.LastHeartbeat(k.Name, strings.TrimPrefix(m, k.Name+"/"))
		beats[m] = id
	}
	e.StartProvider()
	webAnswers("after the provider's restart")
	conformance.Poll(t, "every node's agent heartbeats through the new provider's relay", time.Minute, func() error {
		for m, before := range beats {
			if _, id, _ := e.LastHeartbeat(k.Name, strings.TrimPrefix(m, k.Name+"/")); id == before {
				return fmt.Errorf("%s: no heartbeat since %s", m, before)
			}
		}
		return nil
	})
	t.Logf("provider restarted: the %d nodes ran on, web's pods answered the host, every agent heartbeat through the new relay within %.1fs", len(nss), time.Since(restarted).Seconds())
}
