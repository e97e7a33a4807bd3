package plan

import (
	"context"
	"maps"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Applier is the port through which a plan's actions reach the world. The
// cluster-planner's applier writes the desired bucket with compare-and-set
// and sends the teardown commands; plantest.Harness changes its in-memory
// world. Both run plantest.TestApplier, so the property tests exercise what
// ships.
//
// An Applier serves one plan of one cluster, from one goroutine; Apply
// calls it in the plan's order. What an action does to a machine record
// is one function of this package, which every implementation calls; an
// implementation adds only the I/O:
//
//   - CreateMachine writes NewMachineRecord(a, uid, now) under the
//     machine's name, uid fresh (unique per incarnation), if no record
//     holds the name. A taken name is not an error and nothing is written:
//     the names are deterministic per slot, so a second planner racing for
//     the slot finds the first one's machine.
//   - UpdateMachine writes UpdatedMachineRecord(cur, a) over the current
//     record: spec, labels and annotations from a.Machine, generation + 1,
//     the rest (uid, creation and deletion timestamps) kept. A record equal
//     in those fields, or no record, is left alone.
//   - DeleteMachine writes DeletingMachineRecord(cur, a, now): the
//     deletion_timestamp (and the Orphan policy when a says so), unless
//     the record has one or is gone.
//   - RemoveMachine removes the record, if it is still the one the plan
//     read; a record already gone is not an error.
//   - EnsureClusterInfra, DeleteClusterInfra and DeletePKI ask the provider
//     and the bootstrapper (with ids deterministic per cluster incarnation);
//     DeleteCluster removes the cluster's status and desired record, and
//     the machines implementation's control-plane record
//     (controlplane.<c>, if its implementation is machines).
//   - EnsureControlPlane and DeleteControlPlane publish the command to the
//     implementation (a.Subject(), a.ID(): capn.controlplane.<impl>.<verb>.<c>
//     with id controlplane-<c>-<generation>-<verb>), so the same command
//     again is dropped by the stream's duplicate window.
//   - WriteControlPlaneRecord (Result.ControlPlaneRecord, not an action)
//     writes the machines implementation's record with compare-and-set,
//     unless the stored one says the same (SameControlPlaneRecord).
//
// Every method is idempotent: an action applied again once it took effect
// changes nothing and returns nil. A compare-and-set write that loses a
// race is re-read and the rule applied again to the fresh record, a
// bounded number of times; RemoveMachine of a record written since the
// plan read it is not retried. Either ends in an error (the KV applier's
// matches store.ErrConflict): the caller applies nothing more of the plan
// and plans again from a fresh read. A cancelled ctx ends a write with an
// error; whether it took effect is found by that next read.
type Applier interface {
	CreateMachine(ctx context.Context, a CreateMachine) error
	UpdateMachine(ctx context.Context, a UpdateMachine) error
	DeleteMachine(ctx context.Context, a DeleteMachine) error
	RemoveMachine(ctx context.Context, a RemoveMachine) error
	EnsureClusterInfra(ctx context.Context, a EnsureClusterInfra) error
	DeleteClusterInfra(ctx context.Context, a DeleteClusterInfra) error
	DeletePKI(ctx context.Context, a DeletePKI) error
	DeleteCluster(ctx context.Context, a DeleteCluster) error
	EnsureControlPlane(ctx context.Context, a EnsureControlPlane) error
	DeleteControlPlane(ctx context.Context, a DeleteControlPlane) error
	WriteControlPlaneRecord(ctx context.Context, rec *capnv1.ControlPlaneRecord) error
}

// Apply applies actions in order through ap and stops at the first error,
// which it returns.
func Apply(ctx context.Context, ap Applier, actions []Action) error {
	for _, a := range actions {
		if err := a.applyTo(ctx, ap); err != nil {
			return err
		}
	}
	return nil
}

func (a CreateMachine) applyTo(ctx context.Context, ap Applier) error {
	return ap.CreateMachine(ctx, a)
}
func (a DeleteMachine) applyTo(ctx context.Context, ap Applier) error {
	return ap.DeleteMachine(ctx, a)
}
func (a UpdateMachine) applyTo(ctx context.Context, ap Applier) error {
	return ap.UpdateMachine(ctx, a)
}
func (a RemoveMachine) applyTo(ctx context.Context, ap Applier) error {
	return ap.RemoveMachine(ctx, a)
}
func (a EnsureClusterInfra) applyTo(ctx context.Context, ap Applier) error {
	return ap.EnsureClusterInfra(ctx, a)
}
func (a DeleteClusterInfra) applyTo(ctx context.Context, ap Applier) error {
	return ap.DeleteClusterInfra(ctx, a)
}
func (a DeletePKI) applyTo(ctx context.Context, ap Applier) error { return ap.DeletePKI(ctx, a) }
func (a DeleteCluster) applyTo(ctx context.Context, ap Applier) error {
	return ap.DeleteCluster(ctx, a)
}
func (a EnsureControlPlane) applyTo(ctx context.Context, ap Applier) error {
	return ap.EnsureControlPlane(ctx, a)
}
func (a DeleteControlPlane) applyTo(ctx context.Context, ap Applier) error {
	return ap.DeleteControlPlane(ctx, a)
}

// NewMachineRecord is the record a CreateMachine writes: a copy of
// a.Machine with uid, creation_timestamp (now) and generation (1) set
// where the plan left them unset.
func NewMachineRecord(a CreateMachine, uid string, now time.Time) *capnv1.Machine {
	m := proto.Clone(a.Machine).(*capnv1.Machine)
	if m.Metadata == nil {
		m.Metadata = &capnv1.ObjectMeta{}
	}
	if m.Metadata.Uid == "" {
		m.Metadata.Uid = uid
	}
	if m.Metadata.CreationTimestamp == nil {
		m.Metadata.CreationTimestamp = timestamppb.New(now)
	}
	if m.Metadata.Generation == 0 {
		m.Metadata.Generation = 1
	}
	return m
}

// UpdatedMachineRecord is what an UpdateMachine makes of the current
// record cur: a copy with a.Machine's spec, labels and annotations and the
// generation bumped, everything else of cur kept. Lifecycle hook
// annotations and capn.dev/delete-machine (annotations.IsHeld) are their
// holders', not the plan's: cur's are kept and a.Machine's ignored. It returns false, and no
// record, when cur is nil or already has them.
func UpdatedMachineRecord(cur *capnv1.Machine, a UpdateMachine) (*capnv1.Machine, bool) {
	want := a.Machine
	if cur == nil {
		return nil, false
	}
	ann := keepHooks(cur.GetMetadata().GetAnnotations(), want.GetMetadata().GetAnnotations())
	if proto.Equal(cur.GetSpec(), want.GetSpec()) &&
		maps.Equal(cur.GetMetadata().GetLabels(), want.GetMetadata().GetLabels()) &&
		maps.Equal(cur.GetMetadata().GetAnnotations(), ann) {
		return nil, false
	}
	m := proto.Clone(cur).(*capnv1.Machine)
	if m.Metadata == nil {
		m.Metadata = &capnv1.ObjectMeta{}
	}
	m.Spec = proto.Clone(want.GetSpec()).(*capnv1.MachineSpec)
	m.Metadata.Labels = maps.Clone(want.GetMetadata().GetLabels())
	m.Metadata.Annotations = ann
	m.Metadata.Generation++
	return m, true
}

// keepHooks is want without held annotations (hooks, delete-machine),
// plus cur's held annotations (nil when empty).
func keepHooks(cur, want map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range want {
		if !annotations.IsHeld(k) {
			out[k] = v
		}
	}
	for k, v := range cur {
		if annotations.IsHeld(k) {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// DeletingMachineRecord is what a DeleteMachine makes of the current
// record cur: a copy with deletion_timestamp now. It returns false, and no
// record, when cur is nil or already being deleted.
func DeletingMachineRecord(cur *capnv1.Machine, a DeleteMachine, now time.Time) (*capnv1.Machine, bool) {
	if cur == nil || cur.GetMetadata().GetDeletionTimestamp() != nil {
		return nil, false
	}
	m := proto.Clone(cur).(*capnv1.Machine)
	if m.Metadata == nil {
		m.Metadata = &capnv1.ObjectMeta{}
	}
	m.Metadata.DeletionTimestamp = timestamppb.New(now)
	if a.Orphan {
		m.Metadata.DeletionPolicy = capnv1.DeletionOrphan
	}
	return m, true
}
