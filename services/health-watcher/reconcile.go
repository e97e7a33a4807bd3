package healthwatcher

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/events/store/clusterstate"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
	"github.com/capn-dev/capn/schemas/keys"
)

// conditionControlPlaneInitialized is the cluster-planner's condition on
// the observed cluster status.
const conditionControlPlaneInitialized = "ControlPlaneInitialized"

// reconcile evaluates one cluster: it reads the cluster, its machines and
// their node health from the watch caches, calls Evaluate, writes each
// record whose derived Ready condition or verdict changed (compare-and-set
// on a fresh read), publishes MachineUnhealthy for each new verdict before
// writing it, and removes records of machines that are gone.
func (s *Service) reconcile(ctx context.Context, cluster string) (reconcile.Result, error) {
	now := s.cfg.Now()
	only, renewable := s.pending.take(cluster, now)
	if renewable {
		// The wake came and nothing changed: if every node the last
		// evaluations counted on has sent a heartbeat since, no verdict
		// can have changed; wake again when the next grace runs out,
		// without decoding the cluster.
		lastBeat := func(m string) time.Time { return s.beats.lastBeat(cluster + "." + m).at }
		if wake, ok := s.pending.renew(cluster, now, now.Add(s.cfg.ResyncEvery), lastBeat); ok {
			s.metrics.renewed()
			return reconcile.Result{RequeueAfter: max(wake.Sub(now), time.Millisecond)}, nil
		}
	}
	start := time.Now()
	defer func() { s.metrics.evaluated(time.Since(start)) }()
	log := zerolog.Ctx(ctx).With().Str("cluster", cluster).Logger()
	ctx = log.WithContext(ctx)
	in, cl := s.snapshot(cluster, only)
	if cl == nil {
		s.pending.forget(cluster)
		return reconcile.Result{}, s.forgetGone(ctx, cluster, nil)
	}
	pols := s.policies(cl, &log)
	unhealthy, r := evaluate(in.state, pols, now)
	verdicts := make(map[string]*Unhealthy, len(unhealthy))
	for i := range unhealthy {
		verdicts[unhealthy[i].Machine] = &unhealthy[i]
	}
	var errs []error
	for _, t := range in.state.Targets {
		if t.Skip {
			continue
		}
		if err := s.record(ctx, cluster, t, in.nodes[t.Machine], in.beats[t.Machine], verdicts[t.Machine], pols.For(t.Pool), now); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, s.forgetGone(ctx, cluster, in.names))
	if err := errors.Join(errs...); err != nil {
		s.pending.mark(cluster, "") // the retry evaluates everything
		return reconcile.Result{}, err
	}
	at := now.Add(s.cfg.ResyncEvery)
	if !r.At.IsZero() && r.At.Before(at) {
		at = r.At
	}
	wake := s.pending.evaluated(cluster, only, at, r)
	return reconcile.Result{RequeueAfter: max(wake.Sub(now), time.Millisecond)}, nil
}

// touch asks for an evaluation of machine of cluster ("": of every
// machine of cluster).
func (s *Service) touch(cluster, machine string) {
	s.pending.mark(cluster, machine)
	s.queue.Add(cluster)
}

// input is one cluster's evaluation input and the records it was built from.
type input struct {
	state State
	nodes map[string]from // by machine: the incarnation's record (nil if none) and the key's revision
	beats map[string]beat // by machine: its latest heartbeat
	names map[string]bool // machines in desired
}

// parts is what the health-watcher reads of a cluster's observed state.
const parts = clusterstate.ClusterStatus | clusterstate.MachineStatuses | clusterstate.Nodes | clusterstate.MachineInfra

// snapshot builds Evaluate's input from the caches: a target for each
// machine in only (nil: for every machine), and the names of all. cl is
// the desired cluster, nil when there is none (or it does not decode).
func (s *Service) snapshot(cluster string, only map[string]struct{}) (in input, cl *capnv1.Cluster) {
	st := clusterstate.Read(s.desired, s.observed, clusterstate.Query{Cluster: cluster, Parts: parts, Only: only})
	if st.Cluster == nil {
		return input{}, nil
	}
	in = input{state: stateOf(st), nodes: map[string]from{}, beats: map[string]beat{}, names: map[string]bool{}}
	for _, name := range st.Names {
		in.names[name] = true
	}
	for _, m := range st.Machines {
		f := from{node: ofIncarnation(m.Node, m.Desired.GetMetadata().GetCreationTimestamp().AsTime()), rev: m.NodeRevision}
		t, b := s.target(cluster, m, f.node, st.Cluster.GetSpec().GetHibernated())
		in.nodes[m.Name], in.beats[m.Name] = f, b
		in.state.Targets = append(in.state.Targets, t)
	}
	return in, st.Cluster
}

