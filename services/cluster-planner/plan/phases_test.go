package plan_test

import (
	"testing"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
)

// TestPhaseStrings holds the wire-string phases plantest still uses equal to
// the schema's enums, until they go.
func TestPhaseStrings(t *testing.T) {
	tests := []struct{ got, want string }{
		{plan.PhasePending, capnv1.MachinePending.Wire()}, {plan.PhaseBootstrapping, capnv1.MachineBootstrapping.Wire()},
		{plan.PhaseProvisioning, capnv1.MachineProvisioning.Wire()}, {plan.PhaseProvisioned, capnv1.MachineProvisioned.Wire()},
		{plan.PhaseRunning, capnv1.MachineRunning.Wire()}, {plan.PhaseStopped, capnv1.MachineStopped.Wire()},
		{plan.PhaseDeleting, capnv1.MachineDeleting.Wire()}, {plan.PhaseDeleted, capnv1.MachineDeleted.Wire()},
		{plan.PhaseFailed, capnv1.MachineFailed.Wire()},
		{plan.ClusterPending, capnv1.ClusterPending.Wire()}, {plan.ClusterProvisioning, capnv1.ClusterProvisioning.Wire()},
		{plan.ClusterReady, capnv1.ClusterReady.Wire()}, {plan.ClusterUpgrading, capnv1.ClusterUpgrading.Wire()},
		{plan.ClusterScalingUp, capnv1.ClusterScalingUp.Wire()}, {plan.ClusterScalingDown, capnv1.ClusterScalingDown.Wire()},
		{plan.ClusterDeleting, capnv1.ClusterDeleting.Wire()}, {plan.ClusterFailed, capnv1.ClusterFailed.Wire()},
		{plan.ClusterPaused, capnv1.ClusterPaused.Wire()}, {plan.ClusterHibernating, capnv1.ClusterHibernating.Wire()},
		{plan.ClusterHibernated, capnv1.ClusterHibernated.Wire()}, {plan.ClusterWaking, capnv1.ClusterWaking.Wire()},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("plan has %q, the schema %q", tt.got, tt.want)
		}
	}
}
