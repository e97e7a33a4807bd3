package healthwatcher

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
)

// Reasons of an unhealthy verdict (the Type of each reason condition); a
// failed node condition is reported under its own type (e.g. KernelDeadlock).
const (
	ReasonInfrastructureGone = "InfrastructureGone"
	ReasonNodeStartupTimeout = "NodeStartupTimeout"
	ReasonMachineFailed      = "MachineFailed"
	// ConditionReady is the node's Ready condition, derived from heartbeats.
	ConditionReady = "Ready"
)

// State is what Evaluate looks at for one cluster.
type State struct {
	// ControlPlaneInitialized: the first control-plane machine ran (observed
	// cluster status). Until then worker machines are not judged.
	ControlPlaneInitialized bool
	// ControlPlaneInitializedAt is when it became so (zero if unknown); a
	// worker's node startup clock does not start before it.
	ControlPlaneInitializedAt time.Time
	Targets                   []Target
}

// Target is one machine as the health-watcher sees it.
type Target struct {
	Machine, Pool string
	ControlPlane  bool
	// Created is the machine incarnation's creation time.
	Created time.Time
	// Skip: not judged at all — deletion requested, or stopped on purpose
	// (hibernation), or Deleting/Deleted.
	Skip bool
	// Phase is the observed machine phase; PhaseSince when it began.
	Phase         capnv1.MachinePhase
	PhaseSince    time.Time
	FailureReason string
	// InfraReady is when the machine's infrastructure became ready (zero:
	// not yet): the node startup clock starts then.
	InfraReady time.Time
	// InfraGone is when the provider reported the infrastructure gone
	// (zero: it was not).
	InfraGone time.Time
	// LastHeartbeat is the latest heartbeat of the node (zero: it never
	// reported); Ready is what that heartbeat said.
	LastHeartbeat time.Time
	Ready         bool
	// Reported: the node reported in another way than a heartbeat (node
	// conditions, or the machine-manager saw it ready). Conditions only a
	// source the policy does not trust reported do not count.
	Reported bool
	// Conditions are the node's recorded conditions from every source. A
	// recorded Ready condition is replaced by the one derived from the
	// heartbeats (see EffectiveConditions) — except the Node's Ready (source
	// kubernetes), which is judged beside it.
	Conditions []*capnv1.NodeCondition
	// NodeName is the node's name (the record's node_name): the reasons of
	// conditions read from the Node name it.
	NodeName string
}

// Unhealthy is one machine that needs remediation.
type Unhealthy struct {
	Machine, Pool string
	ControlPlane  bool
	// Reasons: one condition per check that failed, Status False, with the
	// time it failed as LastTransitionTime.
	Reasons []*capnv1.Condition
	// Since is the earliest of the reasons' times: deterministic for one
	// episode, so an event id built from it dedupes re-evaluations.
	Since time.Time
}

// Policies are the effective policies by pool name; a pool missing from
// the map takes Default.
type Policies struct {
	ByPool  map[string]policy.Policy
	Default policy.Policy
}

// For returns the policy of pool.
func (p Policies) For(pool string) policy.Policy {
	if q, ok := p.ByPool[pool]; ok {
		return q
	}
	return p.Default
}

// Evaluate applies the health policy to every target at now. It is a pure
// function. It returns the machines that need remediation, sorted by name,
// and when the verdict of some target may change by the passing of time
// alone (0: never), as Cluster API's MachineHealthCheck does:
//
//  1. skipped targets, and workers while the control plane is not
//     initialised, are not judged;
//  2. a Failed machine is unhealthy (MachineFailed; the planner replaces it);
//  3. infrastructure reported gone makes it unhealthy at once;
//  4. a node that never reported (no heartbeat, no condition) is unhealthy NodeStartupTimeout after the
//     latest of creation, infrastructure ready and (for workers) control
//     plane initialised — if the timeout is not 0;
//  5. a node condition matching an unhealthy condition (type and status) for
//     at least its timeout makes it unhealthy — if the policy trusts its
//     source (policy.Policy.Trusts: a gateway token's only when listed;
//     an untrusted one does not count as a report in 4 either). Ready is
//     judged twice for a machine whose Node the health-watcher reads: as
//     derived from capn-node's heartbeats, and as the Node says (Cluster
//     API's MachineHealthCheck judges the latter) — each with the policy's
//     timeouts for Ready.
func Evaluate(s State, p Policies, now time.Time) ([]Unhealthy, time.Duration) {
	out, r := evaluate(s, p, now)
	if r.At.IsZero() {
		return out, 0
	}
	return out, r.At.Sub(now)
}

