package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

const cniYAML = `apiVersion: capn.dev/v1alpha1
kind: AddonSet
metadata:
  name: cni
  labels: {kind: network}
spec:
  clusterSelector:
    matchLabels: {cni: demo}
  blocking: true
  mode: Reconcile
  manifests:
  - name: config
    yaml: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: cni-config, namespace: kube-system}
      data: {mtu: "1450"}
`

func (r resp) addonSet(t *testing.T) *capnv1.AddonSet {
	t.Helper()
	s := new(capnv1.AddonSet)
	if err := protojson.Unmarshal(r.body, s); err != nil {
		t.Fatalf("add-on set body %s: %v", r.body, err)
	}
	return s
}

// Add-on sets through the API: apply creates (defaulted, generation 1,
// uid), an unchanged apply writes nothing, a changed spec bumps the
// generation, a stale resourceVersion is a 409, every bad field a 422 or
// 400 with its path (an inline manifest's documents included) and nothing
// written; GET shows the addon-manager's records as the status; DELETE
// removes the set.
func TestAddonSetsAPI(t *testing.T) {
	e := newEnv(t)
	r := e.do(http.MethodPost, "/v1/addonsets", tokWrite, cniYAML, "Content-Type", api.MediaYAML)
	if r.status != http.StatusCreated || r.header.Get("Location") != "/v1/addonsets/cni" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	s := r.addonSet(t)
	if md := s.GetMetadata(); md.GetGeneration() != 1 || md.GetUid() == "" || md.GetResourceVersion() == "" || md.GetCreationTimestamp() == nil {
		t.Errorf("metadata %v", md)
	}
	if sp := s.GetSpec(); sp.GetOnRemove() != "Leave" || sp.GetReconcileInterval().AsDuration().String() != "1m0s" {
		t.Errorf("defaults %v", sp)
	}
	seq := e.lastSeq(e.desired)
	if r := e.do(http.MethodPost, "/v1/addonsets", tokWrite, cniYAML); r.status != http.StatusOK || r.addonSet(t).GetMetadata().GetGeneration() != 1 {
		t.Fatalf("unchanged apply: %d %s", r.status, r.body)
	}
	if e.lastSeq(e.desired) != seq {
		t.Error("an unchanged apply wrote")
	}
	changed := strings.Replace(cniYAML, `"1450"`, `"9000"`, 1)
	r = e.do(http.MethodPut, "/v1/addonsets/cni", tokWrite, changed)
	if r.status != http.StatusOK || r.addonSet(t).GetMetadata().GetGeneration() != 2 {
		t.Fatalf("changed: %d %s", r.status, r.body)
	}
	stale := strings.Replace(cniYAML, "name: cni\n", "name: cni\n  resourceVersion: \""+s.GetMetadata().GetResourceVersion()+"\"\n", 1)
	e.do(http.MethodPost, "/v1/addonsets", tokWrite, stale).wantProblem(t, http.StatusConflict)

	// Refusals, nothing written.
	seq = e.lastSeq(e.desired)
	bad := strings.Replace(strings.Replace(cniYAML, "mode: Reconcile", "mode: Always", 1), "metadata: {name: cni-config, namespace: kube-system}", "metadata: {namespace: kube-system}", 1)
	p := e.do(http.MethodPost, "/v1/addonsets", tokWrite, bad).wantProblem(t, http.StatusUnprocessableEntity, "spec.mode", "spec.manifests[0].yaml")
	if !strings.Contains(string(e.do(http.MethodPost, "/v1/addonsets", tokWrite, bad).body), "document 1: metadata.name: required") {
		t.Errorf("the manifest's document is not named: %+v", p)
	}
	e.do(http.MethodPost, "/v1/addonsets", tokWrite, strings.Replace(cniYAML, "blocking: true", "blockng: true", 1)).
		wantProblem(t, http.StatusBadRequest, "spec.blockng")
	e.do(http.MethodPut, "/v1/addonsets/other", tokWrite, cniYAML).wantProblem(t, http.StatusBadRequest, "metadata.name")
	e.do(http.MethodPost, "/v1/addonsets", tokRead, cniYAML).wantProblem(t, http.StatusForbidden)
	if e.lastSeq(e.desired) != seq {
		t.Error("a refused apply wrote")
	}
	// A cluster manifest's endpoint says where a set goes.
	if r := e.do(http.MethodPost, "/v1/clusters", tokWrite, cniYAML); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "/v1/addonsets") {
		t.Errorf("a set posted as a cluster: %d %s", r.status, r.body)
	}

	// The addon-manager's records are the status; GET /v1/clusters/{c}/addons lists a cluster's.
	rec := &capnv1.ClusterAddonStatus{Cluster: "demo", AddonSet: "cni", AppliedGeneration: 2, Blocking: true,
		Conditions: []*capnv1.Condition{{Type: "Applied", Status: "True", Reason: "Applied"}}}
	e.put(e.observed, keys.Addon("demo", "cni"), rec)
	e.put(e.observed, keys.Addon("other", "cni"), &capnv1.ClusterAddonStatus{Cluster: "other", AddonSet: "cni"})
	got := e.do(http.MethodGet, "/v1/addonsets/cni", tokRead, nil).addonSet(t)
	if cs := got.GetStatus().GetClusters(); len(cs) != 2 || cs[0].GetCluster() != "demo" || cs[0].GetAppliedGeneration() != 2 {
		t.Errorf("status %v", got.GetStatus())
	}
	var list api.List
	r = e.do(http.MethodGet, "/v1/addonsets?labelSelector=kind%3Dnetwork", tokRead, nil)
	if err := json.Unmarshal(r.body, &list); err != nil || list.Kind != api.KindAddonSetList || len(list.Items) != 1 {
		t.Fatalf("list: %s %v", r.body, err)
	}
	r = e.do(http.MethodGet, "/v1/clusters/demo/addons", tokRead, nil)
	if err := json.Unmarshal(r.body, &list); err != nil || list.Kind != api.KindClusterAddonStatusList || len(list.Items) != 1 {
		t.Fatalf("cluster addons: %s %v", r.body, err)
	}

	if r := e.do(http.MethodDelete, "/v1/addonsets/cni", tokWrite, nil); r.status != http.StatusOK {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	e.do(http.MethodGet, "/v1/addonsets/cni", tokRead, nil).wantProblem(t, http.StatusNotFound)
	e.do(http.MethodDelete, "/v1/addonsets/cni", tokWrite, nil).wantProblem(t, http.StatusNotFound)
}

