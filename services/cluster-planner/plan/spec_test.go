package plan_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
)

// TestPlanTrustsTheCheckedSpec: Plan plans Input.Spec as the caller
// checked it and does not validate again. The same stored cluster is
// refused or planned by the caller's verdict alone (Input.Validator,
// which would say otherwise, is not used when Spec is given), and the
// stored cluster is not modified.
func TestPlanTrustsTheCheckedSpec(t *testing.T) {
	stored := cluster(1, 3)
	orig := proto.CloneOf(stored)
	tests := []struct {
		name      string
		validator manifest.Validator // the caller's, making Spec
		wantPhase string
	}{
		{"caller's bounds refuse it", manifest.Validator{MaxPoolReplicas: 2}, "Failed"},
		{"caller's bounds allow it", manifest.Validator{}, "Provisioning"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := plan.Input{
				Cluster: stored,
				Spec:    tt.validator.Check(proto.CloneOf(stored)),
				Status:  &capnv1.ClusterStatus{ControlPlaneInitialized: true},
				Now:     time.Unix(0, 0),
				// Would refuse everything, were it used.
				Validator: manifest.Validator{MaxPoolReplicas: 1, MaxClusterReplicas: 1},
			}
			r := plan.Plan(in)
			if got := r.Status.GetPhase(); got != tt.wantPhase {
				t.Errorf("phase %s, want %s (%s)", got, tt.wantPhase, r.PhaseMessage)
			}
			if tt.wantPhase == "Failed" && !strings.Contains(conditionMessage(r.Status, plan.ConditionReady), "spec.workerPools[0].replicas") {
				t.Errorf("Ready does not name the field: %v", r.Status.GetConditions())
			}
			if !proto.Equal(stored, orig) {
				t.Errorf("Plan changed its input cluster")
			}
		})
	}
}

func conditionMessage(st *capnv1.ClusterStatus, typ string) string {
	for _, c := range st.GetConditions() {
		if c.GetType() == typ {
			return c.GetMessage()
		}
	}
	return ""
}