// Recheck is when the verdicts Evaluate made may change by the passing of
// time alone, split by what moves that time.
type Recheck struct {
	// At is the soonest of all (zero: never).
	At time.Time
	// Other is the soonest that heartbeats do not move (zero: none): a node
	// startup timeout, a condition's timeout.
	Other time.Time
	// Graces are, by machine, the heartbeat grace of each judged target
	// whose node is fresh: its Ready condition turns Unknown once its
	// latest heartbeat is that old, a time each heartbeat moves.
	Graces map[string]time.Duration
}

// evaluate is Evaluate with its recheck split (see Recheck).
func evaluate(s State, p Policies, now time.Time) ([]Unhealthy, Recheck) {
	var out []Unhealthy
	r := Recheck{Graces: map[string]time.Duration{}}
	soonest := func(next *time.Time, t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(*next)) {
			*next = t
		}
	}
	for _, t := range s.Targets {
		if t.Skip || (!t.ControlPlane && !s.ControlPlaneInitialized) {
			continue
		}
		pol := p.For(t.Pool)
		reasons, wake, grace := judge(t, s, pol, now)
		soonest(&r.Other, wake)
		soonest(&r.At, wake)
		if !grace.IsZero() {
			r.Graces[t.Machine] = pol.HeartbeatGrace
			soonest(&r.At, grace)
		}
		if len(reasons) == 0 {
			continue
		}
		u := Unhealthy{Machine: t.Machine, Pool: t.Pool, ControlPlane: t.ControlPlane, Reasons: reasons}
		for _, r := range reasons {
			if rt := r.GetLastTransitionTime().AsTime(); u.Since.IsZero() || rt.Before(u.Since) {
				u.Since = rt
			}
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b Unhealthy) int { return strings.Compare(a.Machine, b.Machine) })
	return out, r
}

// judge returns the failed checks of one target, the next time one of its
// checks may change that heartbeats do not move (zero: none), and when its
// heartbeat grace runs out (zero: it is not fresh).
func judge(t Target, s State, p policy.Policy, now time.Time) ([]*capnv1.Condition, time.Time, time.Time) {
	reason := func(typ, why, msg string, at time.Time) *capnv1.Condition {
		return &capnv1.Condition{Type: typ, Status: capnv1.ConditionFalse.Wire(), Reason: why, Message: msg, Severity: "Error",
			LastTransitionTime: timestamppb.New(at)}
	}
	switch {
	case t.Phase == capnv1.MachineFailed:
		return []*capnv1.Condition{reason(ReasonMachineFailed, orDefault(t.FailureReason, "Failed"),
			"the machine failed: the planner replaces it", t.PhaseSince)}, time.Time{}, time.Time{}
	case !t.InfraGone.IsZero():
		return []*capnv1.Condition{reason(ReasonInfrastructureGone, ReasonInfrastructureGone,
			"the provider no longer has this machine's infrastructure", t.InfraGone)}, time.Time{}, time.Time{}
	}
	if t.LastHeartbeat.IsZero() && !t.Reported && !slices.ContainsFunc(t.Conditions, func(c *capnv1.NodeCondition) bool { return p.Trusts(c.GetSource()) }) {
		if p.NodeStartupTimeout <= 0 || t.InfraReady.IsZero() {
			return nil, time.Time{}, time.Time{}
		}
		start := latest(t.Created, t.InfraReady)
		if !t.ControlPlane {
			start = latest(start, s.ControlPlaneInitializedAt)
		}
		deadline := start.Add(p.NodeStartupTimeout)
		if now.Before(deadline) {
			return nil, deadline, time.Time{}
		}
		return []*capnv1.Condition{reason(ReasonNodeStartupTimeout, ReasonNodeStartupTimeout,
			fmt.Sprintf("no node reported within %s of the infrastructure becoming ready", p.NodeStartupTimeout), deadline)}, time.Time{}, time.Time{}
	}
	var out []*capnv1.Condition
	var wake time.Time
	grace := ReadyWake(t.LastHeartbeat, p.HeartbeatGrace, now)
	conds := EffectiveConditions(t.Conditions, t.LastHeartbeat, t.Ready, p.HeartbeatGrace, now)
	for _, uc := range p.UnhealthyConditions {
		for _, c := range conds {
			if c.GetType() != uc.Type || c.GetStatus() != uc.Status || !p.Trusts(c.GetSource()) {
				continue // an untrusted source's condition is recorded, never judged
			}
			at := c.GetLastTransitionTime().AsTime().Add(uc.Timeout)
			if now.Before(at) {
				if wake.IsZero() || at.Before(wake) {
					wake = at
				}
				continue
			}
			msg := fmt.Sprintf("node condition %s=%s for at least %s", c.GetType(), c.GetStatus(), uc.Timeout)
			if fromNode(c) {
				msg = fmt.Sprintf("Node %s %s=%s for at least %s, read from the workload cluster", orDefault(t.NodeName, t.Machine), c.GetType(), c.GetStatus(), uc.Timeout)
			}
			if c.GetReason() != "" || c.GetMessage() != "" {
				msg += fmt.Sprintf(" (%s: %s)", c.GetReason(), c.GetMessage())
			}
			out = append(out, reason(c.GetType(), orDefault(c.GetReason(), c.GetType()+c.GetStatus()), msg, at))
		}
	}
	return out, wake, grace
}

