package healthwatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/events/store/clusterstate"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
	"github.com/capn-dev/capn/schemas/keys"
)

// The one write of a machine's record. A report is merged into the record
// once, the verdict is computed once from the merged record, and both are
// written together in one compare-and-set write: node.<c>.<m> changes once
// per change of a machine's health, and everything that watches it (the
// remediator, the machine-manager, this watcher's own evaluation) wakes
// once. An evaluation that time alone calls for (a timeout ran out) takes
// the same path without a report.

// from is where a write's first attempt starts: the machine's record as
// the watch cache holds it (nil: none of this incarnation) and the
// revision of its key (0: missing).
type from struct {
	node *capnv1.NodeHealth
	rev  uint64
}

// episode is a new unhealthy episode, published before the write that
// records its verdict.
type episode struct {
	cluster string
	target  Target
	v       *Unhealthy
	// reportAt is when the report that made the machine unhealthy reached
	// capn (zero: the verdict came with time alone).
	reportAt, now time.Time
}

// cachedFrom is the machine's record and revision as the watch cache holds
// them.
func (s *Service) cachedFrom(cluster, machine string, created time.Time) from {
	e, ok := s.observed.Get(keys.Node(cluster, machine))
	if !ok {
		return from{}
	}
	h, err := store.Decode(e.Value, newNodeHealth)
	if err != nil {
		return from{rev: e.Revision}
	}
	return from{node: ofIncarnation(h, created), rev: e.Revision}
}

