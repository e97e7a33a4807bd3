//go:build linux

package process_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
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

// TestRealNodesThroughCapn is issue 26's provider proof: capn's core
// services and CLI, `capn apply` of a kubeadm cluster of 1 control plane
// and 2 workers on the process provider in node mode — each machine a
// real node whose capn-node agent fetches its bootstrap data and runs
// kubeadm init or join — until 3 Nodes are Ready; a Deployment of the
// project's web server whose pods really run (Running with pod IPs, the
// container answers from the host through the provider's routes, and
// through its Service's DNS name from a pod); then `capn delete --wait`
// and nothing of the nodes is left on the host.
func TestRealNodesThroughCapn(t *testing.T) {
	needRealNodes(t)
	// The web image FROM scratch (capn-node image), beside kubeadm's.
	work := t.TempDir()
	const webRef = "capn.local/test/web:v1"
	web := filepath.Join(work, "web")
	build := exec.Command("go", "build", "-trimpath", "-o", web, "../../tests/node/testdata/web")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build web: %v\n%s", err, out)
	}
	if out, err := exec.Command(nodeBinary, "image", "--ref", webRef, "--out", filepath.Join(work, "web.tar"), "--file", "web="+web, "--entrypoint", "/web").CombinedOutput(); err != nil {
		t.Fatalf("capn-node image: %v\n%s", err, out)
	}
	w := newRealWorld(t, []realnode.Image{{Ref: webRef, Archive: filepath.Join(work, "web.tar")}}, realManifest, 3)
	env, opts, k, name, applied := w.env, w.opts, w.k, w.name, w.applied

	// A Deployment of web: 3 pods, really running.
	token := "real-" + name
	dep := filepath.Join(k.Capn.Home, "web.yaml")
	k.Write(dep, fmt.Sprintf(webManifest, webRef, token))
	conformance.Poll(t, "kubectl apply web", 2*time.Minute, func() error {
		_, err := k.Kubectl("apply", "-f", dep)
		return err
	})
	var podIPs []string
	conformance.Poll(t, "web's 3 pods Running and Ready with pod IPs", 5*time.Minute, func() error {
		out, err := k.Kubectl("get", "pods", "-l", "app=web", "-o", `jsonpath={range .items[*]}{.status.phase} {.status.podIP} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		if err != nil {
			return err
		}
		podIPs = nil
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			if len(f) == 3 && f[0] == "Running" && f[2] == "True" && net.ParseIP(f[1]) != nil {
				podIPs = append(podIPs, f[1])
			}
		}
		if len(podIPs) != 3 {
			return fmt.Errorf("pods:\n%s", out)
		}
		return nil
	})
	out, _ := k.Kubectl("get", "pods", "-A", "-o", "wide")
	t.Logf("kubectl get pods -A -o wide (%s after apply):\n%s", time.Since(applied).Round(time.Millisecond), out)
	hc := &http.Client{Timeout: 5 * time.Second}
	get := func(u string) (string, error) {
		resp, err := hc.Get(u)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return string(b), fmt.Errorf("%s: %s", u, resp.Status)
		}
		return string(b), nil
	}
	for _, ip := range podIPs {
		var body string
		conformance.Poll(t, "GET http://"+ip+":8080/ from the host", time.Minute, func() (err error) {
			body, err = get("http://" + net.JoinHostPort(ip, "8080") + "/")
			return err
		})
		if !strings.Contains(body, "token="+token+"\n") || !strings.Contains(body, "addr="+ip+"/24\n") {
			t.Fatalf("pod %s did not answer as the Deployment's container:\n%s", ip, body)
		}
	}
	t.Logf("each of web's pods %v answered the host from its container", podIPs)
	// Through the Service's DNS name, from a pod: CoreDNS and kube-proxy.
	var body string
	conformance.Poll(t, "a pod fetches http://web.default.svc.cluster.local/", 3*time.Minute, func() (err error) {
		body, err = get("http://" + net.JoinHostPort(podIPs[0], "8080") + "/?fetch=" + "http://web.default.svc.cluster.local/")
		if err == nil && !strings.Contains(body, "fetched token="+token+"\n") {
			err = fmt.Errorf("not the Deployment's answer:\n%s", body)
		}
		return err
	})
	t.Logf("pod %s reached Service web by its DNS name:\n%s", podIPs[0], body)

	nss, err := process.RealNodeNamespaces(opts.StateDir)
	if err != nil || len(nss) != 3 {
		t.Fatalf("real node namespaces %v, %v", nss, err)
	}
	for m, ns := range nss {
		kib, procs := realnode.RSS(ns)
		t.Logf("%s (%s): RSS %.0f MiB in %d processes", m, ns, float64(kib)/1024, procs)
		n := &realnode.Node{NS: ns}
		if err := n.CheckNoDefault(); err != nil && n.CheckDiscard() != nil {
			t.Errorf("%s: a route out: %v", m, err)
		}
	}

	// A provider restart: the nodes run on (their own sessions), a new
	// provider reads them back from the state dir, its relay takes the
	// agents' connections again, and it is the one that deletes them.
	w.stop()
	w.stop = env.Run(process.NewService(opts, conformance.SDKOptions()))
	w.announced()
	conformance.Poll(t, "web answers the host after the provider's restart", time.Minute, func() (err error) {
		body, err = get("http://" + net.JoinHostPort(podIPs[1], "8080") + "/")
		if err == nil && !strings.Contains(body, "token="+token+"\n") {
			err = fmt.Errorf("not the Deployment's answer:\n%s", body)
		}
		return err
	})
	beats := map[string]string{}
	for m := range nss {
		_, id, _ := env.LastHeartbeat(name, strings.TrimPrefix(m, name+"/"))
		beats[m] = id
	}
	conformance.Poll(t, "every node's agent heartbeats through the new provider's relay", time.Minute, func() error {
		for m, before := range beats {
			if _, id, _ := env.LastHeartbeat(name, strings.TrimPrefix(m, name+"/")); id == before {
				return fmt.Errorf("%s: no heartbeat since %s", m, before)
			}
		}
		return nil
	})
	t.Logf("provider restarted: the nodes ran on, their agents heartbeat again")

	w.deleteAndCheck()
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

// webManifest is the Deployment of web (3 pods, any node: the control
// plane's taint tolerated) and its Service.
const webManifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      automountServiceAccountToken: false
      tolerations:
      - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
      containers:
      - name: web
        image: %s
        imagePullPolicy: Never
        env:
        - {name: CAPN_WEB_TOKEN, value: %q}
        ports:
        - containerPort: 8080
        readinessProbe:
          httpGet: {path: /, port: 8080}
          periodSeconds: 2
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080, protocol: TCP}
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
