package healthwatcher_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/kubeapi"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
	"github.com/capn-dev/capn/services/bootstrapper/kubeconfig"
	"github.com/capn-dev/capn/services/bootstrapper/pki"
	"github.com/capn-dev/capn/services/bootstrapper/seal"
	healthwatcher "github.com/capn-dev/capn/services/health-watcher"
	"github.com/capn-dev/capn/services/runtime"
)

// The health-watcher against a real etcd and kube-apiserver (the binaries
// of `make kube`, in $CAPN_KUBE_BIN; skipped without them and with -short)
// and a real embedded NATS: the cluster's state is written to the buckets
// as capn's services write it (an announcement of real-kubernetes, the
// cluster and its machines with their provider ids, the sealed admin
// kubeconfig), Nodes are created in the API server with providerIDs and
// their conditions set through the status subresource. The watcher records
// each machine's Node (name, kubelet version, conditions) in its NodeHealth,
// judges KernelDeadlock=True by the policy, writes nothing while nothing
// changes, and deletes the Nodes of machines being deleted or gone (but no
// Node without a providerID).
func TestNodesOfARealAPIServer(t *testing.T) {
	bin := os.Getenv("CAPN_KUBE_BIN")
	if bin == "" {
		t.Skip("CAPN_KUBE_BIN is not set (`make kube` builds the binaries; hack/kube.sh --print-path says where)")
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Skipf("CAPN_KUBE_BIN=%s: %v", bin, err)
		}
	}
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver; skipped with -short")
	}
	ctx := context.Background()
	now := time.Now()

	// The cluster's PKI, as the bootstrapper makes it.
	caPair, err := pki.NewCA("kubernetes", now)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCA(caPair, now)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := pki.IssueLeaf(ca, pki.LeafRequest{CommonName: "kube-apiserver", IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}, now)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pki.IssueAdmin(ca, now)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := pki.NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{"ca.crt": caPair.CertPEM, "apiserver.crt": serving.CertPEM, "apiserver.key": serving.KeyPEM,
		"sa.pub": sa.PublicPEM, "sa.key": sa.PrivatePEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file := func(n string) string { return filepath.Join(dir, n) }
	etcdClient, etcdPeer, apiPort := strconv.Itoa(freePort(t)), strconv.Itoa(freePort(t)), freePort(t)
	startProc(t, dir, filepath.Join(bin, "etcd"), "--name=hw", "--data-dir="+file("etcd"),
		"--listen-client-urls=http://127.0.0.1:"+etcdClient, "--advertise-client-urls=http://127.0.0.1:"+etcdClient,
		"--listen-peer-urls=http://127.0.0.1:"+etcdPeer, "--initial-advertise-peer-urls=http://127.0.0.1:"+etcdPeer,
		"--initial-cluster=hw=http://127.0.0.1:"+etcdPeer, "--unsafe-no-fsync")
	api := startProc(t, dir, filepath.Join(bin, "kube-apiserver"), "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(apiPort),
		"--advertise-address=127.0.0.1", "--etcd-servers=http://127.0.0.1:"+etcdClient, "--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=10.96.0.0/12", "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+file("sa.pub"), "--service-account-signing-key-file="+file("sa.key"),
		"--client-ca-file="+file("ca.crt"), "--tls-cert-file="+file("apiserver.crt"), "--tls-private-key-file="+file("apiserver.key"),
		"--authorization-mode=Node,RBAC", "--cert-dir="+file("certs"))
	server := fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	kc, err := kubeapi.NewClient(server, caPair.CertPEM, admin.CertPEM, admin.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	begin := time.Now()
	waitProc(t, api, "kube-apiserver /readyz", 3*time.Minute, func() error {
		if err := kc.Ready(ctx); err != nil {
			return err
		}
		return kc.Get(ctx, "/api/v1/namespaces/kube-system", &struct{}{})
	})
	t.Logf("etcd and kube-apiserver ready in %s", time.Since(begin).Round(100*time.Millisecond))

	// NATS and capn's state, as capn's services write it.
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	bucket := func(name string) jetstream.KeyValue {
		b, err := js.KeyValue(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	desired, observed, secrets := bucket(events.BucketDesired), bucket(events.BucketObserved), bucket(events.BucketSecrets)
	key, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	const c = "hw"
	created := timestamppb.New(now.Add(-time.Minute))
	put(t, observed, "provider.process", &capnv1.ProviderAnnouncement{Name: "process", Capabilities: []string{"reboot", "real-kubernetes"}, Time: timestamppb.Now()})
	put(t, desired, "cluster."+c, &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: c, Uid: "u1", CreationTimestamp: created},
		Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.37.2", ControlPlane: &capnv1.ControlPlaneSpec{Provider: "process", Replicas: 1},
			WorkerPools: []*capnv1.WorkerPool{{Name: "md-0", Provider: "process", Replicas: 3}}}})
	put(t, observed, "cluster."+c, &capnv1.ClusterStatus{ControlPlaneInitialized: true})
	machine := func(name, pool string) {
		t.Helper()
		role := "worker"
		if pool == policy.ControlPlanePool {
			role = "control-plane"
		}
		put(t, desired, "machine."+c+"."+name, &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: name, Uid: "u-" + name, CreationTimestamp: created},
			Spec: &capnv1.MachineSpec{Cluster: c, Pool: pool, Role: role, Provider: "process", Version: "v1.37.2"}})
		put(t, observed, "machine."+c+"."+name, &capnv1.MachineStatus{Phase: "Running", ProviderId: "process://" + c + "/" + name, Provider: "process",
			PhaseSince: created, InfrastructureReadyTime: created})
	}
	for _, m := range []struct{ name, pool string }{{"cp-0", policy.ControlPlanePool}, {"w-0", "md-0"}, {"w-1", "md-0"}, {"w-2", "md-0"}} {
		machine(m.name, m.pool)
	}
	config, err := kubeconfig.Render(kubeconfig.Input{ClusterName: c, Host: "127.0.0.1", Port: int32(apiPort),
		CACertPEM: caPair.CertPEM, ClientCertPEM: admin.CertPEM, ClientKeyPEM: admin.KeyPEM})
	if err != nil {
		t.Fatal(err)
	}
	put(t, secrets, "kubeconfig."+c, &capnv1.AdminKubeconfig{Kubeconfig: config, Server: server}, store.WithSealer(ring))

	// Nodes: one per machine with its providerID, one whose machine never
	// was (an orphan of the cluster's provider), one without a providerID.
	for name, id := range map[string]string{"cp-0": "process://hw/cp-0", "w-0": "process://hw/w-0", "w-1": "process://hw/w-1",
		"w-2": "process://hw/w-2", "orphan": "process://hw/orphan", "byo": ""} {
		body := map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": name}}
		if id != "" {
			body["spec"] = map[string]any{"providerID": id}
		}
		if _, err := kc.Create(ctx, kubeapi.Object{Collection: "/api/v1/nodes", Name: name, Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	setStatus := func(node string, conds ...[3]string) {
		t.Helper()
		ts := time.Now().UTC().Format(time.RFC3339)
		var list []map[string]any
		for _, cd := range conds {
			list = append(list, map[string]any{"type": cd[0], "status": cd[1], "reason": cd[2], "message": cd[2],
				"lastHeartbeatTime": ts, "lastTransitionTime": ts})
		}
		if err := kc.MergePatch(ctx, "/api/v1/nodes/"+node+"/status", map[string]any{"status": map[string]any{
			"conditions": list, "nodeInfo": map[string]any{"kubeletVersion": "v1.37.2"}}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"cp-0", "w-0", "w-1", "w-2"} {
		setStatus(n, [3]string{"Ready", "True", "KubeletReady"}, [3]string{"KernelDeadlock", "False", "KernelHasNoDeadlock"},
			[3]string{"MemoryPressure", "False", "KubeletHasSufficientMemory"})
	}

	// The health-watcher, through runtime.Run as a deployment runs it.
	svc := healthwatcher.New(healthwatcher.Config{Keyring: ring, NodePollEvery: 300 * time.Millisecond, NodeDeleteGrace: 2 * time.Second,
		Policy: policy.Defaults{UnhealthyConditions: []policy.Condition{
			{Type: "Ready", Status: "False", Timeout: 5 * time.Minute}, {Type: "KernelDeadlock", Status: "True"},
		}}})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- runtime.Run(runCtx, runtime.Config{Name: healthwatcher.Name, NATS: runtime.NATSConfig{URL: srv.URL()}}, svc, runtime.WithoutHTTP())
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("health-watcher: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("health-watcher did not stop")
		}
	})
	nodes := store.NewBucket(observed, func() *capnv1.NodeHealth { return new(capnv1.NodeHealth) })
	record := func(m string) (*capnv1.NodeHealth, uint64) {
		h, rev, err := nodes.Get(ctx, healthwatcher.NodeKey(c, m))
		if err != nil {
			return nil, 0
		}
		return h, rev
	}
	condition := func(h *capnv1.NodeHealth, typ string) string {
		for _, x := range h.GetConditions() {
			if x.GetType() == typ {
				return x.GetStatus()
			}
		}
		return ""
	}
	begin = time.Now()
	natstest.WaitFor(t, 20*time.Second, "every machine's Node in its record", func() bool {
		for _, m := range []string{"cp-0", "w-0", "w-1", "w-2"} {
			h, _ := record(m)
			if h.GetNodeName() != m || h.GetKubeletVersion() != "v1.37.2" || condition(h, "Ready") != "True" ||
				condition(h, "KernelDeadlock") != "False" || condition(h, "MemoryPressure") != "False" {
				return false
			}
		}
		return true
	})
	t.Logf("Nodes recorded %s after the watcher started", time.Since(begin).Round(10*time.Millisecond))

	// Steady: no write while the Nodes do not change (polls every 300ms).
	_, rev := record("w-0")
	time.Sleep(2 * time.Second)
	if _, rev2 := record("w-0"); rev2 != rev {
		t.Errorf("w-0's record rewritten (revision %d → %d) while its Node did not change", rev, rev2)
	}

	// NPD's exporter sets KernelDeadlock=True on w-0's Node: the watcher
	// records it and the policy finds the machine unhealthy.
	set := time.Now()
	setStatus("w-0", [3]string{"Ready", "True", "KubeletReady"}, [3]string{"KernelDeadlock", "True", "DockerHung"},
		[3]string{"MemoryPressure", "False", "KubeletHasSufficientMemory"})
	natstest.WaitFor(t, 10*time.Second, "w-0 unhealthy for KernelDeadlock", func() bool {
		h, _ := record("w-0")
		return condition(h, "KernelDeadlock") == "True" && !h.GetHealthy() &&
			slices.ContainsFunc(h.GetUnhealthyReasons(), func(r *capnv1.Condition) bool { return r.GetType() == "KernelDeadlock" })
	})
	t.Logf("KernelDeadlock=True on the Node → NodeHealth unhealthy in %s", time.Since(set).Round(10*time.Millisecond))

	// The orphan (old enough by now) goes; the Node without a providerID stays.
	exists := func(name string) bool {
		err := kc.Get(ctx, "/api/v1/nodes/"+name, &struct{}{})
		if err != nil && !kubeapi.IsStatus(err, http.StatusNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	natstest.WaitFor(t, 10*time.Second, "the orphan Node deleted", func() bool { return !exists("orphan") })

	// w-1's machine record is gone (desired and observed); w-2's is being
	// deleted: their Nodes go within a poll.
	for _, b := range []jetstream.KeyValue{desired, observed} {
		if err := b.Delete(ctx, "machine."+c+".w-1"); err != nil {
			t.Fatal(err)
		}
	}
	mb := store.NewBucket(desired, func() *capnv1.Machine { return new(capnv1.Machine) })
	if _, _, err := mb.Mutate(ctx, "machine."+c+".w-2", func(m *capnv1.Machine, _ bool) (*capnv1.Machine, error) {
		m.Metadata.DeletionTimestamp = timestamppb.Now()
		return m, nil
	}); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	natstest.WaitFor(t, 10*time.Second, "the Nodes of w-1 (gone) and w-2 (deleting) deleted", func() bool { return !exists("w-1") && !exists("w-2") })
	t.Logf("Nodes of a gone and a deleting machine deleted %s after the change", time.Since(gone).Round(10*time.Millisecond))
	for _, n := range []string{"cp-0", "w-0", "byo"} {
		if !exists(n) {
			t.Errorf("Node %s deleted", n)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type proc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
	err       error
}

// startProc runs path in its own process group, killed with the test (and
// by the kernel if the test binary dies first); its output goes to a log.
func startProc(t *testing.T, dir, path string, args ...string) *proc {
	t.Helper()
	p := &proc{name: filepath.Base(path), log: filepath.Join(dir, filepath.Base(path)+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(path, args...)
	p.cmd.Stdout, p.cmd.Stderr, p.cmd.Dir = f, f, dir
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", p.name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

func waitProc(t *testing.T, p *proc, what string, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		last := check()
		if last == nil {
			return
		}
		select {
		case <-p.done:
			log, _ := os.ReadFile(p.log)
			t.Fatalf("%s: %s exited (%v); last check: %v\n%s", what, p.name, p.err, last, tail(string(log)))
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(p.log)
			t.Fatalf("%s: not within %s; last check: %v\n%s", what, timeout, last, tail(string(log)))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}
