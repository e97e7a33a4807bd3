package remediator

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/capn-dev/capn/schemas/health/policy"
)

// The guards are pure functions of a pool's state. Each answers whether an
// action may go ahead, and if not, a reason (the RemediationBlocked
// condition's) and a message with the numbers.

// Reasons of the RemediationBlocked condition.
const (
	BlockedPaused             = "Paused"
	BlockedTooManyUnhealthy   = "TooManyUnhealthy"
	BlockedMaxInFlight        = "MaxInFlight"
	BlockedControlPlaneBusy   = "ControlPlaneBusy"
	BlockedControlPlaneQuorum = "ControlPlaneQuorum"
	BlockedMinHealthyPeriod   = "MinHealthyPeriod"
	BlockedSkipped            = "SkipRemediation"
	NotBlocked                = "RemediationAllowed"
)

// Counts are a pool's numbers for the circuit breaker.
type Counts struct {
	// Total is the pool's size: its replicas, or its active machines if
	// there are more (during a rollout).
	Total int
	// Unhealthy: active machines judged unhealthy or failed, plus
	// replacements under way whose machine is no longer active (the
	// capacity is still missing).
	Unhealthy int
	// InFlight: repairs under way (records InProgress).
	InFlight int
}

// count computes a pool's Counts from its machines and its in-progress
// records.
func count(p Pool, inProgress []recordRef) Counts {
	c := Counts{}
	active := 0
	for _, m := range p.Machines {
		if m.Deleting {
			continue
		}
		active++
		if m.unhealthy() {
			c.Unhealthy++
		}
	}
	for _, r := range inProgress {
		c.InFlight++
		if r.rec.GetAction() == ActionReplace {
			if old, ok := incarnationAt(p.Machines, r.rec.GetMachine(), r.at); !ok || old.Deleting {
				c.Unhealthy++
			}
		}
	}
	c.Total = max(p.Replicas, active)
	return c
}

// breaker is the max-unhealthy circuit breaker (Cluster API's
// MachineHealthCheck short-circuit): repairs go on only while the
// unhealthy machines are within th.
func breaker(c Counts, th policy.Threshold) (ok bool, msg string) {
	pct := 0
	if c.Total > 0 {
		pct = c.Unhealthy * 100 / c.Total
	}
	if th.Allows(c.Unhealthy, c.Total) {
		return true, fmt.Sprintf("%d of %d machines unhealthy (%d%%), maxUnhealthy %s", c.Unhealthy, c.Total, pct, th.Describe(c.Total))
	}
	return false, fmt.Sprintf("%d of %d machines unhealthy (%d%%), more than maxUnhealthy %s allows: no machine is repaired until enough recover",
		c.Unhealthy, c.Total, pct, th.Describe(c.Total))
}

// inFlight bounds the repairs under way at once.
func inFlight(c Counts, maxInFlight int) (ok bool, msg string) {
	if c.InFlight < maxInFlight {
		return true, ""
	}
	return false, fmt.Sprintf("%d of at most %d repairs in flight", c.InFlight, maxInFlight)
}

// quorum protects etcd (KubeadmControlPlane's canSafelyRemoveEtcdMember):
// taking target down is allowed only if the members left, all but target,
// still hold a quorum of healthy ones: with n active members, the n-1 left
// need (n-1)/2+1 healthy. 3 members tolerate no other unhealthy one, 5
// tolerate one. Before the control plane is initialised there is no etcd to
// protect.
func quorum(machines []Machine, target string, initialized bool) (ok bool, msg string) {
	if !initialized {
		return true, ""
	}
	n, healthy := 0, 0
	for _, m := range machines {
		if m.Deleting {
			continue
		}
		n++
		if m.Name != target && m.healthy() {
			healthy++
		}
	}
	after := n - 1
	need := after/2 + 1
	if healthy >= need {
		return true, ""
	}
	return false, fmt.Sprintf("taking %s down would leave %d healthy of %d control-plane members; etcd quorum needs %d", target, healthy, after, need)
}

// minHealthy holds off repairing a machine that replaced another less
// than period ago (KubeadmControlPlane's minHealthyPeriod): a replacement
// that fails again so soon points at something a new machine does not
// fix, and repeating it would churn the pool. It returns when the machine
// may be repaired (zero: now).
func minHealthy(m Machine, p Pool, history []recordRef, period time.Duration, now time.Time) (until time.Time, msg string) {
	for _, r := range slices.Backward(history) {
		if r.rec.GetAction() != ActionReplace || !r.at.Before(m.Created) {
			continue
		}
		if repl, ok := replacementOf(p.Machines, r.at); !ok || repl.Name != m.Name || !repl.Created.Equal(m.Created) {
			continue
		}
		if u := r.at.Add(period); now.Before(u) {
			return u, fmt.Sprintf("%s replaced %s %s ago; it is repaired again after minHealthyPeriod %s (at %s)",
				m.Name, r.rec.GetMachine(), now.Sub(r.at).Round(time.Second), period, u.UTC().Format(time.RFC3339))
		}
		return time.Time{}, ""
	}
	return time.Time{}, ""
}

// severity ranks an unhealthy reason: lower is more broken.
func severity(typ, reason string) int {
	switch {
	case typ == policy.ReasonInfrastructureGone:
		return 0
	case typ == policy.ReasonNodeStartupTimeout:
		return 1
	case typ == policy.ConditionReady && reason == policy.ReasonNodeStatusUnknown:
		return 2
	case typ == policy.ConditionReady:
		return 3
	}
	return 4
}

// worst is a machine's most severe reason's rank.
func worst(m Machine) int {
	w := 5
	for _, r := range m.Reasons {
		w = min(w, severity(r.GetType(), r.GetReason()))
	}
	return w
}

// mostBrokenFirst orders repair candidates: the most severe reason first,
// then more reasons, then the oldest episode, then by name.
func mostBrokenFirst(a, b Machine) int {
	return cmp.Or(
		cmp.Compare(worst(a), worst(b)),
		cmp.Compare(len(b.Reasons), len(a.Reasons)),
		a.Since.Compare(b.Since),
		strings.Compare(a.Name, b.Name),
	)
}

// rebootable: a reboot may cure it. A machine whose infrastructure is
// gone, whose node never came up, or that failed is replaced directly.
func rebootable(m Machine) bool {
	if len(m.Reasons) == 0 {
		return false
	}
	for _, r := range m.Reasons {
		switch r.GetType() {
		case policy.ReasonInfrastructureGone, policy.ReasonNodeStartupTimeout, policy.ReasonMachineFailed:
			return false
		}
	}
	return true
}
