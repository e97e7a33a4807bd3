package gateway

import (
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

const versionsYAML = `apiVersion: capn.dev/v1alpha1
kind: KubernetesVersions
metadata: {name: default}
spec:
  versions:
  - {version: v1.34.2, classification: deprecated}
  - {version: v1.34.5, classification: supported}
  - {version: v1.35.0, classification: preview}
`

// The version catalogue through the API: PUT creates (201) and replaces
// (200, generation bumped), GET reads it, every bad field is a 422 or 400
// with its path and nothing is written, a reader may not write it.
func TestKubernetesVersionsAPI(t *testing.T) {
	e := newEnv(t)
	get := func() *capnv1.KubernetesVersions {
		t.Helper()
		r := e.do(http.MethodGet, "/v1/kubernetesversions/default", tokRead, nil)
		if r.status != http.StatusOK {
			t.Fatalf("get: %d %s", r.status, r.body)
		}
		kv := new(capnv1.KubernetesVersions)
		if err := protojson.Unmarshal(r.body, kv); err != nil {
			t.Fatal(err)
		}
		return kv
	}
	if r := e.do(http.MethodGet, "/v1/kubernetesversions/default", tokRead, nil); r.status != http.StatusNotFound {
		t.Fatalf("get before create: %d", r.status)
	}
	if r := e.do(http.MethodPut, "/v1/kubernetesversions/default", tokWrite, versionsYAML, "Content-Type", api.MediaYAML); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	kv := get()
	if len(kv.GetSpec().GetVersions()) != 3 || kv.GetMetadata().GetGeneration() != 1 || kv.GetMetadata().GetUid() == "" {
		t.Errorf("stored %v", kv)
	}
	bad := strings.Replace(versionsYAML, "classification: preview", "classification: stable", 1)
	bad = strings.Replace(bad, "v1.34.2", "1.34.2", 1)
	r := e.do(http.MethodPut, "/v1/kubernetesversions/default", tokWrite, bad, "Content-Type", api.MediaYAML)
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "spec.versions[0].version") || !strings.Contains(string(r.body), "spec.versions[2].classification") {
		t.Errorf("bad catalogue: %d %s", r.status, r.body)
	}
	r = e.do(http.MethodPut, "/v1/kubernetesversions/default", tokWrite, strings.Replace(versionsYAML, "version: v1.34.5", "versoin: v1.34.5", 1), "Content-Type", api.MediaYAML)
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "versoin") {
		t.Errorf("unknown field: %d %s", r.status, r.body)
	}
	if r := e.do(http.MethodPut, "/v1/kubernetesversions/default", tokRead, versionsYAML, "Content-Type", api.MediaYAML); r.status != http.StatusForbidden {
		t.Errorf("reader wrote: %d", r.status)
	}
	if got := get(); got.GetMetadata().GetGeneration() != 1 || len(got.GetSpec().GetVersions()) != 3 {
		t.Fatalf("a refused write changed the catalogue: %v", got)
	}
	more := versionsYAML + "  - {version: v1.34.6}\n"
	if r := e.do(http.MethodPut, "/v1/kubernetesversions/default", tokWrite, more, "Content-Type", api.MediaYAML); r.status != http.StatusOK {
		t.Fatalf("replace: %d %s", r.status, r.body)
	}
	if got := get(); got.GetMetadata().GetGeneration() != 2 || len(got.GetSpec().GetVersions()) != 4 {
		t.Errorf("replaced: %v", got)
	}
	if r := e.do(http.MethodPut, "/v1/kubernetesversions/other", tokWrite, versionsYAML, "Content-Type", api.MediaYAML); r.status != http.StatusBadRequest {
		t.Errorf("name mismatch: %d %s", r.status, r.body)
	}
}
