package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/schemas/keys"
)

// autoscaledYAML is demoYAML with md-0 autoscaled and its replicas left
// out; bounds replaces the autoscaling's.
func autoscaledYAML(bounds string) string {
	return strings.Replace(demoYAML, "{name: md-0, provider: sim, replicas: 2}",
		"{name: md-0, provider: sim, autoscaling: "+bounds+"}", 1)
}

// TestApplyAutoscaledPool: an autoscaled pool's replicas are the
// autoscaler's. An apply that leaves them out keeps them (min on create),
// moved into new bounds; an apply or a scale that changes them is refused
// with the field and the reason; turning autoscaling off gives them back.
func TestApplyAutoscaledPool(t *testing.T) {
	e := newEnv(t)
	replicas := func() int32 {
		t.Helper()
		c, _, err := e.clusters.Get(context.Background(), keys.Cluster("demo"))
		if err != nil {
			t.Fatal(err)
		}
		return c.GetSpec().GetWorkerPools()[0].GetReplicas()
	}
	if got := e.apply(autoscaledYAML("{min: 2, max: 5}")); got.GetSpec().GetWorkerPools()[0].GetReplicas() != 2 {
		t.Fatalf("created with replicas %d, want min 2", got.GetSpec().GetWorkerPools()[0].GetReplicas())
	}

	// The autoscaler-provider scales md-0 to 4.
	c, rev, err := e.clusters.Get(context.Background(), keys.Cluster("demo"))
	if err != nil {
		t.Fatal(err)
	}
	c.Spec.WorkerPools[0].Replicas = 4
	if _, err := e.clusters.Update(context.Background(), keys.Cluster("demo"), c, rev); err != nil {
		t.Fatal(err)
	}

	e.apply(autoscaledYAML("{min: 2, max: 5}"))
	if got := replicas(); got != 4 {
		t.Errorf("re-apply without replicas: %d, want the autoscaler's 4", got)
	}
	before := e.lastSeq(e.desired)
	p := e.do(http.MethodPost, "/v1/clusters", tokAdmin,
		strings.Replace(autoscaledYAML("{min: 2, max: 5}"), "autoscaling:", "replicas: 3, autoscaling:", 1), "Content-Type", api.MediaYAML).
		wantProblem(t, http.StatusUnprocessableEntity, "spec.workerPools[0].replicas")
	if !strings.Contains(p.Detail+p.Errors[0].Reason, "belong to the cluster autoscaler") {
		t.Errorf("problem does not say whose the replicas are: %+v", p)
	}
	e.do(http.MethodPost, "/v1/clusters/demo/scale", tokWrite, `{"pool":"md-0","replicas":1}`).
		wantProblem(t, http.StatusUnprocessableEntity, "spec.workerPools[0].replicas")
	if e.lastSeq(e.desired) != before {
		t.Error("a refused change wrote the desired bucket")
	}
	if got := replicas(); got != 4 {
		t.Errorf("after refused changes: %d, want 4", got)
	}

	e.apply(autoscaledYAML("{min: 1, max: 3}"))
	if got := replicas(); got != 3 {
		t.Errorf("max lowered to 3: replicas %d, want 3", got)
	}
	e.apply(demoYAML) // autoscaling off: replicas are the user's again
	if got := replicas(); got != 2 {
		t.Errorf("autoscaling removed, replicas 2 given: %d", got)
	}
	e.do(http.MethodPost, "/v1/clusters", tokAdmin, autoscaledYAML("{min: 3, max: 2}"), "Content-Type", api.MediaYAML).
		wantProblem(t, http.StatusUnprocessableEntity, "spec.workerPools[0].autoscaling.max")
}
