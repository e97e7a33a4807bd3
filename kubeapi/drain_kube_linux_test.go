package kubeapi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/kubeapi/kubeapitest"
	"github.com/capn-dev/capn/secrets/pki"
)

// DrainWorld is a Node with pods in a real kube-apiserver, with
// kube-controller-manager's disruption controller computing the
// PodDisruptionBudgets' status: what a drain meets, without a kubelet
// (the pods are bound by spec.nodeName and made Ready through the status
// subresource).
type drainWorld struct {
	t   *testing.T
	api *kubeapitest.Server
}

func newDrainWorld(t *testing.T) drainWorld {
	kubeapitest.Require(t)
	caPair, _, _ := newCA(t, "kubernetes")
	sa, err := pki.NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	api := kubeapitest.Start(t, caPair, sa.PublicPEM, sa.PrivatePEM)
	api.StartControllerManager(t, "disruption")
	w := drainWorld{t: t, api: api}
	w.create("/api/v1/namespaces/default/serviceaccounts", map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "default"}})
	w.create("/api/v1/nodes", map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": "w-1"}})
	return w
}

func (w drainWorld) create(collection string, body map[string]any) {
	w.t.Helper()
	if err := w.api.Admin.Do(context.Background(), "POST", collection, "application/json", body, nil); err != nil {
		w.t.Fatalf("create in %s: %v", collection, err)
	}
}

