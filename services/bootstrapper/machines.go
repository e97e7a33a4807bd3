package bootstrapper

import (
	"context"
	"strings"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// levelRequest is the request the machines loop answers as: the answer's
// id is per data, so the loop's repeats are one stored event.
const levelRequest = "desired-machine"

// reconcileMachine generates the bootstrap data of a new machine from its
// desired spec, without waiting for a command: a machine that is wanted,
// names its provider and has no observed status yet (the machine-manager
// writes none while a machine waits for its data) gets its data sealed and
// bootstrap.ready, exactly as the machine-manager's
// capn.cmd.bootstrap.generate for it would (the same request, built from
// the same spec: the same input hash, so the two never make two data). The
// command stays for the machine-manager's asks after 30 s without an
// answer, for a machine whose data waits for a bootstrap secret and for a
// restored one. Key: "<cluster>.<machine>".
func (s *Service) reconcileMachine(ctx context.Context, key string) (reconcile.Result, error) {
	cluster, name, ok := strings.Cut(key, ".")
	if !ok {
		return reconcile.Result{}, nil
	}
	m, _, ok := store.NewView(s.desired, store.New[capnv1.Machine]()).Get(keys.Machine(cluster, name))
	if !ok || m.GetMetadata().GetDeletionTimestamp() != nil || m.GetSpec().GetProvider() == "" {
		return reconcile.Result{}, nil
	}
	if _, ok := s.observed.Get(keys.Machine(cluster, name)); ok {
		return reconcile.Result{}, nil // the machine-manager has it in hand
	}
	err := s.generateFor(ctx, levelRequest, capnv1.NewGenerateBootstrap(cluster, name, m))
	if events.IsPermanent(err) {
		return reconcile.Result{}, nil // bootstrap.failed told the machine-manager
	}
	return reconcile.Result{}, err // waiting for the endpoint, or a store error: retried with backoff
}

// machineOf maps a desired or observed machine key to "<cluster>.<machine>".
func machineOf(kvKey string) string {
	k, err := keys.Parse(kvKey)
	if err != nil || k.Kind != keys.KindMachine {
		return ""
	}
	return k.Cluster + "." + k.Name
}
