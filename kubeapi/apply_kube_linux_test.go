package kubeapi_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/kubeapi/kubeapitest"
	"github.com/capn-dev/capn/secrets/pki"
)

func startAPI(t *testing.T) *kubeapitest.Server {
	t.Helper()
	kubeapitest.Require(t)
	caPair, _, _ := newCA(t, "kubernetes")
	sa, err := pki.NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	return kubeapitest.Start(t, caPair, sa.PublicPEM, sa.PrivatePEM)
}

type applied struct {
	Metadata struct {
		Namespace     string `json:"namespace"`
		ManagedFields []struct {
			Manager   string `json:"manager"`
			Operation string `json:"operation"`
		} `json:"managedFields"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
	Spec struct {
		Replicas int `json:"replicas"`
	} `json:"spec"`
}

// Against a real kube-apiserver: server-side apply finds each kind's path
// through discovery (core, apps, a CustomResourceDefinition's kind once it
// is established), creates and updates objects as field manager capn, puts
// a namespaced object without a namespace in default, refuses to take a
// field another manager owns unless forced, and DeleteObject deletes (an
// object already gone, or of a kind not served, is not an error).
func TestServerSideApplyAgainstKubeAPIServer(t *testing.T) {
	api := startAPI(t)
	ctx := t.Context()
	c := api.Admin
	ns := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "addons"}}
	cm := func(v string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "settings", "namespace": "addons"},
			"data": map[string]any{"mtu": v}}
	}
	deploy := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web"},
		"spec": map[string]any{"replicas": 2, "selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
				"spec": map[string]any{"containers": []any{map[string]any{"name": "web", "image": "registry.k8s.io/pause:3.10"}}}}}}
	for _, o := range []map[string]any{ns, cm("1450"), deploy} {
		if created, err := c.ServerSideApply(ctx, o, kubeapi.ApplyOptions{Force: true}, nil); err != nil || !created {
			t.Fatalf("first apply: created %v, %v", created, err)
		}
	}
	if created, err := c.ServerSideApply(ctx, cm("1450"), kubeapi.ApplyOptions{Force: true}, nil); err != nil || created {
		t.Fatalf("apply again: created %v, %v", created, err)
	}
	var got applied
	if err := c.GetObject(ctx, "v1", "ConfigMap", "addons", "settings", &got); err != nil {
		t.Fatal(err)
	}
	if got.Data["mtu"] != "1450" || len(got.Metadata.ManagedFields) != 1 || got.Metadata.ManagedFields[0].Manager != kubeapi.FieldManager ||
		got.Metadata.ManagedFields[0].Operation != "Apply" {
		t.Fatalf("ConfigMap as applied: %+v", got)
	}
	var d applied
	if err := c.GetObject(ctx, "apps/v1", "Deployment", "", "web", &d); err != nil || d.Metadata.Namespace != "default" || d.Spec.Replicas != 2 {
		t.Fatalf("Deployment without a namespace: %+v, %v", d, err)
	}

	// Another manager changes the field capn owns: without force, a 409;
	// with it, capn's value comes back and capn owns the field again.
	if err := c.Do(ctx, http.MethodPatch, "/api/v1/namespaces/addons/configmaps/settings?fieldManager=kubectl-edit", "application/merge-patch+json",
		map[string]any{"data": map[string]any{"mtu": "9000"}}, nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.ServerSideApply(ctx, cm("1450"), kubeapi.ApplyOptions{}, nil)
	if !kubeapi.IsStatus(err, http.StatusConflict) {
		t.Fatalf("apply over another manager's field without force: %v, want 409", err)
	}
	if _, err := c.ServerSideApply(ctx, cm("1450"), kubeapi.ApplyOptions{Force: true}, &got); err != nil || got.Data["mtu"] != "1450" {
		t.Fatalf("forced apply: %+v, %v", got, err)
	}

	// A kind that is not served yet, then served once its CRD is
	// established: discovery is read again on a miss.
	widget := map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w1", "namespace": "addons"}, "spec": map[string]any{"size": 3}}
	if _, err := c.ServerSideApply(ctx, widget, kubeapi.ApplyOptions{Force: true}, nil); !errors.Is(err, kubeapi.ErrNoKind) {
		t.Fatalf("a kind not served: %v, want ErrNoKind", err)
	}
	crd := map[string]any{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": map[string]any{"name": "widgets.example.com"},
		"spec": map[string]any{"group": "example.com", "scope": "Namespaced",
			"names":    map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true, "schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}}
	if _, err := c.ServerSideApply(ctx, crd, kubeapi.ApplyOptions{Force: true}, nil); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "the CRD's kind served", func() bool {
		_, err := c.ServerSideApply(ctx, widget, kubeapi.ApplyOptions{Force: true}, nil)
		return err == nil
	})

	for _, o := range []struct{ apiVersion, kind, ns, name string }{{"v1", "ConfigMap", "addons", "settings"}, {"apps/v1", "Deployment", "", "web"}, {"example.com/v1", "Widget", "addons", "w1"}} {
		gone, err := c.DeleteObject(ctx, o.apiVersion, o.kind, o.ns, o.name)
		if err != nil || !gone {
			t.Fatalf("delete %s %s: %v, %v", o.kind, o.name, gone, err)
		}
		if gone, err := c.DeleteObject(ctx, o.apiVersion, o.kind, o.ns, o.name); err != nil || gone {
			t.Fatalf("delete %s %s again: %v, %v", o.kind, o.name, gone, err)
		}
	}
	if gone, err := c.DeleteObject(context.Background(), "nothing.example.com/v1", "Thing", "", "x"); err != nil || gone {
		t.Fatalf("delete of a kind not served: %v, %v", gone, err)
	}
	if err := c.GetObject(ctx, "v1", "ConfigMap", "addons", "settings", &got); !kubeapi.IsStatus(err, http.StatusNotFound) {
		t.Fatalf("deleted ConfigMap: %v", err)
	}
}