// stateOf is Evaluate's cluster-wide input, without targets.
func stateOf(st clusterstate.State) State {
	cp := controlPlaneOf(st.Status)
	return State{ControlPlaneInitialized: cp.initialized, ControlPlaneInitializedAt: cp.at}
}

// target is machine m of cluster as Evaluate sees it, with node its record
// (nil: none of this incarnation), and the node's latest heartbeat.
func (s *Service) target(cluster string, m clusterstate.Machine, node *capnv1.NodeHealth, hibernated bool) (Target, beat) {
	dm, st := m.Desired, m.Status
	created := dm.GetMetadata().GetCreationTimestamp().AsTime()
	t := Target{
		Machine: m.Name, Pool: dm.GetSpec().GetPool(), ControlPlane: dm.GetSpec().GetRole() == "control-plane" || dm.GetSpec().GetPool() == policy.ControlPlanePool,
		Created: created, Phase: st.GetPhaseValue(), PhaseSince: st.GetPhaseSince().AsTime(), FailureReason: st.GetFailureReason(),
		Conditions: node.GetConditions(), NodeName: node.GetNodeName(),
		Reported: st.GetNodeReadyTime() != nil,
	}
	switch t.Phase {
	case capnv1.MachineDeleting, capnv1.MachineDeleted, capnv1.MachineStopped:
		t.Skip = true
	}
	if dm.GetMetadata().GetDeletionTimestamp() != nil || dm.GetSpec().GetStopped() || hibernated {
		t.Skip = true
	}
	if st.GetInfrastructureReadyTime() != nil {
		t.InfraReady = st.GetInfrastructureReadyTime().AsTime()
	}
	t.InfraGone = infraGone(m.Infra, node, created)
	b := s.lastHeartbeat(cluster+"."+m.Name, node, created)
	t.LastHeartbeat, t.Ready = b.at, b.ready
	return t, b
}

// infraGone is when the machine's infrastructure was reported gone: a Gone
// drift report of this incarnation, or the provider's record im marked
// Deleted while the machine was not being deleted. Zero if neither.
func infraGone(im *capnv1.InfraMachine, node *capnv1.NodeHealth, created time.Time) time.Time {
	if d := node.GetDrift(); d.GetKind() == DriftGone && !d.GetTime().AsTime().Before(created) {
		return d.GetTime().AsTime()
	}
	if im.GetStateValue() == capnv1.InfraDeleted && im.GetUpdated() != nil && !im.GetUpdated().AsTime().Before(created) {
		return im.GetUpdated().AsTime()
	}
	return time.Time{}
}

// lastHeartbeat is the latest heartbeat of a machine's node: the one seen
// since the watcher started, or the one recorded. A node that was fresh
// when its record was last written counts as heard from when the watcher
// started, so that a restart of the watcher never declares a fleet silent
// at once (kube-controller-manager's node lifecycle controller does the
// same); one recorded as silent stays silent.
func (s *Service) lastHeartbeat(key string, node *capnv1.NodeHealth, created time.Time) beat {
	b := s.beats.lastBeat(key)
	if b.at.Before(created) {
		b = beat{} // an earlier machine of the same name
	}
	if rec := node.GetLastHeartbeat(); rec != nil && !b.at.After(rec.AsTime()) {
		b = beat{at: rec.AsTime(), ready: node.GetReady(), kubeletVersion: node.GetKubeletVersion(), nodeName: node.GetNodeName()}
	}
	if !b.at.IsZero() && b.at.Before(s.started) && readyStatus(node) != capnv1.ConditionUnknown {
		b.at = s.started
	}
	return b
}

// record brings the machine's record in line with the evaluation: the
// derived Ready condition and the verdict, in one write (writeRecord: a
// new unhealthy episode is published first, so that a failed write is
// retried with the same event id). The first attempt writes what the
// evaluation computed from the record it read (start); if another write
// got there first, the machine is judged again on the record now stored.
func (s *Service) record(ctx context.Context, cluster string, t Target, start from, b beat, v *Unhealthy, p policy.Policy, now time.Time) error {
	healed := false
	wrote, err := s.writeRecord(ctx, cluster, t.Machine, t.Created, start, func(cur *capnv1.NodeHealth, again bool) (*capnv1.NodeHealth, *episode, error) {
		t, b, v, p := t, b, v, p
		if again {
			j, ok := s.judge(cluster, t.Machine, cur, now)
			if !ok {
				return nil, nil, store.ErrNoChange
			}
			t, b, v, p = j.target, j.beat, j.v, j.policy
		}
		next, changed := view(cur, cluster, t, b, v, p, s.cfg.PersistEvery, now)
		if !changed {
			return nil, nil, store.ErrNoChange
		}
		next.Updated = timestamppb.New(now)
		healed = v == nil && cur.GetUnhealthySince() != nil
		return next, newEpisode(cluster, t, cur, v, time.Time{}, now), nil
	})
	if err != nil || !wrote {
		return err
	}
	s.metrics.write(causeVerdict)
	if healed {
		zerolog.Ctx(ctx).Info().Str("machine", t.Machine).Msg("machine healthy again")
	}
	return nil
}

