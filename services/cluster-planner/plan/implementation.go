package plan

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
)

// The control-plane contract (docs/architecture.md, Control-plane
// contract): a cluster whose spec.controlPlane.type is not machines has its
// control plane made by an implementation service, which the planner asks
// with EnsureControlPlane and DeleteControlPlane and reads back through
// the record (Input.ControlPlane). The machines implementation is the
// planner itself; it writes the same record (Result.ControlPlaneRecord).

// Reasons of the conditions of a cluster whose control plane is an
// implementation's.
const (
	// ControlPlaneInitialized: the implementation has not reported the
	// control plane initialized yet.
	ReasonWaitingForImplementation = "WaitingForImplementation"
	// ControlPlaneReady: no record yet, or one without a Ready condition.
	ReasonNoControlPlaneRecord = "NoControlPlaneRecord"
	ReasonReadyUnknown         = "ReadyUnknown"
	// ControlPlaneReady: the record answers an older revision of the
	// desired cluster (the implementation is still making the change).
	ReasonControlPlaneUpdating = "ControlPlaneUpdating"
	// Deleting: the implementation is removing the control plane.
	ReasonDeletingImplementation = "DeletingControlPlaneImplementation"
)

// EnsureControlPlane sends capn.controlplane.<implementation>.ensure.<cluster>:
// the implementation makes the control plane the desired cluster asks for.
// Planned while the record is missing or answers an older revision.
type EnsureControlPlane struct {
	Implementation string
	Command        *capnv1.ControlPlaneCommand
}

// DeleteControlPlane sends capn.controlplane.<implementation>.delete.<cluster>:
// the implementation removes what it made and then its record. Planned on
// deletion once the workers are gone, until the record is gone.
type DeleteControlPlane struct {
	Implementation string
	Command        *capnv1.ControlPlaneCommand
}

func (EnsureControlPlane) kind() string { return "cp_ensure" }
func (DeleteControlPlane) kind() string { return "cp_delete" }

// Subject is the command's subject.
func (a EnsureControlPlane) Subject() string {
	return keys.ControlPlaneCommand(a.Implementation, keys.ControlPlaneEnsure, a.Command.GetCluster())
}

// ID is the command's deterministic id (Nats-Msg-Id):
// controlplane-<cluster>-<generation>-ensure.
func (a EnsureControlPlane) ID() string {
	return ControlPlaneCommandID(a.Command.GetCluster(), a.Command.GetGeneration(), keys.ControlPlaneEnsure)
}

// Subject is the command's subject.
func (a DeleteControlPlane) Subject() string {
	return keys.ControlPlaneCommand(a.Implementation, keys.ControlPlaneDelete, a.Command.GetCluster())
}

// ID is the command's deterministic id: controlplane-<cluster>-<generation>-delete.
func (a DeleteControlPlane) ID() string {
	return ControlPlaneCommandID(a.Command.GetCluster(), a.Command.GetGeneration(), keys.ControlPlaneDelete)
}

// ControlPlaneCommandID is the id of a control-plane command:
// controlplane-<cluster>-<generation>-<verb>.
func ControlPlaneCommandID(cluster string, generation int64, verb string) string {
	return "controlplane-" + cluster + "-" + strconv.FormatInt(generation, 10) + "-" + verb
}

// implementation is the cluster's control-plane implementation.
func (p *planner) implementation() string { return p.c.GetSpec().GetControlPlane().Implementation() }

// byImplementation: the control plane is an implementation service's,
// not machines this planner makes.
func (p *planner) byImplementation() bool { return p.implementation() != capnv1.ControlPlaneMachines }

// generation is the desired cluster's revision the commands carry and the
// record's observed_generation is compared with.
func (p *planner) generation() int64 {
	if p.in.ClusterRevision > 0 {
		return int64(p.in.ClusterRevision)
	}
	return p.c.GetMetadata().GetGeneration()
}

func (p *planner) command() *capnv1.ControlPlaneCommand {
	s := p.c.GetSpec()
	return &capnv1.ControlPlaneCommand{
		Cluster:           p.name,
		Generation:        p.generation(),
		Spec:              proto.CloneOf(s.GetControlPlane()),
		KubernetesVersion: s.GetKubernetesVersion(),
		Network:           proto.CloneOf(s.GetNetwork()),
	}
}

// recordCurrent: the record answers the desired cluster's revision.
func (p *planner) recordCurrent() bool {
	rec := p.in.ControlPlane
	return rec != nil && rec.GetObservedGeneration() >= p.generation()
}

// ensureControlPlane asks the implementation for the control plane while
// its record is missing or answers an older revision.
func (p *planner) ensureControlPlane() {
	if !p.recordCurrent() {
		p.add(EnsureControlPlane{Implementation: p.implementation(), Command: p.command()})
	}
}

// implementationHold is a worker pool's hold while the control plane is an
// implementation's: none before it is initialized, and none newer than the
// version its API servers run (record.version; a kubelet must never be
// newer than its API server: the skew rule the machines path keeps while
// its control plane rolls).
func (p *planner) implementationHold(pl *pool) string {
	if !p.initialized {
		return "waiting for the control plane to initialize"
	}
	have := p.in.ControlPlane.GetVersion()
	cpV, err1 := manifest.ParseVersion(have)
	v, err2 := manifest.ParseVersion(pl.version)
	switch {
	case err1 != nil:
		return fmt.Sprintf("waiting for the %s control plane to report its version", p.implementation())
	case err2 != nil || v.Compare(cpV) > 0:
		return fmt.Sprintf("waiting for the %s control plane to run %s (it runs %s)", p.implementation(), pl.version, have)
	}
	return ""
}

