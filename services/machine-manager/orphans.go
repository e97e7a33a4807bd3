package machinemanager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// An orphan is infrastructure that a provider holds for a machine that has
// neither a desired record nor a status: a create the provider handled
// after the machine's delete (redelivered after its ack wait, delayed, or
// replayed from the stream). The machine's own reconcile never sees it
// again — there is no machine — so nothing else would ever delete it. The
// orphan collector works on infra keys ("infra.<provider>.<cluster>.<machine>")
// in a queue of its own and asks the provider to delete what it finds.
//
// Desired comes before infrastructure: the planner writes the machine, the
// machine-manager its status, then sends the create. So a record with
// neither is not a machine being born, and a machine being deleted keeps
// its status until its infrastructure is gone.

// orphanRecheck is how soon a collected orphan is looked at again, in case
// the provider did not delete it (the command id changes with the record's
// revision, and JetStream forgets an id after its 2-minute window).
const orphanRecheck = time.Minute

// infraKeyOf keeps a watched key if it is a machine's infra record.
func infraKeyOf(key string) string {
	if k, err := keys.Parse(key); err == nil && k.Kind == keys.KindInfra && k.Machine() {
		return key
	}
	return ""
}

// allInfra is every machine's infra key, for a resync.
func (s *Service) allInfra() []string {
	var infra []string
	for _, k := range s.observed.KeysUnder(keys.InfraPrefix) {
		if k := infraKeyOf(keys.InfraPrefix + k); k != "" {
			infra = append(infra, k)
		}
	}
	return infra
}

// collectOrphan deletes key's infrastructure if it is an orphan. Every
// absence it acts on is confirmed from the buckets, not the caches.
func (s *Service) collectOrphan(ctx context.Context, key string) (reconcile.Result, error) {
	k, err := keys.Parse(key)
	if err != nil || k.Kind != keys.KindInfra {
		return reconcile.Result{}, nil
	}
	p, cluster, name := k.Provider, k.Cluster, k.Name
	if _, ok := s.observedView.Get(key); !ok {
		return reconcile.Result{}, nil // gone (or not yet seen: the watch brings it back)
	}
	machine := keys.Machine(cluster, name)
	if _, _, wanted, err := store.LookupConfirmed(ctx, s.desiredView, s.machines, machine); err != nil || wanted {
		return reconcile.Result{}, err
	}
	if _, _, err := s.statuses.Get(ctx, machine); !errors.Is(err, store.ErrNotFound) {
		return reconcile.Result{}, err // a status (nil error): the machine's reconcile deletes it
	}
	infra, rev, err := s.infras.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	zerolog.Ctx(ctx).Warn().Str("provider", p).Str("cluster", cluster).Str("machine", name).Str("state", infra.GetState()).
		Msg("infrastructure without a machine (a create handled after its delete): asking the provider to delete it")
	id := fmt.Sprintf("orphan.%s.%s.%s.%d", p, cluster, name, rev)
	if _, err := s.pub.Publish(ctx, events.ProviderSubject(p, "machine", "delete", cluster, name), events.TypeProviderCommand+".machine.delete", id,
		&capnv1.DeleteMachine{Cluster: cluster, Machine: name}); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: orphanRecheck}, nil
}
