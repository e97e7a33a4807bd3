package remediator

import (
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
)

// Remediation actions (RemediationRecord.action) and outcomes.
const (
	ActionReboot  = "reboot"
	ActionReplace = "replace"

	OutcomeInProgress = "InProgress"
	OutcomeSucceeded  = "Succeeded"
	OutcomeFailed     = "Failed"
)

// AnnotationSkipRemediation on a desired machine keeps the remediator's
// hands off it (it still counts toward the pool's unhealthy machines).
const AnnotationSkipRemediation = "capn.dev/skip-remediation"

// CapabilityReboot in a provider's announcement says it can reboot.
const CapabilityReboot = "reboot"

// Snapshot is everything Decide looks at for one cluster.
type Snapshot struct {
	Cluster string
	// Paused: the cluster's spec.paused — nothing is done.
	Paused bool
	// ControlPlaneInitialized: before it, control-plane quorum is not
	// protected (there is no etcd to protect yet), as KubeadmControlPlane.
	ControlPlaneInitialized bool
	Pools                   []Pool
	Now                     time.Time
}

// Pool is the control plane or one worker pool.
type Pool struct {
	Name         string
	ControlPlane bool
	// Replicas the pool should have.
	Replicas int
	Policy   policy.Policy
	Machines []Machine
	// Status is the remediation status last written (nil: none).
	Status *capnv1.RemediationStatus
}

// Machine is one desired machine of a pool, with what is observed of it.
type Machine struct {
	Name     string
	UID      string
	Provider string
	// Created is when this incarnation was created: machine names are
	// reused when a slot is refilled.
	Created time.Time
	// Deleting: deletion was requested (by anyone).
	Deleting bool
	// Phase is the machine-manager's observed phase.
	Phase capnv1.MachinePhase
	// Skip: annotated capn.dev/skip-remediation.
	Skip bool
	// Reasons are the health-watcher's unhealthy reasons (none: healthy);
	// Since when the episode began; HealthUpdated when the verdict was
	// written. All of this incarnation only.
	Reasons       []*capnv1.Condition
	Since         time.Time
	HealthUpdated time.Time
	// CanReboot: its provider announced the reboot capability.
	CanReboot bool
}

// unhealthy: the health-watcher judged it so, or the machine failed.
func (m Machine) unhealthy() bool { return len(m.Reasons) > 0 || m.Phase == capnv1.MachineFailed }

// healthy: running and judged healthy.
func (m Machine) healthy() bool {
	return !m.Deleting && m.Phase == capnv1.MachineRunning && len(m.Reasons) == 0
}
