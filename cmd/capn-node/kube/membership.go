package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/capn-dev/capn/schemas/annotations"
)

// The etcd membership of a running control plane (Cluster API's
// KubeadmControlPlane keeps it the same way, from the machines it
// removes):
//
//	every SweepEvery ─► own Node deleted after it was registered?
//	                    yes ─► leave: quorum kept without this member?
//	                           (else EtcdMemberRemoved=False QuorumAtRisk,
//	                           and again next time) ─► leader? hand
//	                           leadership to a healthy voting member ─►
//	                           remove its own member ─► stop every child ─►
//	                           EtcdMemberRemoved=True
//	                    no  ─► sweep: at most one member removed per pass,
//	                           only if quorum is kept (PlanSweep): a dead
//	                           member whose Node is gone, a learner that
//	                           never joined ─► EtcdMembersHealthy
//
// The machine-manager of a deleting control-plane machine waits for
// EtcdMemberRemoved=True (through the health-watcher's NodeHealth) before
// it deletes the machine's infrastructure.

// Condition types the runtime reports besides its own (KubeControlPlane).
const (
	// CondEtcdMemberRemoved is reported while and once a control plane
	// whose Node was deleted leaves etcd (the contract with the
	// machine-manager: schemas/annotations).
	CondEtcdMemberRemoved = annotations.CondEtcdMemberRemoved
	// CondEtcdMembersHealthy is every control plane's view of the etcd
	// membership: the voting members' health, and what its sweep removed
	// or refused to remove, and why.
	CondEtcdMembersHealthy = "EtcdMembersHealthy"
)

// Reasons of the etcd conditions.
const (
	ReasonLeaving         = "Leaving"
	ReasonQuorumAtRisk    = "QuorumAtRisk"
	ReasonRemovalFailed   = "RemovalFailed"
	ReasonMemberRemoved   = "MemberRemoved"
	ReasonMembersHealthy  = "MembersHealthy"
	ReasonMemberUnhealthy = "MemberUnhealthy"
	ReasonLeft            = "Left"
)

// NamedCondition is a condition with its type.
type NamedCondition struct {
	Type string
	Condition
}

// EtcdConditions are the etcd membership's conditions, by type.
func (r *Runtime) EtcdConditions() []NamedCondition {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []NamedCondition
	for t, c := range r.etcdConds {
		out = append(out, NamedCondition{Type: t, Condition: c})
	}
	slices.SortFunc(out, func(a, b NamedCondition) int { return strings.Compare(a.Type, b.Type) })
	return out
}

// EtcdCondition is the etcd condition of type t, if set.
func (r *Runtime) EtcdCondition(t string) (Condition, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.etcdConds[t]
	return c, ok
}

func (r *Runtime) setEtcdCondition(t string, c Condition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.etcdConds == nil {
		r.etcdConds = map[string]Condition{}
	}
	if r.etcdConds[t] != c {
		r.etcdConds[t] = c
		r.condSeq++
	}
}

// registeredMarker records that this machine's Node was registered once,
// so that a Node not found later means "deleted", never "not yet".
func (r *Runtime) registeredMarker() string {
	return filepath.Join(r.opts.DataDir, "capn-node", "kube-node-registered")
}

// leftMarker records that this machine left etcd: a restarted agent
// starts nothing again (its member is gone for good).
func (r *Runtime) leftMarker() string {
	return filepath.Join(r.opts.DataDir, "capn-node", "kube-etcd-left")
}

func (r *Runtime) wasRegistered() bool {
	b, err := os.ReadFile(r.registeredMarker())
	return err == nil && strings.TrimSpace(string(b)) == r.cfg.NodeName
}

func (r *Runtime) hasLeft() bool {
	_, err := os.Stat(r.leftMarker())
	return err == nil
}

// ownNodeDeleted is true when this machine's Node was registered before
// and the API server says it is not found now.
func (r *Runtime) ownNodeDeleted(ctx context.Context, c *Client) bool {
	if !r.wasRegistered() {
		return false
	}
	var n listedNode
	err := c.Get(ctx, "/api/v1/nodes/"+r.cfg.NodeName, &n)
	return IsStatus(err, http.StatusNotFound)
}

// learnerTimeout is Options.LearnerTimeout or its default.
func (r *Runtime) learnerTimeout() time.Duration {
	if r.opts.LearnerTimeout > 0 {
		return r.opts.LearnerTimeout
	}
	return DefaultLearnerTimeout
}

// manageMembers runs the membership loop until ctx ends or this machine
// has left etcd (see the package's drawing above).
func (r *Runtime) manageMembers(ctx context.Context, c *Client, etcd *Etcd) {
	st := &sweepState{misses: map[EtcdID]int{}, firstSeen: map[EtcdID]time.Time{}}
	t := time.NewTicker(SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if r.restoring.Load() {
			continue // the members and Nodes are being replaced (restore.go)
		}
		if r.ownNodeDeleted(ctx, c) {
			r.leave(ctx, etcd)
			return
		}
		r.sweep(ctx, c, etcd, st)
	}
}

