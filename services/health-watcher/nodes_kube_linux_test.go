package healthwatcher_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/kubeapi/kubeapitest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/kubeconfig"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/services/health-watcher"
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
	ctx := context.Background()
	now := time.Now()

	// The cluster's PKI, as the bootstrapper makes it, and its API server.
	caPair, err := pki.NewCA("kubernetes", now)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := pki.NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	api := kubeapitest.Start(t, caPair, sa.PublicPEM, sa.PrivatePEM)
	server, kc, admin := api.URL, api.Admin, api.AdminPair

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
	config, err := kubeconfig.Render(kubeconfig.Input{ClusterName: c, Host: "127.0.0.1", Port: int32(api.Port),
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

	// The health-watcher, through daemon.Run as a deployment runs it.
	svc := healthwatcher.New(healthwatcher.Config{Keyring: ring, NodePollEvery: 300 * time.Millisecond, NodeDeleteGrace: 2 * time.Second,
		Policy: policy.Defaults{UnhealthyConditions: []policy.Condition{
			{Type: "Ready", Status: "False", Timeout: 5 * time.Minute}, {Type: "KernelDeadlock", Status: "True"},
		}}})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(runCtx, daemon.Config{Name: healthwatcher.Name, NATS: daemon.NATSConfig{URL: srv.URL()}}, svc, daemon.WithoutHTTP())
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
	nodes := store.NewBucket(observed, store.New[capnv1.NodeHealth]())
	record := func(m string) (*capnv1.NodeHealth, uint64) {
		h, rev, err := nodes.Get(ctx, keys.Node(c, m))
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
	begin := time.Now()
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

	// Steady: no write while a Node does not change. Each poll (every
	// 300ms) lists every Node of the cluster, so two polls that record a
	// change of w-1's Node have seen w-0's unchanged.
	_, rev := record("w-0")
	for _, pressure := range []string{"True", "False"} {
		setStatus("w-1", [3]string{"Ready", "True", "KubeletReady"}, [3]string{"KernelDeadlock", "False", "KernelHasNoDeadlock"},
			[3]string{"MemoryPressure", pressure, "KubeletHasSufficientMemory"})
		natstest.WaitFor(t, 10*time.Second, "w-1's MemoryPressure="+pressure+" recorded", func() bool {
			h, _ := record("w-1")
			return condition(h, "MemoryPressure") == pressure
		})
	}
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
	// deleted and the machine-manager's deletion got past the drain: their
	// Nodes go within a poll.
	for _, b := range []jetstream.KeyValue{desired, observed} {
		if err := b.Delete(ctx, "machine."+c+".w-1"); err != nil {
			t.Fatal(err)
		}
	}
	mb := store.NewBucket(desired, store.New[capnv1.Machine]())
	if _, _, err := mb.Mutate(ctx, "machine."+c+".w-2", func(m *capnv1.Machine, _ bool) (*capnv1.Machine, error) {
		m.Metadata.DeletionTimestamp = timestamppb.Now()
		return m, nil
	}); err != nil {
		t.Fatal(err)
	}
	put(t, observed, "machine."+c+".w-2", &capnv1.MachineStatus{Phase: "Deleting", ProviderId: "process://" + c + "/w-2", Provider: "process",
		PhaseSince: created, Conditions: []*capnv1.Condition{{Type: "Deleting", Status: "True", Reason: "WaitingForNodeDeletion"},
			{Type: "DrainingSucceeded", Status: "True", Reason: "Drained"}}})
	gone := time.Now()
	natstest.WaitFor(t, 10*time.Second, "the Nodes of w-1 (gone) and w-2 (deleting) deleted", func() bool { return !exists("w-1") && !exists("w-2") })
	t.Logf("Nodes of a gone and a deleting machine deleted %s after the change", time.Since(gone).Round(10*time.Millisecond))
	for _, n := range []string{"cp-0", "w-0", "byo"} {
		if !exists(n) {
			t.Errorf("Node %s deleted", n)
		}
	}
}
