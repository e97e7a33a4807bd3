package fleetmanager

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
	"github.com/capn-dev/capn/schemas/maintenance"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/schemas/topology"
	"github.com/capn-dev/capn/services/fleet-manager/wave"
)

// conditionRemediationBlocked is the remediator's condition
// (remediator.ConditionRemediationBlocked; services do not import each
// other).
const conditionRemediationBlocked = "RemediationBlocked"

// TypeRolloutEvent is the CloudEvents type of a RolloutEvent, suffixed
// .<what> (wavestarted, wavefinished, halted, resumed, aborted,
// completed).
const TypeRolloutEvent = "dev.capn.rollout"

var (
	newCluster       = store.New[capnv1.Cluster]()
	newClusterStatus = store.New[capnv1.ClusterStatus]()
	newRollout       = store.New[capnv1.Rollout]()
	newRolloutStatus = store.New[capnv1.RolloutStatus]()
	newClass         = store.New[capnv1.ClusterClass]()
	newRemediation   = store.New[capnv1.RemediationStatus]()
)

// reconcile makes one step of one rollout: plan, write the status
// (compare-and-set), make sure every cluster the status says is moving
// has the change (the plan's moves, and those of an earlier step whose
// write was lost), publish the events.
func (s *Service) reconcile(ctx context.Context, name string) (reconcile.Result, error) {
	log := zerolog.Ctx(ctx).With().Str("rollout", name).Logger()
	ctx = log.WithContext(ctx)
	e, ok := s.desired.Get(keys.Rollout(name))
	if !ok {
		return reconcile.Result{}, nil
	}
	ro, err := store.Decode(e.Value, newRollout)
	if err != nil {
		log.Warn().Err(err).Msg("rollout does not decode; skipped")
		return reconcile.Result{}, nil
	}
	var prev *capnv1.RolloutStatus
	var prevRev uint64
	if se, ok := s.observed.Get(keys.Rollout(name)); ok {
		if prev, err = store.Decode(se.Value, newRolloutStatus); err != nil {
			return reconcile.Result{}, fmt.Errorf("rollout %s status: %w", name, err)
		}
		prevRev = se.Revision
	}
	now := s.cfg.Now()
	change := ro.GetSpec().GetChange()
	var class *capnv1.ClusterClass
	if change.GetClass() != "" {
		ce, ok := s.desired.Get(keys.ClassRev(change.GetClass(), change.GetClassRevision()))
		if !ok {
			return reconcile.Result{}, fmt.Errorf("class %s revision %d not found", change.GetClass(), change.GetClassRevision())
		}
		if class, err = store.Decode(ce.Value, newClass); err != nil {
			return reconcile.Result{}, err
		}
	}
	res, desired := s.plan(ro, prev, now)
	if slices.ContainsFunc(res.Events, func(e wave.Event) bool { return e.Type == wave.EventHalted }) {
		// A halt stays until someone resumes the rollout: it is decided on
		// what the observed bucket holds now, not on a cache that may not
		// yet have the write that ended the fault (a resume right after a
		// cluster recovered would otherwise halt again on the old health).
		if err := s.observed.Sync(ctx); err != nil {
			return reconcile.Result{}, fmt.Errorf("confirm the halt on current health: %w", err)
		}
		res, desired = s.plan(ro, prev, now)
	}
	// A move whose change does not render or validate halts the rollout
	// before anything is written.
	for _, c := range res.Move {
		if _, err := applyChange(desired[c], change, class); err != nil {
			halt(res.Status, res.Move, c, fmt.Sprintf("cluster %s: the change does not apply: %v", c, err), now)
			res.Move = nil
			res.Events = append(res.Events, wave.Event{Type: wave.EventHalted, Wave: res.Status.GetCurrentWave(), Message: res.Status.GetHaltReason()})
			break
		}
	}
	if !proto.Equal(prev, res.Status) {
		log.Info().Str("phase", res.Status.GetPhase()).Int32("wave", res.Status.GetCurrentWave()).Int("moves", len(res.Move)).Int("events", len(res.Events)).Msg("rollout plan")
		if prevRev == 0 {
			_, err = s.statuses.Create(ctx, keys.Rollout(name), res.Status)
		} else {
			_, err = s.statuses.Update(ctx, keys.Rollout(name), res.Status, prevRev)
		}
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("write status: %w", err)
		}
	}
	// Every cluster Moving in the status must have the change: the plan's
	// moves, and any whose write an earlier step lost.
	var errs []error
	for _, c := range res.Status.GetClusters() {
		if c.GetState() != wave.ClusterMoving || res.Status.GetPhase() == wave.PhaseAborted {
			continue
		}
		if err := s.move(ctx, c.GetName(), change, class); err != nil {
			errs = append(errs, fmt.Errorf("move cluster %s: %w", c.GetName(), err))
		}
	}
	for _, ev := range res.Events {
		s.publish(ctx, ro, res.Status, ev)
	}
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	if !res.RecheckAt.IsZero() {
		return reconcile.Result{RequeueAfter: max(res.RecheckAt.Sub(now), 0)}, nil
	}
	return reconcile.Result{}, nil
}

