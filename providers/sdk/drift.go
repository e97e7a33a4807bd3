package sdk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// MessageGone is the message of a machine marked Deleted because the
// provider no longer has it.
const MessageGone = "gone: the provider no longer has this machine (removed out of band)"

// classify compares what observed KV says of a machine (obs, nil when there
// is no record) with what really exists (real, nil when the provider has
// nothing, normalised). It returns the drift to report ("" for none) and
// the record to write (nil for none). It is a pure function.
//
//	obs          real                    drift     write
//	none         none                    -         -
//	none         exists                  Orphan    -  (reported, never deleted)
//	not live     any                     -         -  (Deleting, Deleted, Failed: the core decides)
//	live         none                    Gone      obs as Deleted
//	Running      Stopped                 Stopped   real
//	live         other provider id       Changed   real
//	live         differs, real is newer  -         real (a lost report)
func classify(obs, real *capnv1.InfraMachine) (string, *capnv1.InfraMachine) {
	switch {
	case obs == nil && real == nil:
		return "", nil
	case obs == nil:
		return DriftOrphan, nil
	case !live(obs.GetStateValue()):
		return "", nil
	case real == nil:
		next := proto.Clone(obs).(*capnv1.InfraMachine)
		next.State, next.Message = StateDeleted.Wire(), MessageGone
		return DriftGone, next
	case obs.GetStateValue() == StateRunning && real.GetStateValue() == StateStopped:
		return DriftStopped, real
	case obs.GetProviderId() != "" && real.GetProviderId() != "" && obs.GetProviderId() != real.GetProviderId():
		return DriftChanged, real
	case real.GetUpdated().AsTime().After(obs.GetUpdated().AsTime()) && !sameFacts(obs, real):
		return "", real
	}
	return "", nil
}

// sameFacts compares two records of one machine but for their updated
// time (without copying: the full pass calls it for every machine).
func sameFacts(a, b *capnv1.InfraMachine) bool {
	return a.GetState() == b.GetState() && a.GetProviderId() == b.GetProviderId() &&
		a.GetMessage() == b.GetMessage() && a.GetFailureDomain() == b.GetFailureDomain() &&
		slices.EqualFunc(a.GetAddresses(), b.GetAddresses(), func(x, y *capnv1.Address) bool {
			return x.GetType() == y.GetType() && x.GetAddress() == y.GetAddress()
		})
}

