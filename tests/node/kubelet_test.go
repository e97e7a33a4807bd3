//go:build linux

package node

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capn-dev/capn/internal/testkit"
)

// TestRealNodeKubeletStaticPod runs kubelet v1.37 standalone (no API
// server) in a real node's namespace against its containerd's CRI, on this
// cgroup v1 host (failCgroupV1: false), with a static pod of the web image;
// the pod's container must answer over HTTP from the host.
func TestRealNodeKubeletStaticPod(t *testing.T) {
	s := needStack(t)
	kubelet := filepath.Join(s.kubeBin, "kubelet")
	if _, err := os.Stat(kubelet); s.kubeBin == "" || err != nil {
		skip := t.Skipf
		if os.Getenv("CAPN_REQUIRE_NODESTACK") == "1" {
			skip = t.Fatalf
		}
		skip("no kubelet in CAPN_NODESTACK_BIN's second directory %q (make nodestack)", s.kubeBin)
	}
	start := time.Now()
	n := newNode(t)
	// Before containerd's CRI starts its CNI config watcher.
	raiseInotifyInstances(t, 1024)
	before := run(t, nil, nil, "ip", "netns", "list")
	// The CRI puts containers without a cgroup parent (cgroupsPerQOS is
	// off) in /k8s.io/<id>: remove /k8s.io when the test made it.
	if _, err := os.Stat("/sys/fs/cgroup/memory/k8s.io"); os.IsNotExist(err) {
		t.Cleanup(func() { removeCgroup(t, "/k8s.io/x") })
	}

	const (
		webRef   = "capn.local/test/web:v1"
		pauseRef = "capn.local/test/pause:v1"
	)
	cniConf := filepath.Join(n.dir, "cni-conf")
	ipam := filepath.Join(n.dir, "cni-ipam")
	if err := os.MkdirAll(cniConf, 0o700); err != nil {
		t.Fatal(err)
	}
	conflist := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"capn-pods","plugins":[
{"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,"hairpinMode":true,
 "ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":%q}}]}`, n.podCIDR, ipam)
	if err := os.WriteFile(filepath.Join(cniConf, "10-capn.conflist"), []byte(conflist), 0o600); err != nil {
		t.Fatal(err)
	}
	// The kubelet writes some paths whatever its --root-dir says
	// (/var/lib/kubelet/device-plugins, /var/lib/kubelet/pki): they go to
	// the node's own mounts.
	n.isolateMounts(t, filepath.Join(n.dir, "containerd", "containerd.sock"), n.ns)
	c := startContainerd(t, n, s, &criConfig{pauseImage: pauseRef, cniConfDir: cniConf})
	c.ns = "k8s.io" // the CRI's namespace
	c.ctr(t, "images", "import", "--snapshotter", "overlayfs", buildImage(t, n.dir, webRef, "/web"))
	c.ctr(t, "images", "import", "--snapshotter", "overlayfs", buildImage(t, n.dir, pauseRef, "/web", "pause"))

	token := "kubelet-" + n.id
	manifests := filepath.Join(n.dir, "manifests")
	if err := os.MkdirAll(manifests, 0o700); err != nil {
		t.Fatal(err)
	}
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
spec:
  containers:
  - name: web
    image: %s
    imagePullPolicy: Never
    env:
    - name: CAPN_WEB_TOKEN
      value: %q
`, webRef, token)
	manifest := filepath.Join(manifests, "web.yaml")
	if err := os.WriteFile(manifest, []byte(pod), 0o600); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This host has cgroup v1: v1.37 refuses it unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
# No kubepods hierarchy in the host's cgroups: containerd's CRI places the
# containers, and they go with them.
cgroupsPerQOS: false
enforceNodeAllocatable: []
staticPodPath: %q
podLogsDir: %q
containerRuntimeEndpoint: unix://%s
address: %s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
failSwapOn: false
localStorageCapacityIsolation: false
resolvConf: ""
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
`, manifests, filepath.Join(n.dir, "pod-logs"), c.sock, n.nodeIP)
	cfg := filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	restoreKernelTunables(t)
	log := &testkit.Buffer{}
	cmd := exec.Command("nsenter", n.inNode(kubelet, "--config", cfg,
		"--root-dir", filepath.Join(n.dir, "kubelet"), "--hostname-override", n.ns, "--node-ip", n.nodeIP, "-v", "2")...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		// The kubelet stops its pod (CNI DEL, the sandbox's namespace
		// removed) when the manifest goes; then it stops itself.
		if err := os.Remove(manifest); err == nil {
			if testkit.Poll(60*time.Second, 200*time.Millisecond, func() error {
				out, _ := c.try(nil, "tasks", "ls")
				if strings.Contains(out, "RUNNING") {
					return fmt.Errorf("still running:\n%s", out)
				}
				return nil
			}) != nil {
				t.Logf("the kubelet did not stop the static pod within 60s")
			}
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		// Whatever is left: tasks, containers, the sandboxes' namespaces.
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
			if len(f) > 0 && strings.HasPrefix(f[0], "cni-") && !strings.Contains(before, f[0]) {
				cleanup(t, "ip", "netns", "del", f[0])
			}
		}
		if t.Failed() {
			t.Logf("kubelet log:\n%s", tail(log.String(), 80))
		}
	})

	// The pod's address is the one host-local gave out on the node's pod
	// network (its file name in the IPAM directory).
	var podIP string
	testkit.WaitFor(t, 5*time.Minute, "the kubelet runs the static pod's container", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("kubelet exited: %v\n%s", err, tail(log.String(), 60))
		default:
		}
		out, _ := c.try(nil, "tasks", "ls")
		if strings.Count(out, "RUNNING") < 2 { // the sandbox and web
			return false
		}
		entries, _ := os.ReadDir(filepath.Join(ipam, "capn-pods"))
		for _, e := range entries {
			if ip := net.ParseIP(e.Name()); ip != nil && ip.To4() != nil {
				podIP = ip.String()
			}
		}
		return podIP != ""
	})
	t.Logf("kubelet runs the static pod after %s (pod %s)", time.Since(start).Round(time.Millisecond), podIP)

	url := "http://" + net.JoinHostPort(podIP, "8080") + "/"
	var body string
	client := &http.Client{Timeout: 2 * time.Second}
	testkit.WaitFor(t, 60*time.Second, "GET "+url+" answers from the static pod", func() bool {
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	})
	if !strings.Contains(body, "token="+token+"\n") {
		t.Fatalf("answer is not from the static pod's container (no token %s):\n%s", token, body)
	}
	t.Logf("static pod answered after %s:\n%s", time.Since(start).Round(time.Millisecond), body)
}

// restoreKernelTunables puts back, when the test ends, the host-wide
// sysctls a kubelet sets at start (setupKernelTunables: it sets them unless
// protectKernelDefaults, which makes it refuse to start instead). They are
// not per network namespace, so the test's kubelet changes them on the host
// for as long as it runs.
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
					t.Errorf("restoring %s to %s: %v", f, strings.TrimSpace(string(old)), err)
				}
			}
		})
	}
}
