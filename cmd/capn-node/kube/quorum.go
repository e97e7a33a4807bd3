package kube

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Etcd quorum. A member is removed only when what is left can still decide:
// the voting members that remain must hold a healthy majority among
// themselves (Cluster API's KubeadmControlPlane checks the same before it
// removes a member: targetEtcdClusterHealthy). A learner does not vote, so
// removing one never risks quorum.

// Health is what was learnt of each member by asking it (MembersHealth):
// nil for a member that answered healthy, else why not.
type Health map[EtcdID]error

// Healthy reports whether id answered healthy.
func (h Health) Healthy(id EtcdID) bool {
	err, ok := h[id]
	return ok && err == nil
}

// QuorumError is a removal refused because it would leave etcd without a
// healthy majority. Its message names every remaining voting member and its
// health.
type QuorumError struct {
	Member    Member
	Remaining []Member
	Healthy   int
	Health    Health
}

func (e *QuorumError) Error() string {
	return fmt.Sprintf("removing etcd member %s would leave %d healthy of %d voting members, fewer than the %d a quorum needs: %s",
		memberName(e.Member), e.Healthy, len(e.Remaining), len(e.Remaining)/2+1, DescribeHealth(e.Remaining, e.Health))
}

// CheckRemoval is nil when removing the member id from members keeps a
// quorum: the voting members left after the removal must be at least one,
// and the healthy ones among them a majority of them. A learner (or a
// member that is not in the list) can always go.
func CheckRemoval(members []Member, health Health, id EtcdID) error {
	i := slices.IndexFunc(members, func(m Member) bool { return m.ID == id })
	if i < 0 || members[i].IsLearner {
		return nil
	}
	var remaining []Member
	healthy := 0
	for _, m := range members {
		if m.ID == id || m.IsLearner {
			continue
		}
		remaining = append(remaining, m)
		if health.Healthy(m.ID) {
			healthy++
		}
	}
	if len(remaining) == 0 || healthy < len(remaining)/2+1 {
		return &QuorumError{Member: members[i], Remaining: remaining, Healthy: healthy, Health: health}
	}
	return nil
}

// DescribeHealth says each member's health in one line, by name:
// "kl-cp-0 healthy, kl-cp-2 unhealthy (connection refused)".
func DescribeHealth(members []Member, health Health) string {
	var parts []string
	for _, m := range members {
		s := memberName(m)
		switch err, ok := health[m.ID]; {
		case !ok:
			s += " not asked"
		case err == nil:
			s += " healthy"
		default:
			s += " unhealthy (" + shortErr(err) + ")"
		}
		if m.IsLearner {
			s += " [learner]"
		}
		parts = append(parts, s)
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// memberName is a member's name, or its ID and peer URL while it has none.
func memberName(m Member) string {
	if m.Name != "" {
		return m.Name
	}
	return fmt.Sprintf("%s (unstarted, %s)", m.ID, strings.Join(m.PeerURLs, ","))
}

// shortErr keeps a health error readable in a condition message.
func shortErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && len(s) > 120 {
		s = s[i+2:]
	}
	return s
}

// SweepPlan is what one pass of a control plane's sweep found: at most one
// member to remove, and the members it had to leave alone, and why.
type SweepPlan struct {
	// Remove is the member to remove now (nil: none), and Why says why.
	Remove *Member
	Why    string
	// Refused are the removals that would lose quorum.
	Refused []error
	// Waiting are members without a control-plane Node that still answer:
	// a machine that leaves by itself (its agent removes its own member).
	Waiting []Member
}

// PlanSweep picks the member one sweep pass removes, one at a time and
// only when CheckRemoval allows it:
//
//   - a member, started, not self, whose name no control-plane Node has,
//     that did not answer its health check on two passes in a row (misses
//     counts the passes before this one): a machine that is gone. One that
//     still answers is left to leave by itself;
//   - a learner whose name no control-plane Node has, or that has not
//     started (or caught up and been promoted) within learnerTimeout of
//     firstSeen: its machine died while joining, and etcd allows one
//     learner at a time, so it would block the next join.
//
// Unhealthy candidates come first (removing them is what restores the
// margin), then by name.
func PlanSweep(members []Member, health Health, self string, nodes []string, misses map[EtcdID]int, firstSeen map[EtcdID]time.Time, learnerTimeout time.Duration, now time.Time) SweepPlan {
	var plan SweepPlan
	type candidate struct {
		m   Member
		why string
	}
	var cands []candidate
	for _, m := range members {
		hasNode := m.Started() && slices.Contains(nodes, m.Name)
		switch {
		case m.Name == self && m.Started():
		case m.IsLearner && !hasNode && m.Started():
			cands = append(cands, candidate{m, "a learner whose control-plane Node is gone"})
		case m.IsLearner:
			if seen, ok := firstSeen[m.ID]; ok && now.Sub(seen) >= learnerTimeout {
				state := "has not started"
				if m.Started() {
					state = "has not caught up to be promoted"
				}
				cands = append(cands, candidate{m, fmt.Sprintf("a learner that %s within %s: its machine does not join, and it would block the next join", state, learnerTimeout)})
			}
		case !m.Started() || hasNode:
		case health.Healthy(m.ID):
			plan.Waiting = append(plan.Waiting, m)
		case misses[m.ID] >= 1:
			cands = append(cands, candidate{m, "its control-plane Node is gone and it does not answer (" + shortErr(health[m.ID]) + ")"})
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		ha, hb := health.Healthy(a.m.ID), health.Healthy(b.m.ID)
		if ha != hb {
			if hb {
				return -1
			}
			return 1
		}
		return strings.Compare(memberName(a.m), memberName(b.m))
	})
	for _, c := range cands {
		if err := CheckRemoval(members, health, c.m.ID); err != nil {
			plan.Refused = append(plan.Refused, err)
			continue
		}
		m := c.m
		plan.Remove, plan.Why = &m, c.why
		break
	}
	return plan
}
