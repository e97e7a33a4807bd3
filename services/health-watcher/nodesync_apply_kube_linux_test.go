package healthwatcher

import (
	"context"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/kubeapi/kubeapitest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
)

// syncNode against a real kube-apiserver: a Node read, then changed by
// someone else (a user adds a taint) before the patch lands, is patched
// only after a fresh read — the PATCH carries the resourceVersion read, the
// API server refuses the stale one (409), and the user's taint survives
// beside capn's. A Node gone is no error.
func TestSyncNodeKeepsAConcurrentEdit(t *testing.T) {
	ctx := context.Background()
	ca, err := pki.NewCA("kubernetes", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sa, err := pki.NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	api := kubeapitest.Start(t, ca, sa.PublicPEM, sa.PrivatePEM)
	kc := api.Admin
	if _, err := kc.Create(ctx, kubeapi.Object{Collection: nodesPath, Name: "n", Body: map[string]any{"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": "n", "labels": map[string]any{"kubernetes.io/hostname": "n"}}}}); err != nil {
		t.Fatal(err)
	}
	stale, err := getNodeMeta(ctx, kc, nodesPath+"/n")
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.MergePatch(ctx, nodesPath+"/n", map[string]any{"spec": map[string]any{"taints": []any{
		map[string]any{"key": "user", "effect": "NoSchedule"}}}}); err != nil {
		t.Fatal(err)
	}

	m := newMetrics(nil)
	count := func(outcome string) float64 {
		var d dto.Metric
		if err := m.nodeSyncs.WithLabelValues(outcome).Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetCounter().GetValue()
	}
	spec := &capnv1.MachineSpec{Labels: map[string]string{"tier": "web"},
		Taints: []*capnv1.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}}}
	done, err := syncNode(ctx, kc, "n", stale, spec, m)
	if err != nil {
		t.Fatal(err)
	}
	if done.LabelsSet != 1 || done.TaintsSet != 1 {
		t.Errorf("change %+v", done)
	}
	if c, p := count(syncConflict), count(syncPatched); c != 1 || p != 1 {
		t.Errorf("conflicts %v, patches %v; want 1 and 1", c, p)
	}
	now, err := getNodeMeta(ctx, kc, nodesPath+"/n")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(now.Taints, NodeTaint{Key: "user", Effect: "NoSchedule"}) || !slices.Contains(now.Taints, NodeTaint{Key: "dedicated", Value: "web", Effect: "NoSchedule"}) {
		t.Errorf("taints %v: want the user's and capn's", now.Taints)
	}
	if now.Labels["tier"] != "web" || now.Labels["kubernetes.io/hostname"] != "n" || now.Annotations[AnnotationManagedTaints] != "dedicated:NoSchedule" {
		t.Errorf("labels %v annotations %v", now.Labels, now.Annotations)
	}
	// In sync: no request at all.
	if done, err := syncNode(ctx, kc, "n", now, spec, m); err != nil || !done.Empty() || count(syncPatched) != 1 {
		t.Errorf("in sync: change %+v, err %v", done, err)
	}
	if done, err := syncNode(ctx, kc, "gone", NodeMeta{ResourceVersion: "1"}, spec, m); err != nil || !done.Empty() {
		t.Errorf("Node gone: change %+v, err %v", done, err)
	}
}