// view is the record the evaluation calls for, from cur (nil: none) and
// the node's latest heartbeat b. It reports whether it differs from cur.
// The heartbeat is written (time and what it said, together) when the
// record changes anyway or the recorded one is persistEvery old. No record
// is made for a healthy machine that has none: the first heartbeat or
// report makes it.
func view(cur *capnv1.NodeHealth, cluster string, t Target, b beat, v *Unhealthy, p policy.Policy, persistEvery time.Duration, now time.Time) (*capnv1.NodeHealth, bool) {
	if cur == nil && v == nil {
		return nil, false
	}
	next := &capnv1.NodeHealth{Cluster: cluster, Machine: t.Machine}
	if cur != nil {
		next = proto.Clone(cur).(*capnv1.NodeHealth)
	}
	var prev *capnv1.NodeCondition
	i := slices.IndexFunc(next.Conditions, heartbeatReady)
	if i >= 0 {
		prev = next.Conditions[i]
	}
	if ready := ReadyCondition(prev, t.LastHeartbeat, t.Ready, p.HeartbeatGrace, now); ready != nil {
		if i >= 0 {
			next.Conditions[i] = ready
		} else {
			next.Conditions = append(next.Conditions, ready)
			slices.SortFunc(next.Conditions, compareConditions)
		}
	}
	next.Healthy, next.UnhealthyReasons, next.UnhealthySince = true, nil, nil
	if v != nil {
		next.Healthy, next.UnhealthyReasons, next.UnhealthySince = false, v.Reasons, timestamppb.New(v.Since)
	}
	changed := cur == nil || !proto.Equal(next, cur)
	rec := next.GetLastHeartbeat()
	if !b.at.IsZero() && (rec == nil || b.at.After(rec.AsTime())) && (changed || b.at.Sub(rec.AsTime()) >= persistEvery) {
		next.LastHeartbeat, next.Ready = timestamppb.New(b.at), b.ready
		if b.kubeletVersion != "" {
			next.KubeletVersion = b.kubeletVersion
		}
		if b.nodeName != "" {
			next.NodeName = b.nodeName
		}
		changed = true
	}
	return next, changed
}

// forgetGone deletes the records (and the memory) of machines of cluster
// that are no longer desired; keep nil means the whole cluster is gone.
func (s *Service) forgetGone(ctx context.Context, cluster string, keep map[string]bool) error {
	prefix := keys.Node(cluster, "")
	var errs []error
	for _, e := range s.observed.List(prefix) {
		name := strings.TrimPrefix(e.Key, prefix)
		if keep[name] {
			continue
		}
		if err := s.nodes.Delete(ctx, e.Key, e.Revision); err != nil && !errors.Is(err, store.ErrConflict) {
			errs = append(errs, err)
		}
		s.beats.forget(cluster + "." + name)
		s.facts.forget(cluster + "." + name)
	}
	for _, k := range s.beats.keys(cluster) {
		if !keep[strings.TrimPrefix(k, cluster+".")] {
			s.beats.forget(k)
			s.facts.forget(k)
		}
	}
	return errors.Join(errs...)
}

// policies resolves the effective policy of every pool of cl.
func (s *Service) policies(cl *capnv1.Cluster, log *zerolog.Logger) Policies {
	def, err := policy.Resolve(cl, "", s.cfg.Policy)
	if err != nil {
		log.Warn().Err(err).Msg("health policy partly invalid; defaults used for the bad fields")
	}
	out := Policies{Default: def, ByPool: map[string]policy.Policy{}}
	for _, pool := range policy.Pools(cl) {
		p, err := policy.Resolve(cl, pool, s.cfg.Policy)
		if err != nil {
			log.Warn().Err(err).Str("pool", pool).Msg("health policy partly invalid; defaults used for the bad fields")
		}
		out.ByPool[pool] = p
	}
	return out
}
