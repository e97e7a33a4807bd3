package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/pki"
)

// External kubeconfigs: sealed in the secrets bucket, written only with
// the write and secrets scopes and read back (without the credentials)
// only with secrets; a kubeconfig capn cannot use is refused naming each
// field and changes nothing; delete is refused while a cluster uses it.
func TestExternalKubeconfigsAPI(t *testing.T) {
	e := newEnv(t)
	caPair, err := pki.NewCA("external", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const token = "s3cret.external-token"
	kc := "apiVersion: v1\nkind: Config\ncurrent-context: prod\ncontexts:\n- name: prod\n  context: {cluster: prod, user: capn}\n" +
		"clusters:\n- name: prod\n  cluster:\n    server: https://10.1.2.3:6443\n    certificate-authority-data: " + base64.StdEncoding.EncodeToString(caPair.CertPEM) + "\n" +
		"users:\n- name: capn\n  user:\n    token: " + token + "\n"
	const path = "/v1/externalkubeconfigs/prod"
	before := e.lastSeq(e.secrets)
	// The attack: tokens without the secrets scope (or without write, to
	// set) are refused and store nothing.
	e.do(http.MethodPut, path, tokWrite, kc, "Content-Type", api.MediaYAML).wantProblem(t, http.StatusForbidden)
	e.do(http.MethodPut, path, tokSecrets, kc, "Content-Type", api.MediaYAML).wantProblem(t, http.StatusForbidden)
	e.do(http.MethodPut, path, tokRead, kc, "Content-Type", api.MediaYAML).wantProblem(t, http.StatusForbidden)
	if after := e.lastSeq(e.secrets); after != before {
		t.Fatalf("a refused put wrote the secrets bucket (%d → %d)", before, after)
	}
	r := e.do(http.MethodPut, path, tokAdmin, kc, "Content-Type", api.MediaYAML)
	var info api.ExternalKubeconfigInfo
	if err := json.Unmarshal(r.body, &info); r.status != http.StatusCreated || err != nil {
		t.Fatalf("put: %d %s %v", r.status, r.body, err)
	}
	if info.Name != "prod" || info.Server != "https://10.1.2.3:6443" || info.Auth != "token" || info.Hash == "" || len(info.UsedBy) != 0 {
		t.Fatalf("put answered %+v", info)
	}
	if strings.Contains(string(r.body), "s3cret") {
		t.Error("the answer holds the token")
	}
	raw, err := e.secrets.Get(context.Background(), keys.ExternalKubeconfig("prod"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw.Value()), "s3cret") || strings.Contains(string(raw.Value()), "10.1.2.3") {
		t.Fatal("the kubeconfig is stored in the clear")
	}
	sealed := store.NewBucket(e.secrets, store.New[capnv1.ExternalKubeconfig](), store.WithSealer(e.ring))
	if rec, _, err := sealed.Get(context.Background(), keys.ExternalKubeconfig("prod")); err != nil || string(rec.GetKubeconfig()) != kc || rec.GetHash() != info.Hash {
		t.Fatalf("unsealed: %v %v", rec, err)
	}
	if r := e.do(http.MethodPut, path, tokAdmin, kc, "Content-Type", api.MediaYAML); r.status != http.StatusOK {
		t.Errorf("the same kubeconfig again: %d", r.status)
	}

	// Reading back: secrets scope only, never the credentials.
	e.do(http.MethodGet, path, tokRead, nil).wantProblem(t, http.StatusForbidden)
	e.do(http.MethodGet, path, tokWrite, nil).wantProblem(t, http.StatusForbidden)
	r = e.do(http.MethodGet, path, tokSecrets, nil)
	if r.status != http.StatusOK || strings.Contains(string(r.body), "s3cret") || !strings.Contains(string(r.body), `"server":"https://10.1.2.3:6443"`) {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	e.do(http.MethodGet, "/v1/externalkubeconfigs/nope", tokSecrets, nil).wantProblem(t, http.StatusNotFound)

	// Bad kubeconfigs: 422 naming each field, nothing changed.
	before = e.lastSeq(e.secrets)
	noCreds := strings.Replace(kc, "    token: "+token+"\n", "    {}\n", 1)
	e.do(http.MethodPut, path, tokAdmin, noCreds, "Content-Type", api.MediaYAML).wantProblem(t, http.StatusUnprocessableEntity, "users[capn].user")
	noServer := strings.Replace(kc, "    server: https://10.1.2.3:6443\n", "", 1)
	e.do(http.MethodPut, path, tokAdmin, noServer, "Content-Type", api.MediaYAML).wantProblem(t, http.StatusUnprocessableEntity, "clusters[prod].cluster.server")
	e.do(http.MethodPut, path, tokAdmin, "not: [a kubeconfig", "Content-Type", api.MediaYAML).wantProblem(t, http.StatusUnprocessableEntity)
	e.do(http.MethodPut, "/v1/externalkubeconfigs/Bad_Name", tokAdmin, kc, "Content-Type", api.MediaYAML).wantProblem(t, http.StatusBadRequest, "name")
	if after := e.lastSeq(e.secrets); after != before {
		t.Fatalf("a refused put wrote the secrets bucket (%d → %d)", before, after)
	}

	// In use: delete refused, naming the cluster; get lists it.
	e.put(e.desired, keys.Cluster("edge"), &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "edge"}, Spec: &capnv1.ClusterSpec{
		ControlPlane: &capnv1.ControlPlaneSpec{Type: capnv1.ControlPlaneExternal, External: &capnv1.ExternalControlPlaneSpec{Kubeconfig: "prod"}}}})
	p := e.do(http.MethodDelete, path, tokAdmin, nil).wantProblem(t, http.StatusConflict)
	if !strings.Contains(p.Detail, "used by cluster(s) edge") {
		t.Errorf("conflict detail %q does not name the cluster", p.Detail)
	}
	if err := json.Unmarshal(e.do(http.MethodGet, path, tokSecrets, nil).body, &info); err != nil || strings.Join(info.UsedBy, ",") != "edge" {
		t.Fatalf("usedBy %v %v", info.UsedBy, err)
	}
	// capn makes no kubeconfig of its own for the cluster: its kubeconfig
	// is not "not yet available" but none, and the answer names the
	// registered one.
	kp := e.do(http.MethodGet, "/v1/clusters/edge/kubeconfig", tokSecrets, nil).wantProblem(t, http.StatusNotFound)
	if kp.Type != api.ProblemNotFound || !strings.Contains(kp.Detail, "external control plane") || !strings.Contains(kp.Detail, "registered as prod (spec.controlPlane.external.kubeconfig)") {
		t.Errorf("kubeconfig of an external cluster: %+v", kp)
	}
	e.do(http.MethodDelete, path, tokWrite, nil).wantProblem(t, http.StatusForbidden)
	if err := e.desired.Purge(context.Background(), keys.Cluster("edge")); err != nil {
		t.Fatal(err)
	}
	if r := e.do(http.MethodDelete, path, tokAdmin, nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	e.do(http.MethodDelete, path, tokAdmin, nil).wantProblem(t, http.StatusNotFound)
}
