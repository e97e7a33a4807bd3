package remediator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/events/store/clusterstate"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/health/policy"
	"github.com/capn-dev/capn/schemas/keys"
)

// reconcile makes one remediation step for a cluster: snapshot → Decide →
// write each pool status that changed (compare-and-set on the revision
// read; the records of new repairs are in it) → act. The statuses are read
// from KV, not the watch cache, so that a reconcile right after a write
// never decides from a status that lacks its own last records.
func (s *Service) reconcile(ctx context.Context, cluster string) (reconcile.Result, error) {
	if s.cfg.OnReconcile != nil {
		s.cfg.OnReconcile(cluster)
	}
	log := zerolog.Ctx(ctx).With().Str("cluster", cluster).Logger()
	ctx = log.WithContext(ctx)
	snap, revs, ok, err := s.snapshot(ctx, cluster)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !ok {
		return reconcile.Result{}, s.forget(ctx, cluster)
	}
	d := Decide(snap, s.cfg.Timing)
	for i, st := range d.Statuses {
		prev := snap.Pools[i].Status
		if proto.Equal(st, prev) {
			continue
		}
		key := keys.Remediation(cluster, st.GetPool())
		if revs[st.GetPool()] == 0 {
			_, err = s.statuses.Create(ctx, key, st)
		} else {
			_, err = s.statuses.Update(ctx, key, st, revs[st.GetPool()])
		}
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("write %s: %w", key, err)
		}
		s.logBlocked(&log, prev, st)
	}
	var errs []error
	for _, a := range d.Actions {
		if err := s.act(ctx, cluster, a); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: d.RequeueAfter}, nil
}

// snapshot reads one cluster's state. ok is false when the cluster is gone.
func (s *Service) snapshot(ctx context.Context, cluster string) (Snapshot, map[string]uint64, bool, error) {
	state := clusterstate.Read(s.desired, s.observed, clusterstate.Query{Cluster: cluster,
		Parts: clusterstate.ClusterStatus | clusterstate.MachineStatuses | clusterstate.Nodes})
	cl := state.Cluster
	if cl == nil {
		return Snapshot{}, nil, false, nil
	}
	snap := Snapshot{Cluster: cluster, Paused: cl.GetSpec().GetPaused(), ControlPlaneInitialized: state.Status.GetControlPlaneInitialized(), Now: s.cfg.Now()}
	byPool := map[string][]Machine{}
	announcements := store.NewView(s.observed, store.New[capnv1.ProviderAnnouncement]())
	reboot := map[string]bool{}
	for _, sm := range state.Machines {
		m := sm.Desired
		p := m.GetSpec().GetProvider()
		if _, known := reboot[p]; !known {
			a, _, _ := announcements.Get(keys.Provider(p))
			reboot[p] = slices.Contains(a.GetCapabilities(), CapabilityReboot)
		}
		_, skip := m.GetMetadata().GetAnnotations()[AnnotationSkipRemediation]
		mc := Machine{Name: sm.Name, UID: m.GetMetadata().GetUid(), Provider: p, Created: m.GetMetadata().GetCreationTimestamp().AsTime(),
			Deleting: m.GetMetadata().GetDeletionTimestamp() != nil, Skip: skip, CanReboot: reboot[p], Phase: sm.Status.GetPhaseValue()}
		if h := sm.Node; h.GetUpdated() != nil && !h.GetUpdated().AsTime().Before(mc.Created) {
			mc.HealthUpdated = h.GetUpdated().AsTime()
			if !h.GetHealthy() && len(h.GetUnhealthyReasons()) > 0 {
				mc.Reasons, mc.Since = h.GetUnhealthyReasons(), h.GetUnhealthySince().AsTime()
			}
		}
		pool := m.GetSpec().GetPool()
		if m.GetSpec().GetRole() == "control-plane" {
			pool = policy.ControlPlanePool
		}
		byPool[pool] = append(byPool[pool], mc)
	}
	revs := map[string]uint64{}
	for _, pool := range policy.Pools(cl) {
		pol, err := policy.Resolve(cl, pool, s.cfg.Policy)
		if err != nil {
			zerolog.Ctx(ctx).Warn().Err(err).Str("pool", pool).Msg("health policy partly invalid; defaults used for the bad fields")
		}
		st, rev, err := s.statuses.Get(ctx, keys.Remediation(cluster, pool))
		switch {
		case errors.Is(err, store.ErrNotFound):
			st, rev = nil, 0
		case err != nil:
			return Snapshot{}, nil, false, err
		}
		revs[pool] = rev
		snap.Pools = append(snap.Pools, Pool{Name: pool, ControlPlane: pool == policy.ControlPlanePool, Replicas: policy.Replicas(cl, pool),
			Policy: pol, Machines: byPool[pool], Status: st})
	}
	return snap, revs, true, nil
}