// plan plans one step of ro from its last status and what is observed of
// its clusters, and returns the desired clusters it picks by name.
func (s *Service) plan(ro *capnv1.Rollout, prev *capnv1.RolloutStatus, now time.Time) (wave.Result, map[string]*capnv1.Cluster) {
	obs, desired := s.observe(ro)
	window := s.cfg.Window
	if window == nil {
		// The clusters' own maintenance windows (spec.maintenance): a
		// class revision a rollout brings is a change capn starts on its
		// own, so it waits for them as auto-patch does.
		window = func(c string, now time.Time) (bool, time.Time) {
			return maintenance.Open(desired[c].GetSpec().GetMaintenance(), now)
		}
	}
	return wave.Plan(wave.Input{Spec: ro.GetSpec(), Generation: ro.GetMetadata().GetGeneration(), Status: prev, Clusters: obs, Now: now, Window: window}), desired
}

// halt halts a planned status for a cluster whose change cannot be
// written (as wave.Plan halts for a regression).
// The planned moves go back to Pending: none was written.
func halt(st *capnv1.RolloutStatus, moves []string, cluster, reason string, now time.Time) {
	st.Phase = wave.PhaseHalted
	st.HaltReason = reason
	st.HaltedAt = timestamppb.New(now)
	for _, c := range st.GetClusters() {
		if slices.Contains(moves, c.GetName()) {
			c.State, c.MovedAt = wave.ClusterPending, nil
		}
		if c.GetName() == cluster {
			c.Message = reason
		}
	}
}

// observe is what the planner sees of the clusters the rollout picks (by
// its selector, among those the change applies to), with the desired
// clusters by name.
func (s *Service) observe(ro *capnv1.Rollout) ([]wave.Cluster, map[string]*capnv1.Cluster) {
	change := ro.GetSpec().GetChange()
	var out []wave.Cluster
	desired := map[string]*capnv1.Cluster{}
	for _, e := range s.desired.List(keys.ClusterPrefix) {
		c, err := store.Decode(e.Value, newCluster)
		if err != nil || c.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		if !manifest.SelectorMatches(ro.GetSpec().GetClusterSelector(), c.GetMetadata().GetLabels()) || !applies(c, change) {
			continue
		}
		name := c.GetMetadata().GetName()
		desired[name] = c
		wc := wave.Cluster{Name: name, AtChange: atChange(c, change)}
		if se, ok := s.observed.Get(keys.Cluster(name)); ok && wc.AtChange {
			if st, err := store.Decode(se.Value, newClusterStatus); err == nil {
				wc.Ready = st.GetPhase() == capnv1.ClusterReady.Wire() && st.GetObservedGeneration() >= c.GetMetadata().GetGeneration()
			}
		}
		for _, re := range s.observed.List(keys.RemediationsOf(name)) {
			r, err := store.Decode(re.Value, newRemediation)
			if err != nil {
				continue
			}
			wc.Machines += int(r.GetTotal())
			wc.UnhealthyMachines += int(r.GetUnhealthy())
			for _, cond := range r.GetConditions() {
				if cond.GetType() == conditionRemediationBlocked && cond.GetStatus() == capnv1.ConditionTrue.Wire() {
					wc.RemediationBlocked = true
				}
			}
		}
		out = append(out, wc)
	}
	return out, desired
}

// applies reports whether change is one for c: a class change for the
// class's clusters, a Kubernetes version for clusters without a class,
// variables for class clusters.
func applies(c *capnv1.Cluster, ch *capnv1.RolloutChange) bool {
	t := c.GetSpec().GetTopology()
	switch {
	case ch.GetClass() != "":
		return t.GetClass() == ch.GetClass()
	case ch.GetKubernetesVersion() != "":
		return t == nil
	default:
		return t != nil
	}
}

