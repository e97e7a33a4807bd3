package healthwatcher_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/kubeapi/kubeapitest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/kubeconfig"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/services/health-watcher"
)

// The drain of a deleting machine's Node, end to end on the health-watcher's
// side: a real kube-apiserver with kube-controller-manager's disruption
// controller, real NATS, the machine-manager's part played by writing the
// machine status it writes. Machine w-1 is deleting and its drain started
// (DrainingSucceeded False, Draining): the watcher cordons its Node and
// evicts its pods — the DaemonSet's and the mirror pod stay, web-a waits
// for its PodDisruptionBudget, which the record names — and, the budget
// relaxed and the evicted pods gone (the test finishes them as a kubelet
// would), records the Node Drained. The Node is deleted only once the
// machine status says the drain is over.
func TestDrainOfARealNode(t *testing.T) {
	kubeapitest.Require(t)
	ctx := context.Background()
	now := time.Now()
	caPair, err := pki.NewCA("kubernetes", now)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := pki.NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	api := kubeapitest.Start(t, caPair, sa.PublicPEM, sa.PrivatePEM)
	api.StartControllerManager(t, "disruption")
	kc := api.Admin
	apply := func(collection, name string, body map[string]any) {
		t.Helper()
		if err := kc.Apply(ctx, kubeapi.Object{Collection: collection, Name: name, Body: body}); err != nil {
			t.Fatal(err)
		}
	}

	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	desired, _ := js.KeyValue(ctx, events.BucketDesired)
	observed, _ := js.KeyValue(ctx, events.BucketObserved)
	secrets, _ := js.KeyValue(ctx, events.BucketSecrets)
	key, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	const c = "dr"
	created := timestamppb.New(now.Add(-time.Minute))
	put(t, observed, "provider.process", &capnv1.ProviderAnnouncement{Name: "process", Capabilities: []string{"real-kubernetes"}, Time: timestamppb.Now()})
	put(t, desired, "cluster."+c, &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: c, Uid: "u1", CreationTimestamp: created},
		Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.37.2", ControlPlane: &capnv1.ControlPlaneSpec{Provider: "process", Replicas: 1},
			WorkerPools: []*capnv1.WorkerPool{{Name: "md-0", Provider: "process", Replicas: 2}}}})
	put(t, observed, "cluster."+c, &capnv1.ClusterStatus{ControlPlaneInitialized: true})
	for _, name := range []string{"w-0", "w-1"} {
		put(t, desired, "machine."+c+"."+name, &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: name, Uid: "u-" + name, CreationTimestamp: created},
			Spec: &capnv1.MachineSpec{Cluster: c, Pool: "md-0", Role: "worker", Provider: "process", Version: "v1.37.2"}})
		put(t, observed, "machine."+c+"."+name, &capnv1.MachineStatus{Phase: "Running", ProviderId: "process://" + c + "/" + name, Provider: "process",
			PhaseSince: created, InfrastructureReadyTime: created})
	}
	config, err := kubeconfig.Render(kubeconfig.Input{ClusterName: c, Host: "127.0.0.1", Port: int32(api.Port),
		CACertPEM: caPair.CertPEM, ClientCertPEM: api.AdminPair.CertPEM, ClientKeyPEM: api.AdminPair.KeyPEM})
	if err != nil {
		t.Fatal(err)
	}
	put(t, secrets, "kubeconfig."+c, &capnv1.AdminKubeconfig{Kubeconfig: config, Server: api.URL}, store.WithSealer(ring))

	// Two Ready Nodes; on w-1 two web pods under a budget that allows no
	// disruption, a lone pod, a DaemonSet's pod and a mirror pod.
	ts := time.Now().UTC().Format(time.RFC3339)
	for _, n := range []string{"w-0", "w-1"} {
		apply("/api/v1/nodes", n, map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": n},
			"spec": map[string]any{"providerID": "process://" + c + "/" + n}})
		if err := kc.MergePatch(ctx, "/api/v1/nodes/"+n+"/status", map[string]any{"status": map[string]any{
			"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": ts, "lastTransitionTime": ts}}}}); err != nil {
			t.Fatal(err)
		}
	}
	apply("/api/v1/namespaces/default/serviceaccounts", "default", map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "default"}})
	pod := func(name string, labels map[string]string, meta map[string]any) {
		t.Helper()
		m := map[string]any{"name": name, "labels": labels}
		for k, v := range meta {
			m[k] = v
		}
		apply("/api/v1/namespaces/default/pods", name, map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": m,
			"spec": map[string]any{"nodeName": "w-1", "automountServiceAccountToken": false,
				"containers": []any{map[string]any{"name": "c", "image": "registry.k8s.io/pause:3.10"}}}})
		if err := kc.MergePatch(ctx, "/api/v1/namespaces/default/pods/"+name+"/status", map[string]any{"status": map[string]any{
			"phase": "Running", "conditions": []any{map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": ts}}}}); err != nil {
			t.Fatal(err)
		}
	}
	web := map[string]string{"app": "web"}
	pod("web-a", web, nil)
	pod("web-b", web, nil)
	pod("solo", nil, nil)
	pod("ds-a", nil, map[string]any{"ownerReferences": []any{map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
		"uid": "7d5c3b1e-0000-4000-8000-000000000001", "controller": true}}})
	pod("kube-proxy-w-1", nil, map[string]any{"annotations": map[string]any{kubeapi.MirrorPodAnnotation: "abc"}})
	budget := func(minAvailable int) {
		apply("/apis/policy/v1/namespaces/default/poddisruptionbudgets", "web-pdb", map[string]any{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
			"metadata": map[string]any{"name": "web-pdb", "namespace": "default"},
			"spec":     map[string]any{"minAvailable": minAvailable, "selector": map[string]any{"matchLabels": map[string]any{"app": "web"}}}})
	}
	budget(2)

	svc := healthwatcher.New(healthwatcher.Config{Keyring: ring, NodePollEvery: 300 * time.Millisecond, NodeDeleteGrace: time.Second})
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
	record := func(m string) *capnv1.NodeHealth {
		h, _, err := nodes.Get(ctx, keys.Node(c, m))
		if err != nil {
			return nil
		}
		return h
	}
	natstest.WaitFor(t, 30*time.Second, "w-1's Node uid recorded", func() bool { return record("w-1").GetNodeUid() != "" })
	// The disruption controller has counted the web pods.
	natstest.WaitFor(t, 30*time.Second, "web-pdb computed", func() bool {
		pdbs, err := kc.ListPDBs(ctx, "default")
		return err == nil && len(pdbs) == 1 && pdbs[0].DisruptionsAllowed == 0
	})

	// The machine-manager deletes w-1: its pre-drain hooks passed, the drain starts.
	mb := store.NewBucket(desired, store.New[capnv1.Machine]())
	if _, _, err := mb.Mutate(ctx, "machine."+c+".w-1", func(m *capnv1.Machine, _ bool) (*capnv1.Machine, error) {
		m.Metadata.DeletionTimestamp = timestamppb.Now()
		return m, nil
	}); err != nil {
		t.Fatal(err)
	}
	status := func(deleting string, drain ...string) {
		st := &capnv1.MachineStatus{Phase: "Deleting", ProviderId: "process://" + c + "/w-1", Provider: "process", PhaseSince: created,
			Conditions: []*capnv1.Condition{{Type: "Deleting", Status: "True", Reason: deleting}}}
		st.Conditions = append(st.Conditions, &capnv1.Condition{Type: "DrainingSucceeded", Status: drain[0], Reason: drain[1]})
		put(t, observed, "machine."+c+".w-1", st)
	}
	start := time.Now()
	status("DrainingNode", "False", "Draining")
	natstest.WaitFor(t, 20*time.Second, "w-1 draining, blocked by web-pdb", func() bool {
		d := record("w-1").GetDrain()
		return d.GetState() == capnv1.NodeDrainEvicting && len(d.GetBlockingPods()) == 2 && d.GetPodsRemaining() == 3
	})
	d := record("w-1").GetDrain()
	t.Logf("drain after %s: %s, %d left: %s (blocking %v)", time.Since(start).Round(10*time.Millisecond), d.GetState(), d.GetPodsRemaining(), d.GetMessage(), d.GetBlockingPods())
	if want := "2 pods blocked by PodDisruptionBudget web-pdb (default/web-a, default/web-b); 1 pod terminating"; d.GetMessage() != want {
		t.Errorf("drain message %q, want %q", d.GetMessage(), want)
	}
	var node struct{ Spec struct{ Unschedulable bool } }
	if err := kc.Get(ctx, "/api/v1/nodes/w-1", &node); err != nil || !node.Spec.Unschedulable {
		t.Errorf("w-1 not cordoned: %v %v", node.Spec.Unschedulable, err)
	}
	podsOn := func() map[string]kubeapi.Pod {
		ps, err := kc.ListPodsOnNode(ctx, "w-1")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]kubeapi.Pod{}
		for _, p := range ps {
			out[p.Name] = p
		}
		return out
	}
	ps := podsOn()
	if !ps["solo"].Terminating || ps["web-a"].Terminating || ps["web-b"].Terminating || ps["ds-a"].Terminating || ps["kube-proxy-w-1"].Terminating {
		t.Errorf("after the first passes: %+v; want only solo evicted", ps)
	}

	// The kubelet's part: evicted pods go. The budget relaxed to 0: the
	// web pods evict too, and once gone the Node is Drained.
	finish := func() {
		for name, p := range podsOn() {
			if p.Terminating {
				if err := kc.Do(ctx, http.MethodDelete, "/api/v1/namespaces/default/pods/"+name, "application/json",
					map[string]any{"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}, nil); err != nil && !kubeapi.IsStatus(err, http.StatusNotFound) {
					t.Fatal(err)
				}
			}
		}
	}
	budget(0)
	natstest.WaitFor(t, 30*time.Second, "w-1 drained", func() bool {
		finish()
		return record("w-1").GetDrain().GetState() == capnv1.NodeDrainDrained
	})
	t.Logf("drained %s after the drain started", time.Since(start).Round(10*time.Millisecond))
	ps = podsOn()
	if _, ok := ps["ds-a"]; !ok || len(ps) != 2 {
		t.Errorf("pods left on w-1: %v; want the DaemonSet's and the mirror pod", ps)
	}
	exists := func(name string) bool {
		err := kc.Get(ctx, "/api/v1/nodes/"+name, &struct{}{})
		if err != nil && !kubeapi.IsStatus(err, http.StatusNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	// Drained, but the machine status does not say so yet: the Node stays
	// (several polls).
	deadline := time.Now().Add(time.Second)
	natstest.WaitFor(t, 5*time.Second, "a second with the Node kept", func() bool {
		if !exists("w-1") {
			t.Fatal("w-1's Node deleted before the machine status said the drain was over")
		}
		return time.Now().After(deadline)
	})
	status("WaitingForNodeDeletion", "True", "Drained")
	natstest.WaitFor(t, 10*time.Second, "w-1's Node deleted and recorded", func() bool { return !exists("w-1") && record("w-1").GetNodeDeleted() })
	if !exists("w-0") {
		t.Error("w-0's Node deleted")
	}

	// Deleted before any read matched its Node (a scale-down in the
	// seconds after a new machine's Node registered): w-2's deletion and
	// its Node arrive together. The watcher records the Node as w-2's
	// while the machine-manager looks for it (WaitingForNodeRef), and
	// keeps it; w-3, deleted with no Node, is answered "none".
	for _, name := range []string{"w-2", "w-3"} {
		put(t, desired, "machine."+c+"."+name, &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: name, Uid: "u-" + name, CreationTimestamp: timestamppb.Now(), DeletionTimestamp: timestamppb.Now()},
			Spec: &capnv1.MachineSpec{Cluster: c, Pool: "md-0", Role: "worker", Provider: "process", Version: "v1.37.2"}})
	}
	apply("/api/v1/nodes", "w-2", map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": "w-2"},
		"spec": map[string]any{"providerID": "process://" + c + "/w-2"}})
	for _, name := range []string{"w-2", "w-3"} {
		put(t, observed, "machine."+c+"."+name, &capnv1.MachineStatus{Phase: "Deleting", ProviderId: "process://" + c + "/" + name, Provider: "process",
			PhaseSince: timestamppb.Now(), InfrastructureReadyTime: timestamppb.Now(),
			Conditions: []*capnv1.Condition{{Type: "Deleting", Status: "True", Reason: "WaitingForNodeRef"}}})
	}
	natstest.WaitFor(t, 10*time.Second, "w-2's Node recorded, w-3 answered none", func() bool {
		w2, w3 := record("w-2"), record("w-3")
		return w2.GetNodeUid() != "" && w2.GetNodeName() == "w-2" && w3.GetNodeDeleted() && w3.GetNodeUid() == ""
	})
	if w2 := record("w-2"); !w2.GetNodeExpected() || w2.GetNodeDeleted() {
		t.Errorf("w-2's record: node_expected %v node_deleted %v, want true false", w2.GetNodeExpected(), w2.GetNodeDeleted())
	}
	// Kept past the watcher's grace for young Nodes (1s), several polls.
	deadline = time.Now().Add(2 * time.Second)
	natstest.WaitFor(t, 5*time.Second, "two seconds with w-2's Node kept", func() bool {
		if !exists("w-2") {
			t.Fatal("w-2's Node deleted while the machine-manager was looking for it")
		}
		return time.Now().After(deadline)
	})
}
