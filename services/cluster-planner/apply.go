package clusterplanner

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
)

// applier is the plan.Applier of one plan of one cluster: desired machines
// with compare-and-set (plan's record rules, store's bounded retry),
// teardown commands with ids deterministic per cluster incarnation.
type applier struct {
	s   *Service
	c   *capnv1.Cluster
	now func() time.Time
	// revs are the revisions of the machine records the plan read:
	// RemoveMachine deletes at them.
	revs map[string]uint64
}

var _ plan.Applier = (*applier)(nil)

func (s *Service) applier(c *capnv1.Cluster, revs map[string]uint64) *applier {
	return &applier{s: s, c: c, now: s.cfg.Now, revs: revs}
}

func (a *applier) name() string { return a.c.GetMetadata().GetName() }
func (a *applier) uid() string  { return a.c.GetMetadata().GetUid() }

func (a *applier) machineKey(name string) string { return keys.Machine(a.name(), name) }

func (a *applier) CreateMachine(ctx context.Context, c plan.CreateMachine) error {
	m := plan.NewMachineRecord(c, uuid.NewString(), a.now())
	rev, err := a.s.machines.Create(ctx, a.machineKey(m.GetMetadata().GetName()), m)
	if errors.Is(err, store.ErrConflict) {
		return nil // another planner created this slot's machine: the same name, by design
	}
	a.s.wrote(a.name(), rev)
	return err
}

func (a *applier) DeleteMachine(ctx context.Context, d plan.DeleteMachine) error {
	_, _, err := a.s.machines.Mutate(ctx, a.machineKey(d.Name), func(m *capnv1.Machine, exists bool) (*capnv1.Machine, error) {
		if next, ok := plan.DeletingMachineRecord(m, d, a.now()); exists && ok {
			return next, nil
		}
		return nil, store.ErrNoChange
	})
	return err
}

func (a *applier) UpdateMachine(ctx context.Context, u plan.UpdateMachine) error {
	wrote := false
	_, rev, err := a.s.machines.Mutate(ctx, a.machineKey(u.Machine.GetMetadata().GetName()), func(m *capnv1.Machine, exists bool) (*capnv1.Machine, error) {
		next, ok := plan.UpdatedMachineRecord(m, u)
		if wrote = exists && ok; !wrote {
			return nil, store.ErrNoChange
		}
		return next, nil
	})
	if err == nil && wrote {
		a.s.wrote(a.name(), rev)
	}
	return err
}

func (a *applier) RemoveMachine(ctx context.Context, r plan.RemoveMachine) error {
	return a.s.machines.Delete(ctx, a.machineKey(r.Name), a.revs[r.Name])
}

func (a *applier) EnsureClusterInfra(ctx context.Context, e plan.EnsureClusterInfra) error {
	name := a.name()
	_, err := a.s.pub.Publish(ctx, events.ProviderSubject(e.Provider, "cluster", "ensure", name, events.ClusterObject), events.TypeProviderCommand+".cluster.ensure",
		"ensure."+name+"."+e.Provider+"."+a.uid(), &capnv1.EnsureClusterInfra{Cluster: name})
	return err
}

func (a *applier) DeleteClusterInfra(ctx context.Context, d plan.DeleteClusterInfra) error {
	name := a.name()
	if d.Orphan {
		_, err := a.s.pub.Publish(ctx, events.ProviderSubject(d.Provider, "cluster", "orphan", name, events.ClusterObject), events.TypeProviderCommand+".cluster.orphan",
			"orphan-infra."+name+"."+d.Provider+"."+a.uid(), &capnv1.DeleteClusterInfra{Cluster: name})
		return err
	}
	_, err := a.s.pub.Publish(ctx, events.ProviderSubject(d.Provider, "cluster", "delete", name, events.ClusterObject), events.TypeProviderCommand+".cluster.delete",
		"delete-infra."+name+"."+d.Provider+"."+a.uid(), &capnv1.DeleteClusterInfra{Cluster: name})
	return err
}