// Add-on secrets: sealed in the secrets bucket (the stored value is not
// the YAML), written only with the write and secrets scopes, checked as
// an inline manifest is, never given back.
func TestAddonSecretsAPI(t *testing.T) {
	e := newEnv(t)
	const creds = "apiVersion: v1\nkind: Secret\nmetadata: {name: cloud, namespace: kube-system}\nstringData: {token: s3cret}\n"
	e.do(http.MethodPut, "/v1/addonsecrets/creds", tokWrite, creds).wantProblem(t, http.StatusForbidden)
	e.do(http.MethodPut, "/v1/addonsecrets/creds", tokSecrets, creds).wantProblem(t, http.StatusForbidden)
	r := e.do(http.MethodPut, "/v1/addonsecrets/creds", tokAdmin, creds)
	var info api.AddonSecretInfo
	if err := json.Unmarshal(r.body, &info); r.status != http.StatusCreated || err != nil || info.Hash == "" || info.Objects != 1 {
		t.Fatalf("put: %d %s %v", r.status, r.body, err)
	}
	if strings.Contains(string(r.body), "s3cret") {
		t.Error("the answer holds the content")
	}
	raw, err := e.secrets.Get(context.Background(), keys.AddonSecret("creds"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw.Value()), "s3cret") {
		t.Fatal("the add-on secret is stored in the clear")
	}
	sealed := store.NewBucket(e.secrets, store.New[capnv1.AddonSecret](), store.WithSealer(e.ring))
	if sec, _, err := sealed.Get(context.Background(), keys.AddonSecret("creds")); err != nil || sec.GetYaml() != creds || sec.GetHash() != info.Hash {
		t.Fatalf("unsealed: %v %v", sec, err)
	}
	if r := e.do(http.MethodPut, "/v1/addonsecrets/creds", tokAdmin, creds); r.status != http.StatusOK {
		t.Errorf("the same content again: %d", r.status)
	}
	e.do(http.MethodPut, "/v1/addonsecrets/creds", tokAdmin, "kind: Secret\n").wantProblem(t, http.StatusUnprocessableEntity, "(body)")
	e.do(http.MethodPut, "/v1/addonsecrets/Bad_Name", tokAdmin, creds).wantProblem(t, http.StatusBadRequest, "name")
	if r := e.do(http.MethodDelete, "/v1/addonsecrets/creds", tokAdmin, nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	e.do(http.MethodDelete, "/v1/addonsecrets/creds", tokAdmin, nil).wantProblem(t, http.StatusNotFound)
}

// Bootstrap secrets: sealed in the secrets bucket, written only with the
// write and secrets scopes, keys checked (422 naming data["key"]), the
// values never given back, deleted.
func TestBootstrapSecretsAPI(t *testing.T) {
	e := newEnv(t)
	const body = `{"data": {"token": "czNjcmV0LXRva2Vu", "ca.crt": "Y2E="}}` // s3cret-token, ca
	e.do(http.MethodPut, "/v1/bootstrapsecrets/registry", tokWrite, body).wantProblem(t, http.StatusForbidden)
	e.do(http.MethodPut, "/v1/bootstrapsecrets/registry", tokSecrets, body).wantProblem(t, http.StatusForbidden)
	r := e.do(http.MethodPut, "/v1/bootstrapsecrets/registry", tokAdmin, body, "Content-Type", api.MediaJSON)
	var info api.BootstrapSecretInfo
	if err := json.Unmarshal(r.body, &info); r.status != http.StatusCreated || err != nil || info.Hash == "" || strings.Join(info.Keys, ",") != "ca.crt,token" {
		t.Fatalf("put: %d %s %v", r.status, r.body, err)
	}
	if strings.Contains(string(r.body), "czNjcmV0") || strings.Contains(string(r.body), "s3cret") {
		t.Error("the answer holds a value")
	}
	raw, err := e.secrets.Get(context.Background(), keys.BootstrapSecret("registry"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw.Value()), "s3cret-token") {
		t.Fatal("the bootstrap secret is stored in the clear")
	}
	sealed := store.NewBucket(e.secrets, store.New[capnv1.BootstrapSecret](), store.WithSealer(e.ring))
	if sec, _, err := sealed.Get(context.Background(), keys.BootstrapSecret("registry")); err != nil || string(sec.GetData()["token"]) != "s3cret-token" || sec.GetHash() != info.Hash {
		t.Fatalf("unsealed: %v %v", sec, err)
	}
	if r := e.do(http.MethodPut, "/v1/bootstrapsecrets/registry", tokAdmin, body); r.status != http.StatusOK {
		t.Errorf("the same data again: %d", r.status)
	}
	e.do(http.MethodPut, "/v1/bootstrapsecrets/registry", tokAdmin, `{"data": {"a/b": "eA==", "ok": "eA=="}}`).
		wantProblem(t, http.StatusUnprocessableEntity, `data["a/b"]`)
	e.do(http.MethodPut, "/v1/bootstrapsecrets/registry", tokAdmin, `{"data": {}}`).wantProblem(t, http.StatusUnprocessableEntity, "data")
	e.do(http.MethodPut, "/v1/bootstrapsecrets/registry", tokAdmin, `{"token": "x"}`).wantProblem(t, http.StatusBadRequest)
	e.do(http.MethodPut, "/v1/bootstrapsecrets/Bad_Name", tokAdmin, body).wantProblem(t, http.StatusBadRequest, "name")
	if sec, _, err := sealed.Get(context.Background(), keys.BootstrapSecret("registry")); err != nil || len(sec.GetData()) != 2 {
		t.Fatalf("a refused put changed the secret: %v %v", sec, err)
	}
	if r := e.do(http.MethodDelete, "/v1/bootstrapsecrets/registry", tokAdmin, nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	e.do(http.MethodDelete, "/v1/bootstrapsecrets/registry", tokAdmin, nil).wantProblem(t, http.StatusNotFound)
}