// runDrift runs the drift checks (one key at a time per machine, through a
// reconcile.Queue fed by Recheck and by the periodic full pass) until ctx
// ends.
func (s *server) runDrift(ctx context.Context) {
	loop := &reconcile.Loop{
		Queue:      s.checks,
		Reconciler: reconcile.Func(s.check),
		Workers:    2,
		Backoff:    reconcile.Backoff{Base: 250 * time.Millisecond, Max: 30 * time.Second},
		OnError: func(key string, err error, failures int) {
			s.log.Warn().Err(err).Str("key", key).Int("failures", failures).Msg("drift check failed; will retry")
		},
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		loop.Run(ctx)
	}()
	defer func() { <-done }()
	if s.opts.ReconcileEvery <= 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(s.opts.ReconcileEvery)
	defer t.Stop()
	for {
		if err := s.reconcileAll(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("drift reconcile failed; next at the next interval")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reconcileAll compares every observed record of this provider with List
// and queues a check of each machine that looks drifted. Observed KV is
// read before the provider, so a machine created in between shows up as
// an orphan candidate, never as gone; each candidate is confirmed under the
// machine's lock before anything is reported.
func (s *server) reconcileAll(ctx context.Context) error {
	rec, err := s.obs.list(ctx)
	if err != nil {
		return err
	}
	s.logBad(rec)
	list, err := s.p.List(ctx)
	if err != nil {
		return fmt.Errorf("list %s machines: %w", s.name, err)
	}
	real := make(map[string]*capnv1.InfraMachine, len(list))
	for _, m := range list {
		m = proto.Clone(m).(*capnv1.InfraMachine)
		s.obs.normalise(m, m.GetCluster(), m.GetMachine())
		real[InfraKey(s.name, m.GetCluster(), m.GetMachine())] = m
	}
	counts := map[string]int{}
	for key, e := range rec.machines {
		kind, next := classify(e.Value, real[key])
		if kind != "" || next != nil {
			counts[kind]++
			s.checks.Add(key)
		}
	}
	for key, m := range real {
		if _, ok := rec.machines[key]; !ok && !s.orphanReported(key, m.GetProviderId()) {
			counts[DriftOrphan]++
			s.checks.Add(key)
		}
	}
	s.forgetOrphans(real)
	ev := s.log.Debug()
	if len(counts) > 0 {
		ev = s.log.Info()
	}
	ev.Int("observed", len(rec.machines)).Int("real", len(real)).Int("gone", counts[DriftGone]).
		Int("stopped", counts[DriftStopped]).Int("changed", counts[DriftChanged]).
		Int("orphan", counts[DriftOrphan]).Int("repair", counts[""]).Msg("drift reconcile")
	s.passes.WithLabelValues(s.name).Inc()
	return nil
}

// check confirms and acts on the drift of one machine, under its lock:
// it reads observed KV and asks the provider again, classifies, publishes
// the DriftReport, then writes (compare-and-set on the revision read).
// Publishing first means a failed write retries with the same event id,
// which JetStream drops as a duplicate.
func (s *server) check(ctx context.Context, key string) (reconcile.Result, error) {
	k, err := keys.Parse(key)
	c, name := k.Cluster, k.Name
	if err != nil || k.Kind != keys.KindInfra || !k.Machine() {
		return reconcile.Result{}, nil
	}
	if err := errors.Join(ValidateName("cluster", c), ValidateName("machine", name)); err != nil {
		s.log.Warn().Err(err).Str("key", key).Msg("cannot report drift of a machine with an invalid name")
		return reconcile.Result{}, nil
	}
	log := s.log.With().Str("cluster", c).Str("machine", name).Logger()
	ctx = log.WithContext(ctx)
	unlock, err := s.locks.lock(ctx, key)
	if err != nil {
		return reconcile.Result{}, err
	}
	defer unlock()

	obs, rev, err := s.obs.machines.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		obs, err = nil, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	real, err := s.p.Describe(ctx, c, name)
	if errors.Is(err, ErrNotFound) {
		real, err = nil, nil
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("describe %s/%s: %w", c, name, err)
	}
	if real != nil {
		real = proto.Clone(real).(*capnv1.InfraMachine)
		s.obs.normalise(real, c, name)
	}
	kind, next := classify(obs, real)
	switch kind {
	case "":
	case DriftOrphan:
		if s.orphanReported(key, real.GetProviderId()) {
			return reconcile.Result{}, nil
		}
		msg := fmt.Sprintf("orphan: %s has machine %s (%s) that capn has no record of", s.name, name, real.GetProviderId())
		if err := s.report(ctx, kind, c, name, "orphan."+real.GetProviderId(), msg); err != nil {
			return reconcile.Result{}, err
		}
		s.markOrphan(key, real.GetProviderId())
		return reconcile.Result{}, nil
	default:
		msg := driftMessage(kind, obs, real)
		if err := s.report(ctx, kind, c, name, fmt.Sprintf("%s.%d", strings.ToLower(kind), rev), msg); err != nil {
			return reconcile.Result{}, err
		}
	}
	if next == nil {
		return reconcile.Result{}, nil
	}
	if kind == DriftGone {
		next.Updated = timestamppb.New(s.obs.now())
	}
	if _, err := s.obs.machines.Update(ctx, key, next, rev); err != nil {
		return reconcile.Result{}, err
	}
	zerolog.Ctx(ctx).Info().Str("drift", kind).Str("state", next.GetState()).Msg("observed infrastructure corrected")
	return reconcile.Result{}, nil
}

func driftMessage(kind string, obs, real *capnv1.InfraMachine) string {
	switch kind {
	case DriftGone:
		return fmt.Sprintf("machine %s (%s) no longer exists", obs.GetMachine(), obs.GetProviderId())
	case DriftStopped:
		return fmt.Sprintf("machine %s (%s) stopped out of band", obs.GetMachine(), obs.GetProviderId())
	default:
		return fmt.Sprintf("machine %s changed out of band: provider id %s is now %s", obs.GetMachine(), obs.GetProviderId(), real.GetProviderId())
	}
}

// report publishes a DriftReport on capn.evt.drift.<provider>.<cluster>.<machine>
// with id drift.<provider>.<cluster>.<machine>.<suffix>.
func (s *server) report(ctx context.Context, kind, cluster, machine, suffix, msg string) error {
	d := &capnv1.DriftReport{
		Provider: s.name, Cluster: cluster, Machine: machine, Kind: kind, Message: msg,
		Time: timestamppb.New(s.obs.now()),
	}
	id := events.Subject("drift", s.name, cluster, machine, suffix)
	zerolog.Ctx(ctx).Warn().Str("drift", kind).Str("event_id", id).Msg(msg)
	if _, err := s.pub.Publish(ctx, DriftSubject(s.name, cluster, machine), events.TypeDriftReport, id, d, events.WithSubject(machine)); err != nil {
		return err
	}
	s.drift.WithLabelValues(s.name, kind).Inc()
	return nil
}

func (s *server) orphanReported(key, providerID string) bool {
	s.orphansMu.Lock()
	defer s.orphansMu.Unlock()
	id, ok := s.orphans[key]
	return ok && id == providerID
}

func (s *server) markOrphan(key, providerID string) {
	s.orphansMu.Lock()
	defer s.orphansMu.Unlock()
	s.orphans[key] = providerID
}

// forgetOrphans drops reported orphans that no longer exist, so that one
// coming back is reported again.
func (s *server) forgetOrphans(real map[string]*capnv1.InfraMachine) {
	s.orphansMu.Lock()
	defer s.orphansMu.Unlock()
	for key := range s.orphans {
		if _, ok := real[key]; !ok {
			delete(s.orphans, key)
		}
	}
}