// ReadyCondition derives the node's Ready condition from its heartbeats:
// nil if it never sent one; Unknown from lastHeartbeat+grace on; otherwise
// True or False as the last heartbeat said. prev is the condition recorded
// before: a status that did not change keeps its transition time, so the
// result is stable across evaluations (no write per heartbeat), and so does
// a move between False and Unknown.
func ReadyCondition(prev *capnv1.NodeCondition, lastHeartbeat time.Time, ready bool, grace time.Duration, now time.Time) *capnv1.NodeCondition {
	if lastHeartbeat.IsZero() {
		return nil
	}
	c := &capnv1.NodeCondition{Type: ConditionReady}
	switch {
	case !now.Before(lastHeartbeat.Add(grace)):
		c.Status, c.Reason = capnv1.ConditionUnknown.Wire(), "NodeStatusUnknown"
		c.Message = fmt.Sprintf("no heartbeat since %s (grace %s)", lastHeartbeat.UTC().Format(time.RFC3339), grace)
		c.LastHeartbeatTime = timestamppb.New(lastHeartbeat)
		c.LastTransitionTime = timestamppb.New(lastHeartbeat.Add(grace))
	case ready:
		c.Status, c.Reason = capnv1.ConditionTrue.Wire(), "KubeletReady"
		c.LastTransitionTime = timestamppb.New(lastHeartbeat)
	default:
		c.Status, c.Reason = capnv1.ConditionFalse.Wire(), "KubeletNotReady"
		c.LastTransitionTime = timestamppb.New(lastHeartbeat)
	}
	// Unchanged status keeps its transition; so does a node that stays not
	// ready (False ↔ Unknown: it went silent, or came back not ready): it
	// has not been ready since then, and its timeout must not restart.
	if prev != nil && prev.GetLastTransitionTime() != nil &&
		(prev.GetStatus() == c.GetStatus() || (prev.GetStatusValue() != capnv1.ConditionTrue && c.GetStatusValue() != capnv1.ConditionTrue)) {
		c.LastTransitionTime = prev.GetLastTransitionTime()
	}
	return c
}

// EffectiveConditions are the recorded conditions with Ready derived from
// the heartbeats (ReadyCondition, with the recorded Ready as prev) when the
// node sends them. The Node's Ready (source kubernetes) is kept as it is,
// beside the derived one. The input is not modified.
func EffectiveConditions(recorded []*capnv1.NodeCondition, lastHeartbeat time.Time, ready bool, grace time.Duration, now time.Time) []*capnv1.NodeCondition {
	if lastHeartbeat.IsZero() {
		return recorded
	}
	out := make([]*capnv1.NodeCondition, 0, len(recorded)+1)
	var prev *capnv1.NodeCondition
	for _, c := range recorded {
		if heartbeatReady(c) {
			prev = c
			continue
		}
		out = append(out, c)
	}
	return append(out, ReadyCondition(prev, lastHeartbeat, ready, grace, now))
}

// ReadyWake is when ReadyCondition may change by time alone: when a fresh
// node's grace runs out (zero: never).
func ReadyWake(lastHeartbeat time.Time, grace time.Duration, now time.Time) time.Time {
	if lastHeartbeat.IsZero() || !now.Before(lastHeartbeat.Add(grace)) {
		return time.Time{}
	}
	return lastHeartbeat.Add(grace)
}

func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