func (a *applier) DeletePKI(ctx context.Context, _ plan.DeletePKI) error {
	name := a.name()
	_, err := a.s.pub.Publish(ctx, events.CommandSubject("bootstrap", "cleanup", name, events.ClusterObject), events.TypeDeleteClusterSecrets,
		"cleanup."+name+"."+a.uid(), &capnv1.DeleteClusterSecrets{Cluster: name})
	return err
}

func (a *applier) DeleteCluster(ctx context.Context, _ plan.DeleteCluster) error {
	name, uid := a.name(), a.uid()
	if err := a.s.statuses.Delete(ctx, keys.Cluster(name), 0); err != nil {
		return err
	}
	// The machines implementation's record goes with the cluster; another
	// implementation's is its own (it deletes it on DeleteControlPlane).
	_, _, err := a.s.records.Mutate(ctx, keys.ControlPlane(name), func(cur *capnv1.ControlPlaneRecord, exists bool) (*capnv1.ControlPlaneRecord, error) {
		if !exists || cur.GetImplementation() != capnv1.ControlPlaneMachines {
			return nil, store.ErrNoChange
		}
		return nil, store.ErrDelete
	})
	if err != nil {
		return err
	}
	_, _, err = a.s.clusters.Mutate(ctx, keys.Cluster(name), func(cur *capnv1.Cluster, exists bool) (*capnv1.Cluster, error) {
		if !exists || cur.GetMetadata().GetUid() != uid || cur.GetMetadata().GetDeletionTimestamp() == nil {
			return nil, store.ErrNoChange // re-created meanwhile: not ours to delete
		}
		return nil, store.ErrDelete
	})
	if err == nil {
		a.s.event(ctx, name, "deleted", &capnv1.ClusterEvent{Cluster: name, Phase: capnv1.ClusterDeleted.Wire(), Reason: capnv1.ClusterDeleted.Wire(), Message: "cluster deleted"}, uid)
	}
	return err
}

func (a *applier) EnsureControlPlane(ctx context.Context, e plan.EnsureControlPlane) error {
	_, err := a.s.pub.Publish(ctx, e.Subject(), events.TypeControlPlaneCommand+"."+keys.ControlPlaneEnsure, e.ID(), e.Command)
	return err
}

func (a *applier) DeleteControlPlane(ctx context.Context, d plan.DeleteControlPlane) error {
	_, err := a.s.pub.Publish(ctx, d.Subject(), events.TypeControlPlaneCommand+"."+keys.ControlPlaneDelete, d.ID(), d.Command)
	return err
}

// WriteControlPlaneRecord writes the machines implementation's record
// (CAS), unless the stored one says the same; it never overwrites another
// implementation's. A replica whose observed cache has not seen the stored
// record's revision writes nothing (its view of the machines may be older
// than the one that wrote it, as for the status): its cache's catching up
// with that very key plans the cluster again.
func (a *applier) WriteControlPlaneRecord(ctx context.Context, rec *capnv1.ControlPlaneRecord) error {
	if _, rev, err := a.s.records.Get(ctx, keys.ControlPlane(a.name())); err == nil && a.s.observedRev != nil && a.s.observedRev() < rev {
		return nil
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	_, _, err := a.s.records.Mutate(ctx, keys.ControlPlane(a.name()), func(cur *capnv1.ControlPlaneRecord, exists bool) (*capnv1.ControlPlaneRecord, error) {
		if exists && (cur.GetImplementation() != capnv1.ControlPlaneMachines || plan.SameControlPlaneRecord(cur, rec)) {
			return nil, store.ErrNoChange
		}
		return rec, nil
	})
	return err
}

// wrote records a machine write of this replica (rev 0: none happened).
func (s *Service) wrote(cluster string, rev uint64) {
	if rev > 0 {
		s.written.Store(cluster, rev)
	}
}
