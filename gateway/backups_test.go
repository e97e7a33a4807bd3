package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/gateway/api"
)

// A backup holds every cluster's sealed secrets: taking or downloading one
// needs the secrets scope, restoring one secrets and write. (The attack
// with a backup service behind the gateway: tests/security.)
func TestBackupRoutesNeedTheirScopes(t *testing.T) {
	e := newEnv(t)
	for _, tt := range []struct {
		method, path, token string
	}{
		{http.MethodPost, "/v1/backups", tokWrite},
		{http.MethodPost, "/v1/backups", tokRead},
		{http.MethodGet, "/v1/backups/20260101T000000.000Z-api", tokWrite},
		{http.MethodPost, "/v1/restores", tokSecrets},
		{http.MethodPost, "/v1/restores", tokWrite},
	} {
		p := e.do(tt.method, tt.path, tt.token, nil).wantProblem(t, http.StatusForbidden)
		if !strings.Contains(p.Detail, "this request needs") {
			t.Errorf("%s %s: %q", tt.method, tt.path, p.Detail)
		}
	}
	// Listing shows names and manifests, no file: read is enough.
	if r := e.do(http.MethodGet, "/v1/backups", tokRead, nil); r.status != http.StatusOK || !strings.Contains(string(r.body), `"items":[]`) {
		t.Errorf("list: %d %s", r.status, r.body)
	}
}

func TestBackupWithoutTheBackupService(t *testing.T) {
	e := newEnv(t)
	p := e.do(http.MethodPost, "/v1/backups", tokSecrets, nil).wantProblem(t, http.StatusServiceUnavailable)
	if !strings.Contains(p.Detail, "the backup service is not running") {
		t.Errorf("detail %q", p.Detail)
	}
	e.do(http.MethodPost, "/v1/backups", tokSecrets, `{"clusters":["Not A Name"]}`).wantProblem(t, http.StatusBadRequest, "clusters[0]")
	e.do(http.MethodPost, "/v1/backups", tokSecrets, `{"trigger":"cron"}`).wantProblem(t, http.StatusBadRequest, "trigger")
	e.do(http.MethodPost, "/v1/backups", tokSecrets, `{"cluster":["a"]}`).wantProblem(t, http.StatusBadRequest)
	e.do(http.MethodGet, "/v1/backups/nope", tokSecrets, nil).wantProblem(t, http.StatusNotFound)
	e.do(http.MethodGet, "/v1/backups/upload-x", tokSecrets, nil).wantProblem(t, http.StatusNotFound)
}

// A file that is not a valid backup is refused before anything is
// uploaded or written, saying what is wrong.
func TestRestoreRefusesABadRequest(t *testing.T) {
	e := newEnv(t)
	ct := func(v string) []string { return []string{"Content-Type", v} }
	p := e.do(http.MethodPost, "/v1/restores", tokAdmin, "capn-backup/1\n{\"format\":\"capn-backup/1\",\"schema\":\"capn.v1alpha1\",\"entriesBytes\":\"99\"}\nxx", ct(api.MediaBackup)...).
		wantProblem(t, http.StatusUnprocessableEntity, "file")
	if p.Type != api.ProblemInvalidBackup || !strings.Contains(p.Errors[0].Reason, "truncated: the manifest counts 99 bytes of entries") {
		t.Errorf("problem %+v", p)
	}
	e.do(http.MethodPost, "/v1/restores", tokAdmin, "a: b", ct("text/plain")...).wantProblem(t, http.StatusUnsupportedMediaType)
	e.do(http.MethodPost, "/v1/restores?merge=yes", tokAdmin, "x", ct(api.MediaBackup)...).wantProblem(t, http.StatusBadRequest, api.ParamMerge)
	e.do(http.MethodPost, "/v1/restores?adoptWait=1h", tokAdmin, "x", ct(api.MediaBackup)...).wantProblem(t, http.StatusBadRequest, api.ParamAdoptWait)
	e.do(http.MethodPost, "/v1/restores?clusters=a,B", tokAdmin, "x", ct(api.MediaBackup)...).wantProblem(t, http.StatusBadRequest, api.ParamClusters)
	objects, err := e.js.ObjectStore(context.Background(), events.ObjectBackups)
	if err != nil {
		t.Fatal(err)
	}
	if infos, err := objects.List(context.Background()); !errors.Is(err, jetstream.ErrNoObjectsFound) {
		t.Errorf("refused restores uploaded %d objects (%v)", len(infos), err)
	}
}