// act carries out one action. Both are idempotent: the reboot command's id
// is its record's (JetStream drops a resend within its duplicate window),
// and the replacement sets deletion_timestamp only on the incarnation the
// record names, only once.
func (s *Service) act(ctx context.Context, cluster string, a Action) error {
	log := zerolog.Ctx(ctx).With().Str("machine", a.Machine).Str("pool", a.Pool).Str("action", a.Kind).Bool("redrive", a.Redrive).Logger()
	if !a.Redrive {
		log.Info().Str("reason", a.Reason).Msg("remediating machine")
	}
	switch a.Kind {
	case ActionReboot:
		id := fmt.Sprintf("remediate.reboot.%s.%s.%d", cluster, a.Machine, a.At.UnixMilli())
		cmd := &capnv1.MachinePower{Cluster: cluster, Machine: a.Machine, Action: ActionReboot}
		if _, err := s.pub.Publish(ctx, events.ProviderSubject(a.Provider, "machine", "reboot", cluster, a.Machine),
			events.TypeProviderCommand+".machine.reboot", id, cmd, events.WithSubject(a.Machine)); err != nil {
			return fmt.Errorf("reboot %s.%s: %w", cluster, a.Machine, err)
		}
	case ActionReplace:
		if err := s.replace(ctx, cluster, a); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown remediation action %q", a.Kind)
	}
	if !a.Redrive {
		s.metrics.acted(a.Kind, s.seen.take(cluster+"."+a.Machine), s.cfg.Now())
		s.timeline(ctx, cluster, a)
	}
	return nil
}

// replace asks the planner to replace the machine, as Cluster API's
// MachineHealthCheck deletes a Machine: it sets deletion_timestamp on the
// desired machine with a compare-and-set. The remediator is the second
// writer of desired machines (the planner owns them) and writes this one
// field only, only on the incarnation created no later than the record.
func (s *Service) replace(ctx context.Context, cluster string, a Action) error {
	_, _, err := s.machines.Mutate(ctx, keys.Machine(cluster, a.Machine), func(m *capnv1.Machine, exists bool) (*capnv1.Machine, error) {
		if !exists || m.GetMetadata().GetDeletionTimestamp() != nil || m.GetMetadata().GetCreationTimestamp().AsTime().After(a.At) {
			return nil, store.ErrNoChange
		}
		m.Metadata.DeletionTimestamp = timestamppb.New(s.cfg.Now())
		return m, nil
	})
	if err != nil {
		return fmt.Errorf("replace %s.%s: %w", cluster, a.Machine, err)
	}
	return nil
}

// timeline records a repair on the cluster's timeline
// (capn.evt.machine.remediation.<cluster>.<machine>). Best effort: the
// pool's history is the record.
func (s *Service) timeline(ctx context.Context, cluster string, a Action) {
	ev := &capnv1.MachineEvent{Cluster: cluster, Machine: a.Machine, Reason: "Remediation" + strings.ToUpper(a.Kind[:1]) + a.Kind[1:], Message: a.Reason}
	id := fmt.Sprintf("remediation.%s.%s.%s.%d", a.Kind, cluster, a.Machine, a.At.UnixMilli())
	if _, err := s.pub.Publish(ctx, events.EventSubject("machine", "remediation", cluster, a.Machine), events.TypeMachineEvent+".remediation", id, ev,
		events.WithSubject(a.Machine)); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("publish remediation event")
	}
}

// logBlocked logs a pool's RemediationBlocked condition when it changes.
func (s *Service) logBlocked(log *zerolog.Logger, prev, st *capnv1.RemediationStatus) {
	cur, old := blocked(st), blocked(prev)
	if cur.GetStatus() == old.GetStatus() && cur.GetReason() == old.GetReason() {
		return
	}
	if cur.GetStatusValue() == capnv1.ConditionTrue {
		s.metrics.blocked(cur.GetReason())
		log.Warn().Str("pool", st.GetPool()).Str("reason", cur.GetReason()).Int32("unhealthy", st.GetUnhealthy()).Int32("total", st.GetTotal()).
			Int32("in_flight", st.GetInFlight()).Msg(cur.GetMessage())
		return
	}
	log.Info().Str("pool", st.GetPool()).Msg("remediation allowed")
}

func blocked(st *capnv1.RemediationStatus) *capnv1.Condition {
	return conditions.Get(st.GetConditions(), ConditionRemediationBlocked)
}

// forget deletes the remediation statuses of a cluster that is gone.
func (s *Service) forget(ctx context.Context, cluster string) error {
	var errs []error
	for _, e := range s.observed.List(keys.RemediationsOf(cluster)) {
		if err := s.statuses.Delete(ctx, e.Key, e.Revision); err != nil && !errors.Is(err, store.ErrConflict) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
