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

	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/kubeapi/kubeapitest"
	"github.com/capn-dev/capn/providers/conformance"
	capnpki "github.com/capn-dev/capn/secrets/pki"
)

// externalCluster is a Kubernetes control plane the test runs outside
// capn — etcd, kube-apiserver (bootstrap-token auth) and a
// kube-controller-manager that approves and signs the nodes' CSRs — with
// deploy/external/rbac.yaml applied and a token of its capn-external
// service account: what a user registers with capn external-kubeconfig
// set.
type externalCluster struct {
	API *kubeapitest.Server
	// Admin is a system:masters client (the test's, never capn's).
	Admin *kubeapi.Client
	// Version is the version its kube-apiserver runs.
	Version string
	ca      capnpki.KeyPair
	token   string
}

// startExternalCluster runs one until the test ends (skipped without the
// binaries, failed under CAPN_REQUIRE_KUBE=1). Objects capn did not make
// — namespace theirs and its ConfigMap — must outlive any capn cluster.
func startExternalCluster(t *testing.T) *externalCluster {
	t.Helper()
	kubeapitest.Require(t)
	dir, why := kubeapitest.Newest("etcd", "kube-apiserver", "kube-controller-manager")
	if dir == "" {
		if os.Getenv("CAPN_REQUIRE_KUBE") == "1" {
			t.Fatalf("CAPN_REQUIRE_KUBE=1 but %s", why)
		}
		t.Skip(why)
	}
	caPair, err := capnpki.NewCA("external", time.Now())
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
	x := &externalCluster{API: api, Admin: api.Admin, Version: conformance.KubeVersion(t, dir), ca: caPair}
	mustApply(t, x.Admin, map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "theirs"}})
	mustApply(t, x.Admin, map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "theirs", "namespace": "theirs"}, "data": map[string]any{"owner": "not capn"}})
	applyYAMLFile(t, x.Admin, "../../deploy/external/rbac.yaml")
	x.token = saTokenOf(t, x.Admin, "kube-system", "capn-external")
	return x
}

// register writes the capn-external service account's kubeconfig into
// the deployment's home and registers it as name (capn
// external-kubeconfig set); it returns the file.
func (x *externalCluster) register(t *testing.T, c *conformance.Capn, name string) string {
	t.Helper()
	path := filepath.Join(c.Home, name+".kubeconfig")
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\ncurrent-context: %[1]s\ncontexts:\n- name: %[1]s\n  context: {cluster: %[1]s, user: capn}\n"+
		"clusters:\n- name: %[1]s\n  cluster:\n    server: %[2]s\n    certificate-authority-data: %[3]s\n"+
		"users:\n- name: capn\n  user:\n    token: %[4]s\n", name, x.API.URL, base64.StdEncoding.EncodeToString(x.ca.CertPEM), x.token)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	c.CLI("external-kubeconfig", "set", name, "--kubeconfig", path)
	return path
}

// joinObjects are what capn made in the external cluster for cluster:
// the join RBAC and cluster-info labelled capn.dev/cluster=<cluster>, and
// every bootstrap-token Secret (the test makes none itself).
func (x *externalCluster) joinObjects(t *testing.T, cluster string) []string {
	var out []string
	for _, coll := range []string{"/apis/rbac.authorization.k8s.io/v1/clusterroles", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
		"/apis/rbac.authorization.k8s.io/v1/namespaces/kube-public/roles", "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-public/rolebindings",
		"/api/v1/namespaces/kube-public/configmaps"} {
		var list struct {
			Items []struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
		}
		if err := x.Admin.Get(t.Context(), coll+"?labelSelector=capn.dev%2Fcluster%3D"+cluster, &list); err != nil {
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
	if err := x.Admin.Get(t.Context(), "/api/v1/namespaces/kube-system/secrets", &secrets); err == nil {
		for _, s := range secrets.Items {
			if s.Type == "bootstrap.kubernetes.io/token" {
				out = append(out, "kube-system/secret/"+s.Meta.Name)
			}
		}
	}
	return out
}

// untouched lists what is wrong with the external cluster after capn
// deleted its cluster: it must answer, and what capn did not make — their
// ConfigMap, the capn-external service account and RBAC the user applied,
// Kubernetes' own node-bootstrapper role — must be there.
func (x *externalCluster) untouched(t *testing.T) []string {
	var bad []string
	if err := x.Admin.Ready(t.Context()); err != nil {
		return []string{fmt.Sprintf("the external API server no longer answers: %v", err)}
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := x.Admin.Get(t.Context(), "/api/v1/namespaces/theirs/configmaps/theirs", &cm); err != nil || cm.Data["owner"] != "not capn" {
		bad = append(bad, fmt.Sprintf("their ConfigMap: %v %v", cm.Data, err))
	}
	for _, path := range []string{"/api/v1/namespaces/kube-system/serviceaccounts/capn-external",
		"/apis/rbac.authorization.k8s.io/v1/clusterroles/capn-external", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/capn-external",
		"/apis/rbac.authorization.k8s.io/v1/clusterroles/system:node-bootstrapper"} {
		if err := x.Admin.Get(t.Context(), path, &struct{}{}); err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", path, err))
		}
	}
	return bad
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
