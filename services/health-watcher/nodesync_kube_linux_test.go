package healthwatcher_test

import (
	"context"
	"slices"
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

// A pool's labels and taints reach its Nodes, against a real etcd and
// kube-apiserver and a real NATS, through the health-watcher as a
// deployment runs it: the machines' spec records carry the pool's labels
// and taints (as the planner writes them); the watcher sets them on each
// machine's Node and records what it set; it leaves the kubelet's and a
// user's labels and taints alone, writes nothing while the Nodes are in
// sync, and when the machine records change in place (same uid, as the
// planner propagates a pool change) it changes the values and removes
// what the pool no longer has — without touching a label a user added
// under a key capn once owned but no longer does.
func TestPoolLabelsAndTaintsReachTheNodes(t *testing.T) {
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
	kc := api.Admin

	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	desired, observed, secrets := kvBucket(t, js, events.BucketDesired), kvBucket(t, js, events.BucketObserved), kvBucket(t, js, events.BucketSecrets)
	key, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	const c = "ls"
	created := timestamppb.New(now.Add(-time.Minute))
	labels := map[string]string{"tier": "web", "team": "a", "example.com/gpu": "true"}
	taints := []*capnv1.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}}
	put(t, observed, "provider.process", &capnv1.ProviderAnnouncement{Name: "process", Capabilities: []string{"real-kubernetes"}, Time: timestamppb.Now()})
	put(t, desired, "cluster."+c, &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: c, Uid: "u1", CreationTimestamp: created},
		Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.37.2", ControlPlane: &capnv1.ControlPlaneSpec{Provider: "process", Replicas: 1},
			WorkerPools: []*capnv1.WorkerPool{{Name: "md-0", Provider: "process", Replicas: 2, Labels: labels, Taints: taints}}}})
	put(t, observed, "cluster."+c, &capnv1.ClusterStatus{ControlPlaneInitialized: true})
	for _, m := range []string{"cp-0", "w-0", "w-1"} {
		spec := &capnv1.MachineSpec{Cluster: c, Pool: "control-plane", Role: "control-plane", Provider: "process", Version: "v1.37.2"}
		if m != "cp-0" {
			spec = &capnv1.MachineSpec{Cluster: c, Pool: "md-0", Role: "worker", Provider: "process", Version: "v1.37.2", Labels: labels, Taints: taints}
		}
		put(t, desired, "machine."+c+"."+m, &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: m, Uid: "u-" + m, Generation: 1, CreationTimestamp: created,
			Labels: map[string]string{"capn.dev/cluster": c, "capn.dev/pool": spec.Pool}}, Spec: spec})
		put(t, observed, "machine."+c+"."+m, &capnv1.MachineStatus{Phase: "Running", ProviderId: "process://" + c + "/" + m, Provider: "process",
			PhaseSince: created, InfrastructureReadyTime: created})
	}
	config, err := kubeconfig.Render(kubeconfig.Input{ClusterName: c, Host: "127.0.0.1", Port: int32(api.Port),
		CACertPEM: caPair.CertPEM, ClientCertPEM: api.AdminPair.CertPEM, ClientKeyPEM: api.AdminPair.KeyPEM})
	if err != nil {
		t.Fatal(err)
	}
	put(t, secrets, "kubeconfig."+c, &capnv1.AdminKubeconfig{Kubeconfig: config, Server: api.URL}, store.WithSealer(ring))

	// The Nodes, as the kubelet registers them; w-0 also carries a label
	// and a taint a user set.
	kubeletLabels := func(n string) map[string]any {
		return map[string]any{"kubernetes.io/hostname": n, "kubernetes.io/os": "linux"}
	}
	for _, n := range []string{"cp-0", "w-0", "w-1"} {
		meta := map[string]any{"name": n, "labels": kubeletLabels(n)}
		spec := map[string]any{"providerID": "process://" + c + "/" + n}
		if n == "w-0" {
			meta["labels"] = map[string]any{"kubernetes.io/hostname": n, "kubernetes.io/os": "linux", "owner": "user"}
			spec["taints"] = []any{map[string]any{"key": "user", "value": "x", "effect": "PreferNoSchedule"}}
		}
		body := map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec}
		if _, err := kc.Create(ctx, kubeapi.Object{Collection: "/api/v1/nodes", Name: n, Body: body}); err != nil {
			t.Fatal(err)
		}
	}

	svc := healthwatcher.New(healthwatcher.Config{Keyring: ring, NodePollEvery: 300 * time.Millisecond})
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

	type node struct {
		Metadata struct {
			ResourceVersion string            `json:"resourceVersion"`
			Labels          map[string]string `json:"labels"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			Taints []healthwatcher.NodeTaint `json:"taints"`
		} `json:"spec"`
	}
	get := func(n string) node {
		t.Helper()
		var out node
		if err := kc.Get(ctx, "/api/v1/nodes/"+n, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	hasTaint := func(n node, key, value, effect string) bool {
		return slices.Contains(n.Spec.Taints, healthwatcher.NodeTaint{Key: key, Value: value, Effect: effect})
	}
	begin := time.Now()
	natstest.WaitFor(t, 20*time.Second, "the pool's labels and taints on w-0 and w-1", func() bool {
		for _, name := range []string{"w-0", "w-1"} {
			n := get(name)
			for k, v := range labels {
				if got, ok := n.Metadata.Labels[k]; !ok || got != v {
					return false
				}
			}
			if !hasTaint(n, "dedicated", "web", "NoSchedule") {
				return false
			}
		}
		return true
	})
	t.Logf("pool labels and taints on both worker Nodes %s after the watcher started", time.Since(begin).Round(10*time.Millisecond))
	w0 := get("w-0")
	if a := w0.Metadata.Annotations; a[healthwatcher.AnnotationManagedLabels] != "example.com/gpu,team,tier" ||
		a[healthwatcher.AnnotationManagedTaints] != "dedicated:NoSchedule" {
		t.Errorf("w-0's ownership record %v", a)
	}
	if w0.Metadata.Labels["owner"] != "user" || w0.Metadata.Labels["kubernetes.io/hostname"] != "w-0" || !hasTaint(w0, "user", "x", "PreferNoSchedule") {
		t.Errorf("w-0 lost the kubelet's or the user's labels or taints: %v %v", w0.Metadata.Labels, w0.Spec.Taints)
	}
	for k := range w0.Metadata.Labels {
		if k == "capn.dev/cluster" || k == "capn.dev/pool" {
			t.Errorf("capn's bookkeeping label %s on the Node", k)
		}
	}
	cp := get("cp-0")
	// (The API server's admission taints a new Node node.kubernetes.io/not-ready:
	// a foreign taint, kept.)
	if len(cp.Metadata.Annotations) != 0 || slices.ContainsFunc(cp.Spec.Taints, func(x healthwatcher.NodeTaint) bool { return x.Key == "dedicated" }) ||
		len(cp.Metadata.Labels) != 2 {
		t.Errorf("cp-0 (no labels or taints wanted) was written: %+v", cp)
	}

	// In sync: no write. Each poll (every 300ms) reads every Node; a
	// changed machine status that the poll records twice proves two polls
	// saw w-0 in sync. The kube-apiserver bumps resourceVersion on any
	// write, so an unchanged one means none.
	rv := w0.Metadata.ResourceVersion
	nodes := store.NewBucket(observed, store.New[capnv1.NodeHealth]())
	for _, ver := range []string{"v1.37.1", "v1.37.2"} {
		if err := kc.MergePatch(ctx, "/api/v1/nodes/w-1/status", map[string]any{"status": map[string]any{"nodeInfo": map[string]any{"kubeletVersion": ver}}}); err != nil {
			t.Fatal(err)
		}
		natstest.WaitFor(t, 10*time.Second, "w-1's kubelet version "+ver+" recorded", func() bool {
			h, _, err := nodes.Get(ctx, keys.Node(c, "w-1"))
			return err == nil && h.GetKubeletVersion() == ver
		})
	}
	if got := get("w-0").Metadata.ResourceVersion; got != rv {
		t.Errorf("w-0 written while in sync: resourceVersion %s → %s", rv, got)
	}

	// The pool changes: tier=db, team and example.com/gpu removed, the taint now
	// NoExecute with another value. The planner rewrites the machine
	// records in place (same uid, next generation); the Nodes follow.
	newLabels := map[string]string{"tier": "db"}
	newTaints := []*capnv1.Taint{{Key: "dedicated", Value: "db", Effect: "NoExecute"}}
	machines := store.NewBucket(desired, store.New[capnv1.Machine]())
	for _, m := range []string{"w-0", "w-1"} {
		if _, _, err := machines.Mutate(ctx, "machine."+c+"."+m, func(cur *capnv1.Machine, _ bool) (*capnv1.Machine, error) {
			cur.Spec.Labels, cur.Spec.Taints = newLabels, newTaints
			cur.Metadata.Generation++
			return cur, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	changed := time.Now()
	natstest.WaitFor(t, 10*time.Second, "the changed pool on w-0 and w-1", func() bool {
		for _, name := range []string{"w-0", "w-1"} {
			n := get(name)
			_, team := n.Metadata.Labels["team"]
			_, role := n.Metadata.Labels["example.com/gpu"]
			if n.Metadata.Labels["tier"] != "db" || team || role || hasTaint(n, "dedicated", "web", "NoSchedule") || !hasTaint(n, "dedicated", "db", "NoExecute") {
				return false
			}
		}
		return true
	})
	t.Logf("a pool change in place reached both Nodes %s after the machine records changed", time.Since(changed).Round(10*time.Millisecond))
	w0 = get("w-0")
	if w0.Metadata.Labels["owner"] != "user" || !hasTaint(w0, "user", "x", "PreferNoSchedule") || !hasTaint(w0, "node.kubernetes.io/not-ready", "", "NoSchedule") {
		t.Errorf("w-0 after the change: labels %v taints %v", w0.Metadata.Labels, w0.Spec.Taints)
	}
	if a := w0.Metadata.Annotations; a[healthwatcher.AnnotationManagedLabels] != "tier" || a[healthwatcher.AnnotationManagedTaints] != "dedicated:NoExecute" {
		t.Errorf("w-0's ownership record after the change %v", a)
	}
	for _, m := range []string{"w-0", "w-1"} {
		if got, _, err := machines.Get(ctx, "machine."+c+"."+m); err != nil || got.GetMetadata().GetUid() != "u-"+m {
			t.Errorf("machine %s replaced: uid %q (%v)", m, got.GetMetadata().GetUid(), err)
		}
	}

	// A user sets team=b on w-1: capn no longer owns team, so it stays.
	if err := kc.MergePatch(ctx, "/api/v1/nodes/w-1", map[string]any{"metadata": map[string]any{"labels": map[string]any{"team": "b"}}}); err != nil {
		t.Fatal(err)
	}
	for _, ver := range []string{"v1.37.1", "v1.37.2"} {
		if err := kc.MergePatch(ctx, "/api/v1/nodes/w-0/status", map[string]any{"status": map[string]any{"nodeInfo": map[string]any{"kubeletVersion": ver}}}); err != nil {
			t.Fatal(err)
		}
		natstest.WaitFor(t, 10*time.Second, "w-0's kubelet version "+ver+" recorded", func() bool {
			h, _, err := nodes.Get(ctx, keys.Node(c, "w-0"))
			return err == nil && h.GetKubeletVersion() == ver
		})
	}
	if got := get("w-1").Metadata.Labels["team"]; got != "b" {
		t.Errorf("the user's team=b on w-1 became %q", got)
	}
}
