//go:build linux

package kube_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/kubeapi/kubeapitest"
	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	capnpki "github.com/capn-dev/capn/secrets/pki"
)

// externalClusterManifest: an external control plane (the registered
// kubeconfig ext) and a pool of 2 kube-local workers on the process
// provider.
const externalClusterManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  bootstrap:
    provider: kube-local
  controlPlane:
    type: external
    external: {kubeconfig: ext}
  workerPools:
  - name: workers
    provider: process
    replicas: 2
`

// TestExternalControlPlaneEndToEnd is issue 21's proof with real
// binaries: the test, not capn, runs etcd, kube-apiserver and
// kube-controller-manager (csrapproving, csrsigning: the node
// certificates); applies deploy/external/rbac.yaml; registers a kubeconfig
// with that service account's token (capn external-kubeconfig set);
// applies a cluster with controlPlane.type external and 2 kube-local
// workers on the process provider (capn's whole deployment and
// controlplane-external as programs); waits for 2 Ready Nodes in the
// external API server; deletes the capn cluster and sees its Nodes and
// the join objects capn made gone, and the external API server untouched:
// answering, with the objects capn did not make still there.
func TestExternalControlPlaneEndToEnd(t *testing.T) {
	kubeapitest.Require(t)
	if dir, why := kubeapitest.Newest("etcd", "kube-apiserver", "kube-controller-manager"); dir == "" {
		t.Skip(why)
	}
	bin := conformance.KubeBin(t, "")
	begin := time.Now()
	step := func(name string, since time.Time) {
		t.Logf("step %-44s %6.1fs (total %6.1fs)", name, time.Since(since).Seconds(), time.Since(begin).Seconds())
	}
	ctx := t.Context()

	// --- the external cluster, outside capn ----------------------------------
	s := time.Now()
	now := time.Now()
	caPair, err := capnpki.NewCA("external", now)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := capnpki.NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	api := kubeapitest.Start(t, caPair, sa.PublicPEM, sa.PrivatePEM, "--enable-bootstrap-token-auth")
	caDir := t.TempDir()
	for name, data := range map[string][]byte{"ca.crt": caPair.CertPEM, "ca.key": caPair.KeyPEM} {
		if err := os.WriteFile(filepath.Join(caDir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	api.StartControllerManagerArgs(t, []string{"--cluster-signing-cert-file=" + filepath.Join(caDir, "ca.crt"),
		"--cluster-signing-key-file=" + filepath.Join(caDir, "ca.key")}, "csrapproving", "csrsigning")
	admin := api.Admin
	// Objects capn did not make, which must outlive the capn cluster.
	mustApply(t, admin, map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "theirs"}})
	mustApply(t, admin, map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "theirs", "namespace": "theirs"}, "data": map[string]any{"owner": "not capn"}})
	applyYAMLFile(t, admin, "../../deploy/external/rbac.yaml")
	saToken := saTokenOf(t, admin, "kube-system", "capn-external")
	step("external etcd, kube-apiserver, controller-manager", s)

	// --- capn ------------------------------------------------------------------
	s = time.Now()
	env := sdktest.New(t)
	c := conformance.StartCapn(t, env.Server.URL())
	progs, err := conformance.BuildTemp("controlplane-external")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(progs) })
	conformance.StartProgram(t, filepath.Join(progs, "controlplane-external"), []string{"CAPN_LOG_LEVEL=info", "CAPN_LOG_FORMAT=json", c.SecretsKeyEnv},
		"--nats-url="+env.Server.URL(), "--http-addr=off", "--external-resync=2s")
	state := startProcessProvider(t, bin, env.Server.URL())
	t.Cleanup(func() { // before the provider's state is purged
		if !t.Failed() {
			return
		}
		logs, _ := filepath.Glob(filepath.Join(state, "clusters", "*", "machines", "*", "node.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("%s (last 6000 bytes):\n%s", l, b)
		}
	})
	step("capn deployment and the process provider", s)

	kcPath := filepath.Join(c.Home, "ext.kubeconfig")
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\ncurrent-context: ext\ncontexts:\n- name: ext\n  context: {cluster: ext, user: capn}\n"+
		"clusters:\n- name: ext\n  cluster:\n    server: %s\n    certificate-authority-data: %s\n"+
		"users:\n- name: capn\n  user:\n    token: %s\n", api.URL, base64.StdEncoding.EncodeToString(caPair.CertPEM), saToken)
	if err := os.WriteFile(kcPath, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	c.CLI("external-kubeconfig", "set", "ext", "--kubeconfig", kcPath)
	name := fmt.Sprintf("ext%d", time.Now().UnixNano()%1e6)
	manifest := filepath.Join(c.Home, "cluster.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(externalClusterManifest, name, wantVersion(bin))), 0o600); err != nil {
		t.Fatal(err)
	}
	c.CLI("apply", "-f", manifest)
	applied := time.Now()

	type node struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			ProviderID string `json:"providerID"`
		} `json:"spec"`
		Status struct {
			Conditions []struct{ Type, Status string } `json:"conditions"`
		} `json:"status"`
	}
	nodes := func() ([]node, error) {
		var list struct{ Items []node }
		err := admin.Get(ctx, "/api/v1/nodes", &list)
		return list.Items, err
	}
	ready := func(n node) bool {
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" {
				return c.Status == "True"
			}
		}
		return false
	}
	observed, err := env.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	records := store.NewBucket(observed, store.New[capnv1.ControlPlaneRecord]())
	conformance.Poll(t, "2 Ready Nodes in the external API server", 4*time.Minute, func() error {
		ns, err := nodes()
		if err != nil {
			return err
		}
		n := 0
		var seen []string
		for _, x := range ns {
			seen = append(seen, fmt.Sprintf("%s(%s ready=%v)", x.Metadata.Name, x.Spec.ProviderID, ready(x)))
			if ready(x) {
				n++
			}
		}
		if n != 2 {
			rec, _, _ := records.Get(ctx, keys.ControlPlane(name))
			return fmt.Errorf("%d Ready of %v; record initialized=%v conditions %v", n, seen, rec.GetInitialized(), rec.GetConditions())
		}
		return nil
	})
	t.Logf("2 Ready Nodes in the external API server %.1fs after capn apply", time.Since(applied).Seconds())
	ns, _ := nodes()
	for _, n := range ns {
		if !strings.HasPrefix(n.Spec.ProviderID, "process://") {
			t.Errorf("Node %s: providerID %q, not a process machine's", n.Metadata.Name, n.Spec.ProviderID)
		}
	}
	joinObjects := func() []string {
		var out []string
		for _, coll := range []string{"/apis/rbac.authorization.k8s.io/v1/clusterroles", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
			"/apis/rbac.authorization.k8s.io/v1/namespaces/kube-public/roles", "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-public/rolebindings",
			"/api/v1/namespaces/kube-public/configmaps"} {
			var list struct {
				Items []struct {
					Metadata struct {
						Name   string            `json:"name"`
						Labels map[string]string `json:"labels"`
					} `json:"metadata"`
				}
			}
			if err := admin.Get(ctx, coll+"?labelSelector=capn.dev%2Fcluster%3D"+name, &list); err != nil {
				out = append(out, fmt.Sprintf("%s: %v", coll, err))
				continue
			}
			for _, it := range list.Items {
				out = append(out, coll+"/"+it.Metadata.Name)
			}
		}
		var secrets struct {
			Items []struct {
				Type string `json:"type"`
				Meta struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
		}
		if err := admin.Get(ctx, "/api/v1/namespaces/kube-system/secrets", &secrets); err == nil {
			for _, s := range secrets.Items {
				if s.Type == "bootstrap.kubernetes.io/token" {
					out = append(out, "kube-system/secret/"+s.Meta.Name)
				}
			}
		}
		return out
	}
	made := joinObjects()
	t.Logf("join objects capn made in the external cluster: %d: %v", len(made), made)
	if len(made) < 9 {
		t.Errorf("only %d join objects labelled capn.dev/cluster=%s: %v", len(made), name, made)
	}

	// --- delete the capn cluster ---------------------------------------------
	s = time.Now()
	c.CLI("delete", "cluster", name)
	conformance.Poll(t, "the cluster's Nodes gone from the external API server", 5*time.Minute, func() error {
		ns, err := nodes()
		if err != nil {
			return err
		}
		if len(ns) > 0 {
			return fmt.Errorf("%d Nodes left", len(ns))
		}
		return nil
	})
	step("delete: the Nodes gone", s)
	conformance.Poll(t, "the join objects capn made gone", 3*time.Minute, func() error {
		if left := joinObjects(); len(left) > 0 {
			return fmt.Errorf("left: %v", left)
		}
		return nil
	})
	step("delete: the join objects gone", s)
	clusters := conformance.NewClusters(t, env.JS)
	clusters.WaitGone(name, []string{"process"}, 3*time.Minute)
	if _, _, err := records.Get(ctx, keys.ControlPlane(name)); err == nil {
		t.Errorf("controlplane.%s is still there", name)
	}
	step("delete: the capn cluster gone", s)

	// --- the external cluster untouched ---------------------------------------
	if err := admin.Ready(ctx); err != nil {
		t.Fatalf("the external API server no longer answers: %v", err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := admin.Get(ctx, "/api/v1/namespaces/theirs/configmaps/theirs", &cm); err != nil || cm.Data["owner"] != "not capn" {
		t.Errorf("their ConfigMap: %v %v", cm.Data, err)
	}
	for _, path := range []string{"/api/v1/namespaces/kube-system/serviceaccounts/capn-external",
		"/apis/rbac.authorization.k8s.io/v1/clusterroles/capn-external", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/capn-external",
		"/apis/rbac.authorization.k8s.io/v1/clusterroles/system:node-bootstrapper"} {
		if err := admin.Get(ctx, path, &struct{}{}); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	t.Logf("total %.1fs", time.Since(begin).Seconds())
}

func mustApply(t *testing.T, c *kubeapi.Client, obj map[string]any) {
	t.Helper()
	if _, err := c.ServerSideApply(t.Context(), obj, kubeapi.ApplyOptions{}, nil); err != nil {
		t.Fatal(err)
	}
}

// applyYAMLFile applies every document of path with server-side apply, as
// the external cluster's admin would with kubectl apply.
func applyYAMLFile(t *testing.T, c *kubeapi.Client, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(obj) > 0 {
			mustApply(t, c, obj)
		}
	}
}

// saTokenOf asks the API server for a token of the service account, as
// `kubectl create token` does.
func saTokenOf(t *testing.T, c *kubeapi.Client, namespace, name string) string {
	t.Helper()
	var out struct {
		Status struct {
			Token string `json:"token"`
		} `json:"status"`
	}
	body := map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{"expirationSeconds": 7200}}
	if err := c.Do(t.Context(), http.MethodPost, fmt.Sprintf("/api/v1/namespaces/%s/serviceaccounts/%s/token", namespace, name), "application/json", body, &out); err != nil {
		t.Fatal(err)
	}
	if out.Status.Token == "" {
		t.Fatal("no token")
	}
	return out.Status.Token
}