// sweepState is what a sweep remembers between passes.
type sweepState struct {
	// misses counts the passes in a row a member was seen without a Node
	// and unhealthy.
	misses map[EtcdID]int
	// firstSeen is when each learner was first seen.
	firstSeen map[EtcdID]time.Time
}

// sweep is one pass: at most one member removed, if quorum allows, and
// EtcdMembersHealthy set to what it found and did. A pass is skipped while
// this machine's own Node is not listed (an answer that cannot be trusted,
// or a machine that is leaving).
func (r *Runtime) sweep(ctx context.Context, c *Client, etcd *Etcd, st *sweepState) {
	log := r.opts.Log
	nodes, err := controlPlaneNodes(ctx, c)
	if err != nil {
		return
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Metadata.Name)
	}
	if !slices.Contains(names, r.cfg.NodeName) {
		return
	}
	members, err := etcd.Members(ctx)
	if err != nil {
		r.setEtcdCondition(CondEtcdMembersHealthy, Condition{Status: "Unknown", Reason: ReasonMemberUnhealthy, Message: "kube-local: cannot list the etcd members: " + err.Error()})
		return
	}
	now := time.Now()
	learners := map[EtcdID]time.Time{}
	for _, m := range members {
		if m.IsLearner {
			learners[m.ID] = now
			if seen, ok := st.firstSeen[m.ID]; ok {
				learners[m.ID] = seen
			}
		}
	}
	st.firstSeen = learners
	health := etcd.MembersHealth(ctx, members)
	plan := PlanSweep(members, health, r.cfg.NodeName, names, st.misses, st.firstSeen, r.learnerTimeout(), now)
	misses := map[EtcdID]int{}
	for _, m := range members {
		if m.Started() && !m.IsLearner && m.Name != r.cfg.NodeName && !slices.Contains(names, m.Name) && !health.Healthy(m.ID) {
			misses[m.ID] = st.misses[m.ID] + 1
		}
	}
	st.misses = misses

	voting := slices.DeleteFunc(slices.Clone(members), func(m Member) bool { return m.IsLearner })
	state := DescribeHealth(voting, health)
	cond := Condition{Status: "True", Reason: ReasonMembersHealthy, Message: fmt.Sprintf("kube-local: %d voting etcd members: %s", len(voting), state)}
	for _, m := range voting {
		if !health.Healthy(m.ID) {
			cond.Status, cond.Reason = "False", ReasonMemberUnhealthy
		}
	}
	for _, m := range plan.Waiting {
		log.Debug().Str("member", m.ID.String()).Str("name", m.Name).Msg("an etcd member without a control-plane Node still answers: leaving it to remove itself")
	}
	if len(plan.Refused) > 0 && plan.Remove == nil {
		msg := errors.Join(plan.Refused...).Error()
		log.Warn().Str("refused", msg).Msg("not removing the etcd member of a control-plane machine that is gone: it would lose quorum")
		cond = Condition{Status: "False", Reason: ReasonQuorumAtRisk, Message: "kube-local: refused to remove an etcd member: " + msg}
	}
	if m := plan.Remove; m != nil {
		log.Info().Str("member", m.ID.String()).Str("name", memberName(*m)).Str("why", plan.Why).Int("members", len(members)).Msg("removing an etcd member")
		if err := etcd.Remove(ctx, m.ID); err != nil {
			log.Warn().Err(err).Str("member", m.ID.String()).Str("name", memberName(*m)).Msg("cannot remove the etcd member")
			cond = Condition{Status: "False", Reason: ReasonRemovalFailed, Message: fmt.Sprintf("kube-local: cannot remove etcd member %s (%s): %v", memberName(*m), plan.Why, err)}
		} else {
			log.Info().Str("member", m.ID.String()).Str("name", memberName(*m)).Int("members", len(members)-1).Msg("removed an etcd member")
			left := slices.DeleteFunc(slices.Clone(voting), func(x Member) bool { return x.ID == m.ID })
			cond = Condition{Status: "True", Reason: ReasonMemberRemoved, Message: fmt.Sprintf("kube-local: removed etcd member %s: %s; %d voting members left: %s",
				memberName(*m), plan.Why, len(left), DescribeHealth(left, health))}
			delete(st.misses, m.ID)
			delete(st.firstSeen, m.ID)
		}
	}
	r.setEtcdCondition(CondEtcdMembersHealthy, cond)
}