// pod creates a Ready pod on w-1.
func (w drainWorld) pod(name string, labels map[string]string, meta map[string]any) {
	w.t.Helper()
	m := map[string]any{"name": name, "labels": labels}
	for k, v := range meta {
		m[k] = v
	}
	w.create("/api/v1/namespaces/default/pods", map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": m,
		"spec": map[string]any{"nodeName": "w-1", "automountServiceAccountToken": false,
			"containers": []any{map[string]any{"name": "c", "image": "registry.k8s.io/pause:3.10"}}}})
	now := time.Now().UTC().Format(time.RFC3339)
	if err := w.api.Admin.MergePatch(context.Background(), "/api/v1/namespaces/default/pods/"+name+"/status", map[string]any{"status": map[string]any{
		"phase": "Running", "conditions": []any{map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": now}}}}); err != nil {
		w.t.Fatal(err)
	}
}

// pdb creates (or, with update, replaces) a budget over app=web.
func (w drainWorld) pdb(minAvailable int, want int32) {
	w.t.Helper()
	ctx := context.Background()
	body := map[string]any{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": map[string]any{"name": "web-pdb", "namespace": "default"},
		"spec": map[string]any{"minAvailable": minAvailable, "selector": map[string]any{"matchLabels": map[string]any{"app": "web"}}}}
	if err := w.api.Admin.Apply(ctx, kubeapi.Object{Collection: "/apis/policy/v1/namespaces/default/poddisruptionbudgets", Name: "web-pdb", Body: body}); err != nil {
		w.t.Fatal(err)
	}
	// The controller has computed the budget once it observed this spec.
	testkit.WaitFor(w.t, 30*time.Second, "the disruption controller's status of web-pdb", func() bool {
		var p struct {
			Metadata struct{ Generation int64 }
			Status   struct {
				ObservedGeneration int64 `json:"observedGeneration"`
				DisruptionsAllowed int32 `json:"disruptionsAllowed"`
				CurrentHealthy     int32 `json:"currentHealthy"`
			}
		}
		err := w.api.Admin.Get(ctx, "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web-pdb", &p)
		return err == nil && p.Status.ObservedGeneration == p.Metadata.Generation && p.Status.CurrentHealthy == 2 && p.Status.DisruptionsAllowed == want
	})
}

// TestDrainHelpersAgainstKubeAPIServer: cordon, list, evict and budgets
// as the real API does them. A budget allowing no disruption refuses an
// eviction (429, the budget named); a pod no budget covers is evicted
// (terminating: no kubelet finishes it); DaemonSet and mirror pods are
// recognised; once the budget allows one disruption, the pod evicts.
func TestDrainHelpersAgainstKubeAPIServer(t *testing.T) {
	w := newDrainWorld(t)
	ctx := context.Background()
	c := w.api.Admin
	web := map[string]string{"app": "web"}
	w.pod("web-a", web, nil)
	w.pod("web-b", web, nil)
	w.pod("solo", nil, nil)
	w.pod("ds-a", nil, map[string]any{"ownerReferences": []any{map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
		"uid": "7d5c3b1e-0000-4000-8000-000000000001", "controller": true}}})
	w.pod("kube-proxy-w-1", nil, map[string]any{"annotations": map[string]any{kubeapi.MirrorPodAnnotation: "abc"}})
	w.pdb(2, 0)

	if err := c.Cordon(ctx, "w-1"); err != nil {
		t.Fatal(err)
	}
	var node struct{ Spec struct{ Unschedulable bool } }
	if err := c.Get(ctx, "/api/v1/nodes/w-1", &node); err != nil || !node.Spec.Unschedulable {
		t.Fatalf("cordoned Node: unschedulable %v (%v)", node.Spec.Unschedulable, err)
	}
	if err := c.Cordon(ctx, "w-1"); err != nil {
		t.Fatalf("cordon again: %v", err)
	}

	pods, err := c.ListPodsOnNode(ctx, "w-1")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]kubeapi.Pod{}
	for _, p := range pods {
		byName[p.Name] = p
	}
	if len(pods) != 5 || !byName["ds-a"].DaemonSet || !byName["kube-proxy-w-1"].Mirror || byName["web-a"].DaemonSet || byName["web-a"].Mirror ||
		byName["web-a"].Labels["app"] != "web" || byName["web-a"].UID == "" || byName["web-a"].Phase != "Running" {
		t.Fatalf("pods on w-1: %+v", pods)
	}
	if others, err := c.ListPodsOnNode(ctx, "w-2"); err != nil || len(others) != 0 {
		t.Fatalf("pods on w-2: %v (%v), want none", others, err)
	}

	// The budget refuses: 429, named.
	err = c.Evict(ctx, byName["web-a"])
	var blocked *kubeapi.EvictionBlocked
	if !errors.As(err, &blocked) || !errors.Is(err, kubeapi.ErrEvictionBlocked) || blocked.Budget != "web-pdb" {
		t.Fatalf("evict web-a under a budget allowing 0: %v (%#v), want blocked by web-pdb", err, blocked)
	}
	t.Logf("refused: %v", err)
	pdbs, err := c.ListPDBs(ctx, "default")
	if err != nil || len(pdbs) != 1 || pdbs[0].Name != "web-pdb" || !pdbs[0].Selects(web) || pdbs[0].Selects(nil) || pdbs[0].DisruptionsAllowed != 0 {
		t.Fatalf("budgets %+v (%v)", pdbs, err)
	}

	// No budget covers solo: evicted, terminating (no kubelet finishes it).
	if err := c.Evict(ctx, byName["solo"]); err != nil {
		t.Fatalf("evict solo: %v", err)
	}
	pods, _ = c.ListPodsOnNode(ctx, "w-1")
	for _, p := range pods {
		if (p.Name == "solo") != p.Terminating {
			t.Errorf("%s terminating %v after solo's eviction", p.Name, p.Terminating)
		}
	}
	// Evicting a pod that is gone is done.
	if err := c.Evict(ctx, kubeapi.Pod{Namespace: "default", Name: "never-was"}); err != nil {
		t.Errorf("evict a pod that is gone: %v", err)
	}

	// The budget allows one: web-a evicts.
	w.pdb(1, 1)
	if err := c.Evict(ctx, byName["web-a"]); err != nil {
		t.Fatalf("evict web-a under a budget allowing 1: %v", err)
	}
}
