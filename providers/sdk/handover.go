package sdk

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Handing infrastructure over between capn deployments (a restore, a
// move): adopt takes a machine or a cluster's infrastructure back under a
// provider's management from the record another deployment (or a backup)
// kept of it; orphan lets go of it. Neither touches the infrastructure.

// Orphaner is implemented by a provider that keeps per-machine state of
// its own besides its infrastructure (the sim's heartbeat schedule): an
// orphan command calls it before the SDK removes the record, and it must
// stop managing the machine (or the cluster's infrastructure) without
// deleting or stopping it. Both are idempotent: letting go of what it
// does not manage succeeds. A provider without it has nothing to let go
// of: its machines simply no longer have records here (its drift check
// then reports each once as an Orphan, and never deletes it).
type Orphaner interface {
	OrphanMachine(ctx context.Context, cluster, machine string) error
	OrphanCluster(ctx context.Context, cluster string) error
}

// Event types of the handover commands.
const (
	TypeAdoptMachine  = events.TypeProviderCommand + ".machine.adopt"  // AdoptMachine
	TypeOrphanMachine = events.TypeProviderCommand + ".machine.orphan" // DeleteMachine
	TypeAdoptCluster  = events.TypeProviderCommand + ".cluster.adopt"  // AdoptClusterInfra
	TypeOrphanCluster = events.TypeProviderCommand + ".cluster.orphan" // DeleteClusterInfra
)

// Messages of machines an adopt did not find.
const (
	MessageAdoptNotFound = "adopt: the provider has no such machine"
	MessageAdoptOther    = "adopt: the provider's machine of this name is another one"
)

// adoptMachine takes a machine back by the record a backup or another
// deployment kept: an Adopter is given the record (the sim keeps its
// machines only in records), then Describe says what really exists, and
// that is recorded — as Deleted when there is no such machine, or when
// the one of that name has another provider id (it is not this one).
// A machine already recorded live with the same provider id is left as
// it is.
func (s *server) adoptMachine(ctx context.Context, m *events.Message, req *capnv1.AdoptMachine) error {
	c, name := req.GetCluster(), req.GetMachine()
	if err := s.target(m, c, name); err != nil {
		return err
	}
	rec := req.GetRecord()
	if rec.GetProviderId() == "" {
		return events.Permanent(fmt.Errorf("adopt %s/%s: the record names no provider id", c, name))
	}
	log := zerolog.Ctx(ctx).With().Str("provider_id", rec.GetProviderId()).Logger()
	cur, _, err := s.obs.machines.Get(ctx, InfraKey(s.name, c, name))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err == nil && live(cur.GetStateValue()) && cur.GetProviderId() == rec.GetProviderId() {
		log.Debug().Msg("machine already adopted")
		return nil
	}
	if a, ok := s.p.(Adopter); ok {
		in := proto.Clone(rec).(*capnv1.InfraMachine)
		in.Provider, in.Cluster, in.Machine = s.name, c, name
		if err := a.Adopt(ctx, []*capnv1.InfraMachine{in}, nil); err != nil {
			if !s.giveUp(m, err) {
				return fmt.Errorf("adopt %s/%s: %w", c, name, err)
			}
			return s.adoptGone(ctx, c, name, rec, "adopt failed: "+err.Error())
		}
	}
	got, err := s.p.Describe(ctx, c, name)
	switch {
	case errors.Is(err, ErrNotFound):
		log.Warn().Msg("asked to adopt a machine the provider does not have")
		return s.adoptGone(ctx, c, name, rec, MessageAdoptNotFound)
	case err != nil && !s.giveUp(m, err):
		return fmt.Errorf("adopt %s/%s: describe: %w", c, name, err)
	case err != nil:
		return s.adoptGone(ctx, c, name, rec, "adopt failed: "+err.Error())
	case got.GetProviderId() != rec.GetProviderId():
		log.Warn().Str("found", got.GetProviderId()).Msg("asked to adopt a machine whose name the provider gives another one")
		return s.adoptGone(ctx, c, name, rec, MessageAdoptOther+" ("+got.GetProviderId()+")")
	}
	log.Info().Str("state", got.GetState()).Msg("machine adopted")
	got = proto.Clone(got).(*capnv1.InfraMachine)
	got.Updated = timestamppb.New(s.obs.now())
	return s.record(ctx, got, c, name)
}

// adoptGone records that an adopt found nothing to take back: the
// backup's identity, state Deleted, and why. The machine-manager then
// treats the machine as one whose infrastructure is gone.
func (s *server) adoptGone(ctx context.Context, c, name string, rec *capnv1.InfraMachine, why string) error {
	im := &capnv1.InfraMachine{ProviderId: rec.GetProviderId(), Addresses: rec.GetAddresses(), State: StateDeleted.Wire(), Message: why,
		Updated: timestamppb.New(s.obs.now())}
	s.obs.normalise(im, c, name)
	return s.obs.writeMachine(ctx, im, false)
}

// orphanMachine lets go of a machine without touching it: an Orphaner
// stops managing it, then its record is removed (and remembered, so that
// a late report of it cannot write it back).
func (s *server) orphanMachine(ctx context.Context, m *events.Message, req *capnv1.DeleteMachine) error {
	c, name := req.GetCluster(), req.GetMachine()
	if err := s.target(m, c, name); err != nil {
		return err
	}
	if o, ok := s.p.(Orphaner); ok {
		if err := o.OrphanMachine(ctx, c, name); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("orphan %s/%s: %w", c, name, err)
		}
	}
	zerolog.Ctx(ctx).Info().Msg("machine orphaned: left running, its record removed")
	return s.obs.deleteMachine(ctx, c, name)
}

// adoptCluster takes a cluster's infrastructure back by its record: an
// Adopter is given it, and it is recorded as given (a provider that can
// find a cluster's infrastructure on its own does so when the planner
// next ensures it).
func (s *server) adoptCluster(ctx context.Context, m *events.Message, req *capnv1.AdoptClusterInfra) error {
	c := req.GetCluster()
	if err := s.target(m, c, events.ClusterObject); err != nil {
		return err
	}
	if req.GetRecord() == nil {
		return events.Permanent(fmt.Errorf("adopt cluster %s: no record", c))
	}
	ic := proto.Clone(req.GetRecord()).(*capnv1.InfraCluster)
	ic.Provider, ic.Cluster = s.name, c
	if a, ok := s.p.(Adopter); ok {
		if err := a.Adopt(ctx, nil, []*capnv1.InfraCluster{ic}); err != nil {
			if !s.giveUp(m, err) {
				return fmt.Errorf("adopt cluster %s: %w", c, err)
			}
			return s.obs.clusterMessage(ctx, c, "adopt failed: "+err.Error())
		}
	}
	zerolog.Ctx(ctx).Info().Msg("cluster infrastructure adopted")
	return s.obs.writeCluster(ctx, ic)
}

// orphanCluster lets go of a cluster's infrastructure without touching it.
func (s *server) orphanCluster(ctx context.Context, m *events.Message, req *capnv1.DeleteClusterInfra) error {
	c := req.GetCluster()
	if err := s.target(m, c, events.ClusterObject); err != nil {
		return err
	}
	if o, ok := s.p.(Orphaner); ok {
		if err := o.OrphanCluster(ctx, c); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("orphan cluster %s: %w", c, err)
		}
	}
	zerolog.Ctx(ctx).Info().Msg("cluster infrastructure orphaned: left in place, its record removed")
	return s.obs.deleteCluster(ctx, c)
}
