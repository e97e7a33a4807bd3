package clusterplanner

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
)

func (s *Service) apply(ctx context.Context, c *capnv1.Cluster, a plan.Action, revs map[string]uint64) error {
	name := c.GetMetadata().GetName()
	uid := c.GetMetadata().GetUid()
	switch a := a.(type) {
	case plan.CreateMachine:
		m := proto.Clone(a.Machine).(*capnv1.Machine)
		if m.Metadata == nil {
			m.Metadata = &capnv1.ObjectMeta{}
		}
		if m.Metadata.Uid == "" {
			m.Metadata.Uid = uuid.NewString()
		}
		if m.Metadata.CreationTimestamp == nil {
			m.Metadata.CreationTimestamp = timestamppb.New(s.cfg.Now())
		}
		if m.Metadata.Generation == 0 {
			m.Metadata.Generation = 1
		}
		rev, err := s.machines.Create(ctx, machinePrefix+name+"."+m.GetMetadata().GetName(), m)
		if errors.Is(err, store.ErrConflict) {
			return nil // another planner created this slot's machine: the same name, by design
		}
		s.wrote(name, rev)
		return err
	case plan.DeleteMachine:
		_, _, err := s.machines.Mutate(ctx, machinePrefix+name+"."+a.Name, func(m *capnv1.Machine, exists bool) (*capnv1.Machine, error) {
			if !exists || m.GetMetadata().GetDeletionTimestamp() != nil {
				return nil, store.ErrNoChange
			}
			m.Metadata.DeletionTimestamp = timestamppb.New(s.cfg.Now())
			return m, nil
		})
		return err
	case plan.UpdateMachine:
		_, rev, err := s.machines.Mutate(ctx, machinePrefix+name+"."+a.Machine.GetMetadata().GetName(), func(m *capnv1.Machine, exists bool) (*capnv1.Machine, error) {
			if !exists {
				return nil, store.ErrNoChange
			}
			m.Spec = proto.Clone(a.Machine.GetSpec()).(*capnv1.MachineSpec)
			m.Metadata.Annotations = a.Machine.GetMetadata().GetAnnotations()
			m.Metadata.Labels = a.Machine.GetMetadata().GetLabels()
			m.Metadata.Generation++
			return m, nil
		})
		s.wrote(name, rev)
		return err
	case plan.RemoveMachine:
		return s.machines.Delete(ctx, machinePrefix+name+"."+a.Name, revs[a.Name])
	case plan.EnsureClusterInfra:
		_, err := s.pub.Publish(ctx, events.ProviderSubject(a.Provider, "cluster", "ensure", name, events.ClusterObject), events.TypeProviderCommand+".cluster.ensure",
			"ensure."+name+"."+a.Provider+"."+uid, &capnv1.EnsureClusterInfra{Cluster: name})
		return err
	case plan.DeleteClusterInfra:
		_, err := s.pub.Publish(ctx, events.ProviderSubject(a.Provider, "cluster", "delete", name, events.ClusterObject), events.TypeProviderCommand+".cluster.delete",
			"delete-infra."+name+"."+a.Provider+"."+uid, &capnv1.DeleteClusterInfra{Cluster: name})
		return err
	case plan.DeletePKI:
		_, err := s.pub.Publish(ctx, events.CommandSubject("bootstrap", "cleanup", name, events.ClusterObject), events.TypeDeleteClusterSecrets,
			"cleanup."+name+"."+uid, &capnv1.DeleteClusterSecrets{Cluster: name})
		return err
	case plan.DeleteCluster:
		if err := s.statuses.Delete(ctx, clusterPrefix+name, 0); err != nil {
			return err
		}
		_, _, err := s.clusters.Mutate(ctx, clusterPrefix+name, func(cur *capnv1.Cluster, exists bool) (*capnv1.Cluster, error) {
			if !exists || cur.GetMetadata().GetUid() != uid || cur.GetMetadata().GetDeletionTimestamp() == nil {
				return nil, store.ErrNoChange // re-created meanwhile: not ours to delete
			}
			return nil, store.ErrDelete
		})
		if err == nil {
			s.event(ctx, name, "deleted", &capnv1.ClusterEvent{Cluster: name, Phase: "Deleted", Reason: "Deleted", Message: "cluster deleted"}, uid)
		}
		return err
	}
	return fmt.Errorf("unknown plan action %T", a)
}

// wrote records a machine write of this replica (rev 0: none happened).
func (s *Service) wrote(cluster string, rev uint64) {
	if rev > 0 {
		s.written.Store(cluster, rev)
	}
}