// implementationReady is ControlPlaneReady of a control plane made by an
// implementation: its record's Ready condition, reason and message, False
// while the record answers an older revision.
func (p *planner) implementationReady() (bool, string, string) {
	rec := p.in.ControlPlane
	impl := p.implementation()
	if rec == nil {
		return false, ReasonNoControlPlaneRecord, fmt.Sprintf("waiting for the %s control plane's record (controlplane.%s)", impl, p.name)
	}
	ready := conditions.Get(rec.GetConditions(), ConditionReady)
	if ready == nil {
		return false, ReasonReadyUnknown, fmt.Sprintf("the %s control plane reports no Ready condition (%d of %d API servers ready)", impl, rec.GetReadyReplicas(), rec.GetReplicas())
	}
	if !p.recordCurrent() {
		return false, ReasonControlPlaneUpdating, fmt.Sprintf("the %s control plane answers revision %d of the cluster, not %d yet (%s: %s)",
			impl, rec.GetObservedGeneration(), p.generation(), ready.GetReason(), ready.GetMessage())
	}
	return ready.GetStatusValue() == capnv1.ConditionTrue, ready.GetReason(), ready.GetMessage()
}

// implementationPoolStatus is the status's control-plane part from the
// record: API servers wanted, ready and the version they run.
func (p *planner) implementationPoolStatus() *capnv1.PoolStatus {
	rec := p.in.ControlPlane
	ps := &capnv1.PoolStatus{Name: p.cp.name, Desired: int32(p.cp.replicas), Replicas: rec.GetReplicas(), Ready: rec.GetReadyReplicas(),
		Available: rec.GetReadyReplicas(), Version: rec.GetVersion()}
	if p.recordCurrent() {
		ps.Updated = rec.GetReplicas()
	}
	return ps
}

// machinesRecord is the machines implementation's record, from the
// control-plane machines observed before this plan's actions; nil when the
// stored record (Input.ControlPlane) already says the same — initialized,
// endpoint, version, replicas, ready replicas and the Ready condition's
// status and reason — so that worker changes and counts in messages write
// nothing.
func (p *planner) machinesRecord(endpoint *capnv1.Endpoint, cpOK bool, cpReason, cpMsg string) *capnv1.ControlPlaneRecord {
	prev := p.in.ControlPlane
	status := capnv1.ConditionFalse
	if cpOK {
		status = capnv1.ConditionTrue
	}
	ready := conditions.New(ConditionReady, status, cpReason, cpMsg)
	rec := &capnv1.ControlPlaneRecord{
		Cluster:            p.name,
		Implementation:     capnv1.ControlPlaneMachines,
		ObservedGeneration: p.generation(),
		Initialized:        p.initialized || prev.GetInitialized(),
		Endpoint:           proto.CloneOf(endpoint),
		Version:            p.cp.obs.minVersion,
		Replicas:           int32(p.cp.replicas),
		ReadyReplicas:      int32(p.cp.obs.ready),
		Conditions:         []*capnv1.Condition{conditions.Stamp(ready, prev.GetConditions(), p.in.Now)},
		Updated:            timestamp(p.in.Now),
	}
	if prev != nil && sameRecord(prev, rec) {
		return nil
	}
	return rec
}

// writesRecord: this plan computes the machines implementation's record —
// the planner is that implementation, and the plan acts (not paused, a
// valid spec, not refused); a deleting cluster's record follows its
// machines away and goes with the cluster (DeleteCluster).
func (p *planner) writesRecord() bool {
	deleting := p.c.GetMetadata().GetDeletionTimestamp() != nil
	switch {
	case p.byImplementation():
		return false
	case p.c.GetSpec().GetPaused() && !p.c.GetMetadata().Orphaning():
		return false
	case deleting:
		return true
	case !p.initialized && p.in.ControlPlane == nil:
		// No record until the control plane is initialized: a missing
		// machines record reads as "not initialized", and a cluster's
		// create writes one or two records instead of one per change of
		// its waiting reason (issue 24: KV writes per machine).
		return false
	}
	return p.invalid == nil && !p.refused
}

// sameRecord compares what a reader of the machines record acts on.
func sameRecord(a, b *capnv1.ControlPlaneRecord) bool {
	ra, rb := conditions.Get(a.GetConditions(), ConditionReady), conditions.Get(b.GetConditions(), ConditionReady)
	return a.GetImplementation() == b.GetImplementation() && a.GetInitialized() == b.GetInitialized() &&
		proto.Equal(a.GetEndpoint(), b.GetEndpoint()) && a.GetVersion() == b.GetVersion() &&
		a.GetReplicas() == b.GetReplicas() && a.GetReadyReplicas() == b.GetReadyReplicas() &&
		ra.GetStatus() == rb.GetStatus() && ra.GetReason() == rb.GetReason()
}

// SameControlPlaneRecord reports whether two records of the machines
// implementation say the same to their readers (the fields
// Result.ControlPlaneRecord is written for): an applier writes nothing over
// such a record.
func SameControlPlaneRecord(a, b *capnv1.ControlPlaneRecord) bool {
	if a == nil || b == nil {
		return a == b
	}
	return sameRecord(a, b)
}
