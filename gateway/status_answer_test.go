package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// TestApplyAnswersWithStatus: POST /v1/clusters answers with a status, as
// docs/api.md shows: Pending (and no observedGeneration) before the
// cluster-planner has looked at the cluster, the observed one after.
func TestApplyAnswersWithStatus(t *testing.T) {
	e := newEnv(t)
	r := e.do(http.MethodPost, "/v1/clusters", tokWrite, demoYAML, "Content-Type", api.MediaYAML)
	if r.status != http.StatusCreated || !strings.Contains(string(r.body), `"status":{"phase":"Pending"}`) {
		t.Fatalf("create: %d %s: want a status with phase Pending", r.status, r.body)
	}
	if st := e.do(http.MethodGet, "/v1/clusters/demo", tokRead, nil).cluster(t).GetStatus(); st.GetPhase() != "Pending" {
		t.Errorf("GET before any observed status: status %v, want phase Pending", st)
	}
	e.put(e.observed, "cluster.demo", &capnv1.ClusterStatus{Phase: "Provisioning", ObservedGeneration: 1})
	c := e.apply(strings.Replace(demoYAML, "replicas: 2}", "replicas: 3}", 1))
	if c.GetStatus().GetPhase() != "Provisioning" || c.GetStatus().GetObservedGeneration() != 1 || c.GetMetadata().GetGeneration() != 2 {
		t.Errorf("update: status %v at generation %d, want the observed status (Provisioning, of generation 1)", c.GetStatus(), c.GetMetadata().GetGeneration())
	}
	r = e.do(http.MethodDelete, "/v1/clusters/other", tokWrite, nil)
	r.wantProblem(t, http.StatusNotFound)
	e.apply(manifestNamed("gone", "{}"))
	if st := e.do(http.MethodDelete, "/v1/clusters/gone", tokWrite, nil).cluster(t).GetStatus(); st.GetPhase() != "Deleting" {
		t.Errorf("delete before any observed status: status %v, want phase Deleting", st)
	}
}