// atChange reports whether c already has the change.
func atChange(c *capnv1.Cluster, ch *capnv1.RolloutChange) bool {
	t := c.GetSpec().GetTopology()
	switch {
	case ch.GetClass() != "":
		return t.GetRevision() == ch.GetClassRevision()
	case ch.GetKubernetesVersion() != "":
		return c.GetSpec().GetKubernetesVersion() == ch.GetKubernetesVersion()
	default:
		for k, v := range ch.GetVariables() {
			if got, ok := t.GetVariables()[k]; !ok || got != v {
				return false
			}
		}
		return true
	}
}

// applyChange is c with the change: re-rendered from the class revision
// (or with the variables set), or at the Kubernetes version; defaulted and
// validated as the gateway would.
func applyChange(c *capnv1.Cluster, ch *capnv1.RolloutChange, class *capnv1.ClusterClass) (*capnv1.Cluster, error) {
	if c == nil {
		return nil, errors.New("the cluster is gone")
	}
	next := proto.CloneOf(c)
	switch {
	case ch.GetKubernetesVersion() != "":
		next.Spec.KubernetesVersion = ch.GetKubernetesVersion()
	default:
		topo := proto.CloneOf(c.GetSpec().GetTopology())
		if ch.GetClass() != "" {
			topo.Revision = ch.GetClassRevision()
		} else {
			if topo.Variables == nil {
				topo.Variables = map[string]string{}
			}
			maps.Copy(topo.Variables, ch.GetVariables())
		}
		if class == nil || class.GetMetadata().GetName() != topo.GetClass() || class.GetStatus().GetRevision() != topo.GetRevision() {
			return nil, fmt.Errorf("class %s revision %d is needed", topo.GetClass(), topo.GetRevision())
		}
		spec, err := topology.Render(class, topo)
		if err != nil {
			return nil, err
		}
		topology.KeepClusterOwned(spec, c.GetSpec())
		next.Spec = spec
	}
	next.ApiVersion, next.Kind, next.Status = manifest.APIVersion, manifest.KindCluster, nil // as the gateway stores it
	k := manifest.Validator{}.Check(next)
	if err := k.ValidateUpdate(c); err != nil {
		return nil, flattenErr(err)
	}
	next = k.Cluster()
	if !proto.Equal(c.GetSpec(), next.GetSpec()) {
		next.Metadata.Generation = max(c.GetMetadata().GetGeneration(), 1) + 1
	}
	return next, nil
}

func flattenErr(err error) error {
	var msgs []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			msgs = append(msgs, e.Error())
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	return err
}

// move writes the change to the desired cluster, a compare-and-set on
// the revision read, retried on a lost race; nothing when it has it.
func (s *Service) move(ctx context.Context, name string, ch *capnv1.RolloutChange, class *capnv1.ClusterClass) error {
	return store.RetryOnConflict(ctx, store.DefaultAttempts, func(ctx context.Context) error {
		cur, rev, err := s.clusters.Get(ctx, keys.Cluster(name))
		if errors.Is(err, store.ErrNotFound) {
			return nil // gone: the next plan skips it
		}
		if err != nil {
			return err
		}
		if atChange(cur, ch) {
			return nil
		}
		next, err := applyChange(cur, ch, class)
		if err != nil {
			return err
		}
		zerolog.Ctx(ctx).Info().Str("cluster", name).Msg("moving cluster to the rollout's change")
		_, err = s.clusters.Update(ctx, keys.Cluster(name), next, rev)
		return err
	})
}

// publish sends one wave event (capn.evt.rollout.<what>.<rollout>._),
// with an id that makes a retried publish a duplicate the stream drops.
func (s *Service) publish(ctx context.Context, ro *capnv1.Rollout, st *capnv1.RolloutStatus, ev wave.Event) {
	what := strings.ToLower(ev.Type)
	name := ro.GetMetadata().GetName()
	id := fmt.Sprintf("%s-%s-%d-%d", ro.GetMetadata().GetUid(), what, ev.Wave, st.GetObservedResume())
	msg := &capnv1.RolloutEvent{Rollout: name, Reason: ev.Type, Message: ev.Message, Wave: ev.Wave, Generation: ro.GetMetadata().GetGeneration()}
	if _, err := s.pub.Publish(ctx, events.EventSubject("rollout", what, name, keys.ClusterObject), TypeRolloutEvent+"."+what, id, msg); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Str("event", ev.Type).Msg("rollout event not published")
	}
}
