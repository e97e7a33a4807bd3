package capnv1alpha1

import "strings"

// The enums of phases, states and condition statuses are the contract's
// words; records and the HTTP API keep them as strings ("Running"), as
// Kubernetes and Cluster API do, so a record written before the enums
// existed reads the same and protojson stays readable. This file maps
// each enum to its wire string and back, and gives Go short names and
// typed accessors: a renamed value is a compile error wherever it is used.

// Machine phases (MachineStatus.phase).
const (
	MachinePending       = MachinePhase_MACHINE_PHASE_PENDING
	MachineBootstrapping = MachinePhase_MACHINE_PHASE_BOOTSTRAPPING
	MachineProvisioning  = MachinePhase_MACHINE_PHASE_PROVISIONING
	MachineProvisioned   = MachinePhase_MACHINE_PHASE_PROVISIONED
	MachineRunning       = MachinePhase_MACHINE_PHASE_RUNNING
	MachineStopped       = MachinePhase_MACHINE_PHASE_STOPPED
	MachineDeleting      = MachinePhase_MACHINE_PHASE_DELETING
	MachineDeleted       = MachinePhase_MACHINE_PHASE_DELETED
	MachineFailed        = MachinePhase_MACHINE_PHASE_FAILED
)

// Cluster phases (ClusterStatus.phase).
const (
	ClusterPending      = ClusterPhase_CLUSTER_PHASE_PENDING
	ClusterProvisioning = ClusterPhase_CLUSTER_PHASE_PROVISIONING
	ClusterReady        = ClusterPhase_CLUSTER_PHASE_READY
	ClusterUpgrading    = ClusterPhase_CLUSTER_PHASE_UPGRADING
	ClusterScalingUp    = ClusterPhase_CLUSTER_PHASE_SCALING_UP
	ClusterScalingDown  = ClusterPhase_CLUSTER_PHASE_SCALING_DOWN
	ClusterDeleting     = ClusterPhase_CLUSTER_PHASE_DELETING
	ClusterFailed       = ClusterPhase_CLUSTER_PHASE_FAILED
	ClusterPaused       = ClusterPhase_CLUSTER_PHASE_PAUSED
	ClusterHibernating  = ClusterPhase_CLUSTER_PHASE_HIBERNATING
	ClusterHibernated   = ClusterPhase_CLUSTER_PHASE_HIBERNATED
	ClusterWaking       = ClusterPhase_CLUSTER_PHASE_WAKING
	ClusterDeleted      = ClusterPhase_CLUSTER_PHASE_DELETED
)

// Infrastructure states (InfraMachine.state).
const (
	InfraCreating = InfraState_INFRA_STATE_CREATING
	InfraRunning  = InfraState_INFRA_STATE_RUNNING
	InfraStopped  = InfraState_INFRA_STATE_STOPPED
	InfraDeleting = InfraState_INFRA_STATE_DELETING
	InfraDeleted  = InfraState_INFRA_STATE_DELETED
	InfraFailed   = InfraState_INFRA_STATE_FAILED
)

// Condition statuses (Condition.status, NodeCondition.status).
const (
	ConditionTrue    = ConditionStatus_CONDITION_STATUS_TRUE
	ConditionFalse   = ConditionStatus_CONDITION_STATUS_FALSE
	ConditionUnknown = ConditionStatus_CONDITION_STATUS_UNKNOWN
)

// Drain states (NodeDrain.state), in the order a drain goes through them.
const (
	// NodeDrainCordoned: the Node is unschedulable; no eviction yet.
	NodeDrainCordoned = "Cordoned"
	// NodeDrainEvicting: pods are being evicted or are terminating.
	NodeDrainEvicting = "Evicting"
	// NodeDrainDrained: no pod the drain moves is left on the Node.
	NodeDrainDrained = "Drained"
)

// Deletion policies (ObjectMeta.deletion_policy).
const (
	// DeletionOrphan lets go of what the object holds in the world without
	// touching it: machines keep running, providers only drop their
	// records (capn move).
	DeletionOrphan = "Orphan"
)

// Orphaning reports whether m is being deleted with the Orphan policy.
func (x *ObjectMeta) Orphaning() bool {
	return x.GetDeletionTimestamp() != nil && x.GetDeletionPolicy() == DeletionOrphan
}

