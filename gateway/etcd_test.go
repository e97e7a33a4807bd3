package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// An etcd snapshot holds every Secret of its cluster: taking one needs
// secrets, a restore secrets and write; without a backup service the
// routes answer 503, and a bad request is refused naming the field.
func TestEtcdRoutesNeedTheirScopes(t *testing.T) {
	e := newEnv(t)
	for _, tt := range []struct {
		method, path, token string
	}{
		{http.MethodPost, "/v1/clusters/demo/etcd-snapshots", tokWrite},
		{http.MethodPost, "/v1/clusters/demo/etcd-snapshots", tokRead},
		{http.MethodPost, "/v1/clusters/demo/etcd-restores", tokSecrets},
		{http.MethodPost, "/v1/clusters/demo/etcd-restores", tokWrite},
	} {
		p := e.do(tt.method, tt.path, tt.token, nil).wantProblem(t, http.StatusForbidden)
		if !strings.Contains(p.Detail, "this request needs") {
			t.Errorf("%s %s: %q", tt.method, tt.path, p.Detail)
		}
	}
	// Listing is read: names, sizes, revisions; here no backup service answers.
	if p := e.do(http.MethodGet, "/v1/clusters/demo/etcd-snapshots", tokRead, nil).wantProblem(t, http.StatusServiceUnavailable); !strings.Contains(p.Detail, "the backup service is not running") {
		t.Errorf("list without a backup service: %q", p.Detail)
	}
	e.do(http.MethodPost, "/v1/clusters/demo/etcd-snapshots", tokSecrets, nil).wantProblem(t, http.StatusServiceUnavailable)
	e.do(http.MethodPost, "/v1/clusters/Bad_Name/etcd-snapshots", tokSecrets, nil).wantProblem(t, http.StatusBadRequest, "name")
	e.do(http.MethodPost, "/v1/clusters/demo/etcd-restores", tokAdmin, `{}`).wantProblem(t, http.StatusBadRequest, "snapshot")
	e.do(http.MethodPost, "/v1/clusters/demo/etcd-restores", tokAdmin, `{"snapshot":"s","extra":1}`).wantProblem(t, http.StatusBadRequest)
}