// writeRecord makes the one write of node.<c>.<m> a change calls for.
// next makes the record to write from the current one (nil: none of the
// machine's incarnation) and names the new unhealthy episode in it, if
// any; store.ErrNoChange writes nothing. The first attempt starts from
// start — the watch cache: the watcher is the record's single writer, so
// the cache is nearly always current and a change that changes nothing
// costs no KV call — and writes on its revision; a lost race re-reads KV
// and calls next again (again true), up to store.DefaultAttempts times.
//
// A new episode is published before the write that records it, with an id
// of its own (unhealthy.<c>.<m>.<since ms>): if the write fails, or the
// process dies before it, the report's redelivery or the next evaluation
// finds the verdict still unrecorded and publishes it again under the same
// id, which JetStream drops within its duplicate window. Nothing is lost,
// and nothing is recorded that was not announced.
func (s *Service) writeRecord(ctx context.Context, cluster, machine string, created time.Time, start from,
	next func(cur *capnv1.NodeHealth, again bool) (*capnv1.NodeHealth, *episode, error)) (bool, error) {
	key := keys.Node(cluster, machine)
	wrote, attempt := false, 0
	err := store.RetryOnConflict(ctx, 0, func(ctx context.Context) error {
		attempt++
		cur, rev := start.node, start.rev
		if attempt > 1 {
			h, r, err := s.nodes.Get(ctx, key)
			switch {
			case errors.Is(err, store.ErrNotFound):
				cur, rev = nil, 0
			case err != nil:
				return err
			default:
				cur, rev = ofIncarnation(h, created), r
			}
		}
		n, ep, err := next(cur, attempt > 1)
		if errors.Is(err, store.ErrNoChange) {
			return nil
		}
		if err != nil {
			return err
		}
		if ep != nil {
			if err := s.publish(ctx, *ep); err != nil {
				return err
			}
		}
		if rev == 0 {
			_, err = s.nodes.Create(ctx, key, n)
		} else {
			_, err = s.nodes.Update(ctx, key, n, rev)
		}
		if err != nil {
			return err
		}
		wrote = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("record health of %s.%s: %w", cluster, machine, err)
	}
	return wrote, nil
}

// applyReport merges a report into the machine's record and judges the
// merged record, in one write. A merge that changes nothing writes
// nothing, and leaves the verdict to the evaluation.
func (s *Service) applyReport(ctx context.Context, r report, merge func(*capnv1.NodeHealth) bool) (bool, error) {
	now := s.cfg.Now()
	wrote, err := s.writeRecord(ctx, r.cluster, r.machine, r.created, s.cachedFrom(r.cluster, r.machine, r.created),
		func(cur *capnv1.NodeHealth, _ bool) (*capnv1.NodeHealth, *episode, error) {
			h := forIncarnation(cur, r.cluster, r.machine, r.created)
			if !merge(h) {
				return nil, nil, store.ErrNoChange
			}
			// Looked up only on a write: the record's first write sets it.
			h.NodeExpected = s.nodeExpected(r.cluster)
			next, ep := h, (*episode)(nil)
			if j, ok := s.judge(r.cluster, r.machine, h, now); ok {
				next, _ = view(h, r.cluster, j.target, j.beat, j.v, j.policy, s.cfg.PersistEvery, now)
				ep = newEpisode(r.cluster, j.target, h, j.v, r.at, now)
			}
			next.Updated = timestamppb.New(now)
			return next, ep, nil
		})
	if wrote {
		s.metrics.write(causeReport)
		s.beats.report(r.key, r.at)
	}
	return wrote, err
}

// judgement is one machine's verdict and what it was computed from.
type judgement struct {
	target Target
	beat   beat
	v      *Unhealthy
	policy policy.Policy
}

// judge evaluates one machine of cluster on the record node (nil: none)
// with the caches' view of everything else, as reconcile does for every
// machine of a cluster. ok is false when the machine is not judged at all
// (unknown, or a skipped target): its verdict is left as it is.
func (s *Service) judge(cluster, machine string, node *capnv1.NodeHealth, now time.Time) (judgement, bool) {
	st := clusterstate.Read(s.desired, s.observed, clusterstate.Query{Cluster: cluster, Parts: parts &^ clusterstate.Nodes,
		Only: map[string]struct{}{machine: {}}})
	m, ok := st.Machine(machine)
	if st.Cluster == nil || !ok {
		return judgement{}, false
	}
	nop := zerolog.Nop() // reconcile logs a partly invalid policy
	pols := s.policies(st.Cluster, &nop)
	state := stateOf(st)
	t, b := s.target(cluster, m, node, st.Cluster.GetSpec().GetHibernated())
	if t.Skip {
		return judgement{}, false
	}
	state.Targets = []Target{t}
	j := judgement{target: t, beat: b, policy: pols.For(t.Pool)}
	if unhealthy, _ := Evaluate(state, pols, now); len(unhealthy) > 0 {
		j.v = &unhealthy[0]
	}
	return j, true
}

// newEpisode is the episode v begins, if the record cur (nil: none) does
// not hold it already: a machine that was healthy, or unhealthy since
// another time.
func newEpisode(cluster string, t Target, cur *capnv1.NodeHealth, v *Unhealthy, reportAt, now time.Time) *episode {
	if v == nil || (!cur.GetHealthy() && cur.GetUnhealthySince() != nil && cur.GetUnhealthySince().AsTime().Equal(v.Since)) {
		return nil
	}
	return &episode{cluster: cluster, target: t, v: v, reportAt: reportAt, now: now}
}

// publish sends MachineUnhealthy for a new unhealthy episode, with an id
// per (machine, unhealthy since): re-evaluations of one episode are
// dropped by JetStream as duplicates. Its capnhealthtime is when the input
// that made the machine unhealthy reached capn: the report, or the latest
// report that changed the record, or when the timeout ran out.
func (s *Service) publish(ctx context.Context, ep episode) error {
	cluster, t, v := ep.cluster, ep.target, ep.v
	healthAt := latest(v.Since, ep.reportAt, s.beats.lastReport(cluster+"."+t.Machine))
	if healthAt.After(ep.now) {
		healthAt = ep.now
	}
	id := fmt.Sprintf("unhealthy.%s.%s.%d", cluster, t.Machine, v.Since.UnixMilli())
	ev := &capnv1.MachineUnhealthy{Cluster: cluster, Machine: t.Machine, Pool: t.Pool, Reasons: v.Reasons, Since: timestamppb.New(v.Since)}
	types := make([]string, 0, len(v.Reasons))
	for _, r := range v.Reasons {
		types = append(types, r.GetType())
		s.metrics.unhealthy(r.GetType())
	}
	zerolog.Ctx(ctx).Info().Str("machine", t.Machine).Str("pool", t.Pool).Strs("reasons", types).Time("since", v.Since).Msg("machine unhealthy")
	_, err := s.pub.Publish(ctx, events.EventSubject("machine", "unhealthy", cluster, t.Machine), events.TypeMachineUnhealthy, id, ev,
		events.WithSubject(t.Machine), events.WithExtension(policy.ExtensionHealthTime, healthAt.UTC().Format(time.RFC3339Nano)))
	return err
}