// leave takes this machine out of etcd, as kubeadm reset's etcd phase and
// Cluster API's control plane do, then stops every child and reports
// EtcdMemberRemoved=True. It tries again every SweepEvery until it is done
// or ctx ends, saying each time why not (EtcdMemberRemoved=False).
func (r *Runtime) leave(ctx context.Context, etcd *Etcd) {
	log := r.opts.Log
	r.leaving.Store(true)
	log.Info().Str("node", r.cfg.NodeName).Msg("this machine's Node was deleted: leaving the cluster's etcd")
	r.setCondition(Condition{Status: "False", Reason: ReasonLeaving, Message: "kube-local: the Node was deleted: leaving the cluster's etcd"})
	r.setEtcdCondition(CondEtcdMemberRemoved, Condition{Status: "False", Reason: ReasonLeaving, Message: "kube-local: leaving the cluster's etcd"})
	peer := url("https", netip.MustParseAddr(r.opts.Address), r.opts.Ports.EtcdPeer)
	t := time.NewTicker(SweepEvery)
	defer t.Stop()
	var done string
	for {
		var err error
		done, err = r.leaveOnce(ctx, etcd, peer)
		if err == nil {
			break
		}
		reason := ReasonRemovalFailed
		if qe := (*QuorumError)(nil); errors.As(err, &qe) {
			reason = ReasonQuorumAtRisk
		}
		log.Warn().Err(err).Str("reason", reason).Msg("cannot leave etcd yet")
		r.setEtcdCondition(CondEtcdMemberRemoved, Condition{Status: "False", Reason: reason, Message: "kube-local: " + err.Error()})
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	r.ready.Store(false)
	r.sup.Stop()
	if err := writeFile(r.leftMarker(), []byte(done+"\n"), 0o600); err != nil {
		log.Warn().Err(err).Msg("cannot record that this machine left etcd")
	}
	log.Info().Str("done", done).Msg("left the cluster's etcd; etcd, the API server and the rest are stopped")
	r.left(done)
	<-ctx.Done()
}

// left reports a machine that has left etcd.
func (r *Runtime) left(done string) {
	r.setCondition(Condition{Status: "False", Reason: ReasonLeft, Message: "kube-local: left the cluster (Node deleted, etcd member removed); nothing runs here"})
	r.setEtcdCondition(CondEtcdMemberRemoved, Condition{Status: "True", Reason: ReasonMemberRemoved, Message: "kube-local: " + done})
}

// leaveOnce makes one attempt: done says what was done, err why nothing
// was (a *QuorumError when removing this member would lose quorum).
func (r *Runtime) leaveOnce(ctx context.Context, etcd *Etcd, peer string) (string, error) {
	members, err := etcd.Members(ctx)
	if err != nil {
		return "", fmt.Errorf("list the etcd members: %w", err)
	}
	self, ok := ByPeerURL(members, peer)
	if !ok {
		return fmt.Sprintf("etcd member at %s already removed (by another control plane)", peer), nil
	}
	var others []string
	for _, m := range members {
		if m.ID != self.ID {
			others = append(others, m.ClientURLs...)
		}
	}
	health := etcd.MembersHealth(ctx, members)
	if err := CheckRemoval(members, health, self.ID); err != nil {
		return "", err
	}
	moved := ""
	if !self.IsLearner {
		own, err := etcd.At(self.ClientURLs)
		if err != nil {
			return "", err
		}
		defer own.Close()
		leader, err := own.Leader(ctx)
		if err != nil {
			return "", fmt.Errorf("find the etcd leader: %w", err)
		}
		if leader == self.ID {
			target, ok := leaderTarget(members, health, self.ID)
			if !ok {
				return "", fmt.Errorf("this member (%s) leads etcd and no other voting member is healthy to take over: %s", self.Name, DescribeHealth(members, health))
			}
			r.opts.Log.Info().Str("to", target.Name).Msg("this member leads etcd: moving leadership before removing it")
			if err := own.MoveLeader(ctx, target.ID); err != nil {
				return "", fmt.Errorf("move etcd leadership to %s: %w", target.Name, err)
			}
			moved = fmt.Sprintf(" after moving leadership to %s", target.Name)
		}
	}
	rest, err := etcd.At(others)
	if err != nil {
		return "", err
	}
	defer rest.Close()
	r.opts.Log.Info().Str("member", self.ID.String()).Str("name", self.Name).Msg("removing this machine's etcd member")
	if err := rest.Remove(ctx, self.ID); err != nil {
		return "", fmt.Errorf("remove this etcd member %s: %w", self.ID, err)
	}
	left := slices.DeleteFunc(slices.Clone(members), func(m Member) bool { return m.ID == self.ID || m.IsLearner })
	return fmt.Sprintf("etcd member %s (%s) removed%s; %d voting members left: %s", self.Name, self.ID, moved, len(left), DescribeHealth(left, health)), nil
}

// leaderTarget is the healthy voting member, other than self, to hand
// leadership to (the first by name).
func leaderTarget(members []Member, health Health, self EtcdID) (Member, bool) {
	var cands []Member
	for _, m := range members {
		if m.ID != self && !m.IsLearner && m.Started() && health.Healthy(m.ID) {
			cands = append(cands, m)
		}
	}
	if len(cands) == 0 {
		return Member{}, false
	}
	slices.SortFunc(cands, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return cands[0], true
}
