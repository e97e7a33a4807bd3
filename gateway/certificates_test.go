package gateway

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// A CA rotation replaces the cluster's CA and admin credentials: it needs
// write and secrets; a bad phase is refused naming until; a rotation under
// way answers 409 naming its phase; the answer is the rotation's status.
func TestRotateCARoute(t *testing.T) {
	e := newEnv(t)
	for _, tok := range []string{tokWrite, tokSecrets, tokRead} {
		p := e.do(http.MethodPost, "/v1/clusters/demo/rotate-ca", tok, nil).wantProblem(t, http.StatusForbidden)
		if !strings.Contains(p.Detail, "this request needs") {
			t.Errorf("%s: %q", tok, p.Detail)
		}
	}
	if p := e.do(http.MethodPost, "/v1/clusters/demo/rotate-ca", tokAdmin, nil).wantProblem(t, http.StatusServiceUnavailable); !strings.Contains(p.Detail, "the backup service is not running") {
		t.Errorf("without a backup service: %q", p.Detail)
	}
	e.do(http.MethodPost, "/v1/clusters/demo/rotate-ca", tokAdmin, `{"until":"trust"}`).wantProblem(t, http.StatusBadRequest, "until")
	e.do(http.MethodPost, "/v1/clusters/demo/rotate-ca", tokAdmin, `{"extra":1}`).wantProblem(t, http.StatusBadRequest)

	var mu sync.Mutex
	var got []*capnv1.CARotationRequest
	sub, err := e.nc.Subscribe(keys.BackupRequest("rotate-ca"), func(m *nats.Msg) {
		req := &capnv1.CARotationRequest{}
		_ = proto.Unmarshal(m.Data, req)
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		res := &capnv1.CARotationResult{Status: &capnv1.CARotationStatus{Phase: "TrustBoth", State: "Held"}}
		if req.GetContinue() {
			res = &capnv1.CARotationResult{Error: &capnv1.BackupError{Code: "conflict", Message: "a CA rotation of cluster demo is running now (phase Reissue)"}}
		}
		b, _ := proto.Marshal(res)
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	r := e.do(http.MethodPost, "/v1/clusters/demo/rotate-ca", tokAdmin, `{"until":"TrustBoth"}`)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"phase":"TrustBoth"`) || !strings.Contains(string(r.body), `"state":"Held"`) {
		t.Errorf("rotate until TrustBoth: %d %s", r.status, r.body)
	}
	if p := e.do(http.MethodPost, "/v1/clusters/demo/rotate-ca", tokAdmin, `{"continue":true}`).wantProblem(t, http.StatusConflict); !strings.Contains(p.Detail, "phase Reissue") {
		t.Errorf("a rotation under way: %q", p.Detail)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0].GetCluster() != "demo" || got[0].GetUntil() != "TrustBoth" || got[0].GetRequestedBy() == "" || !got[1].GetContinue() {
		t.Errorf("requests the backup service got: %v", got)
	}
}