var (
	machinePhases     = newWire[MachinePhase](MachinePhase_name)
	clusterPhases     = newWire[ClusterPhase](ClusterPhase_name)
	infraStates       = newWire[InfraState](InfraState_name)
	conditionStatuses = newWire[ConditionStatus](ConditionStatus_name)
)

// Wire is the phase as records hold it: "Running"; "" for UNSPECIFIED.
func (p MachinePhase) Wire() string { return machinePhases.str[p] }

// Wire is the phase as records hold it: "ScalingUp"; "" for UNSPECIFIED.
func (p ClusterPhase) Wire() string { return clusterPhases.str[p] }

// Wire is the state as records hold it: "Running"; "" for UNSPECIFIED.
func (s InfraState) Wire() string { return infraStates.str[s] }

// Wire is the status as records hold it: "True"; "" for UNSPECIFIED.
func (s ConditionStatus) Wire() string { return conditionStatuses.str[s] }

// MachinePhaseOf reads a wire string; an unknown one is UNSPECIFIED.
func MachinePhaseOf(s string) MachinePhase { return machinePhases.val[s] }

// ClusterPhaseOf reads a wire string; an unknown one is UNSPECIFIED.
func ClusterPhaseOf(s string) ClusterPhase { return clusterPhases.val[s] }

// InfraStateOf reads a wire string; an unknown one is UNSPECIFIED.
func InfraStateOf(s string) InfraState { return infraStates.val[s] }

// ConditionStatusOf reads a wire string; an unknown one is UNSPECIFIED.
func ConditionStatusOf(s string) ConditionStatus { return conditionStatuses.val[s] }

// GetPhaseValue is the machine's phase.
func (x *MachineStatus) GetPhaseValue() MachinePhase { return MachinePhaseOf(x.GetPhase()) }

// SetPhaseValue sets the machine's phase.
func (x *MachineStatus) SetPhaseValue(p MachinePhase) { x.Phase = p.Wire() }

// GetPhaseValue is the cluster's phase.
func (x *ClusterStatus) GetPhaseValue() ClusterPhase { return ClusterPhaseOf(x.GetPhase()) }

// SetPhaseValue sets the cluster's phase.
func (x *ClusterStatus) SetPhaseValue(p ClusterPhase) { x.Phase = p.Wire() }

// GetStateValue is the infrastructure's state.
func (x *InfraMachine) GetStateValue() InfraState { return InfraStateOf(x.GetState()) }

// SetStateValue sets the infrastructure's state.
func (x *InfraMachine) SetStateValue(s InfraState) { x.State = s.Wire() }

// GetStatusValue is the condition's status.
func (x *Condition) GetStatusValue() ConditionStatus { return ConditionStatusOf(x.GetStatus()) }

// GetStatusValue is the node condition's status.
func (x *NodeCondition) GetStatusValue() ConditionStatus { return ConditionStatusOf(x.GetStatus()) }

// wire maps an enum to its wire strings and back: a value's wire string is
// its name without the enum's prefix, in CamelCase (CLUSTER_PHASE_SCALING_UP
// is "ScalingUp"), and the zero value's is "".
type wire[E ~int32] struct {
	str map[E]string
	val map[string]E
}

func newWire[E ~int32](names map[int32]string) wire[E] {
	prefix := strings.TrimSuffix(names[0], "UNSPECIFIED")
	w := wire[E]{str: make(map[E]string, len(names)), val: make(map[string]E, len(names))}
	for n, name := range names {
		var s strings.Builder
		if n != 0 {
			for word := range strings.SplitSeq(strings.TrimPrefix(name, prefix), "_") {
				s.WriteString(word[:1] + strings.ToLower(word[1:]))
			}
		}
		w.str[E(n)], w.val[s.String()] = s.String(), E(n)
	}
	return w
}

// Control-plane implementations (ControlPlaneSpec.type, ControlPlaneRecord.implementation).
const (
	ControlPlaneMachines = "machines"
	ControlPlaneHosted   = "hosted"
	ControlPlaneExternal = "external"
)

// ControlPlaneTypes are the implementations a cluster may name, in the
// order errors list them.
var ControlPlaneTypes = []string{ControlPlaneMachines, ControlPlaneHosted, ControlPlaneExternal}

// Implementation is the control plane's implementation: its type, or
// "machines" when the type is empty.
func (x *ControlPlaneSpec) Implementation() string {
	if t := x.GetType(); t != "" {
		return t
	}
	return ControlPlaneMachines
}
