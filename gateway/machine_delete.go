package gateway

import (
	"context"
	"errors"
	"net/http"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// deleteMachine is DELETE /v1/clusters/{name}/machines/{machine}[?dryRun=All]:
// it sets the desired machine's deletion_timestamp with a compare-and-set,
// exactly as the remediator replaces a machine (Cluster API: deleting a
// Machine of a MachineSet). The machine-manager drains and deletes it (its
// lifecycle hooks hold it); the cluster-planner, whose replicas did not
// change, makes a replacement. 202 with the machine.
//
// Refused with 409: a machine already being deleted; a machine of a
// cluster being deleted; the last control-plane machine not being deleted
// (the cluster's etcd and API would go with it: scale the control plane,
// or delete the cluster).
func (s *server) deleteMachine(w http.ResponseWriter, r *http.Request) error {
	cluster, machine, err := machinePath(r)
	if err != nil {
		return err
	}
	dryRun, err := dryRunFrom(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	c, _, err := s.clusters.Get(ctx, keys.Cluster(cluster))
	switch {
	case err == nil && c.GetMetadata().GetDeletionTimestamp() != nil:
		return conflict("cluster %s is being deleted (requested at %s): its machines go with it",
			cluster, c.GetMetadata().GetDeletionTimestamp().AsTime().Format(time.RFC3339))
	case err != nil && !isNotFound(err) && !isCorrupt(err):
		return err
	}
	now := timestamppb.New(s.now().UTC().Truncate(time.Second))
	key := keys.Machine(cluster, machine)
	mutate := func(m *capnv1.Machine, exists bool) (*capnv1.Machine, error) {
		if !exists {
			return nil, machineNotFound(cluster, machine)
		}
		if dt := m.GetMetadata().GetDeletionTimestamp(); dt != nil {
			return nil, conflict("machine %s of cluster %s is already being deleted (requested at %s)",
				machine, cluster, dt.AsTime().Format(time.RFC3339))
		}
		if isControlPlane(m) {
			if err := s.otherControlPlane(ctx, cluster, machine); err != nil {
				return nil, err
			}
		}
		ensure(&m.Metadata).DeletionTimestamp = now
		return m, nil
	}
	var (
		m   *capnv1.Machine
		rev uint64
	)
	if dryRun {
		cur, curRev, gerr := s.machines.Get(ctx, key)
		if gerr != nil && !isNotFound(gerr) {
			return gerr
		}
		if m, err = mutate(cur, gerr == nil); err != nil {
			return err
		}
		rev = curRev
	} else if m, rev, err = s.machines.Mutate(ctx, key, mutate); err != nil {
		return err
	}
	st, _, err := s.machineStatuses.Get(ctx, key)
	if err != nil && !isNotFound(err) && !isCorrupt(err) {
		return err
	}
	b, err := marshalObject(machineObject(machine, m, rev, st))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, b)
	return nil
}

// roleControlPlane is a control-plane machine's spec.role (the planner's
// plan.RoleControlPlane).
const roleControlPlane = "control-plane"

// isControlPlane: the machine is one of its cluster's control plane.
func isControlPlane(m *capnv1.Machine) bool {
	return m.GetSpec().GetRole() == roleControlPlane || m.GetSpec().GetPool() == api.ControlPlanePool
}

// otherControlPlane refuses the deletion of machine when no other
// control-plane machine of the cluster stays (one not being deleted).
// Two deletions racing for the last two are not told apart: each sees the
// other's machine still there. The planner keeps the control plane's
// replicas, so both are replaced; only a single-member control plane
// loses what it holds, and that is what this refuses.
func (s *server) otherControlPlane(ctx context.Context, cluster, machine string) error {
	ms, err := s.machines.List(ctx, keys.MachinesOf(cluster))
	if err != nil {
		return err
	}
	for _, e := range ms {
		if e.Key != keys.Machine(cluster, machine) && isControlPlane(e.Value) && e.Value.GetMetadata().GetDeletionTimestamp() == nil {
			return nil
		}
	}
	return conflict("machine %s is the last control-plane machine of cluster %s: deleting it would destroy the cluster's etcd and API server; "+
		"to replace it, scale the control plane up first (capn scale %s --pool control-plane --replicas 3); to remove the cluster, capn delete cluster %s",
		machine, cluster, cluster, cluster)
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
func isCorrupt(err error) bool  { return errors.Is(err, store.ErrCorrupt) }
