package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/rs/zerolog"
)

// Membership is one control plane's part in keeping the cluster's etcd
// membership in line with its control-plane Nodes (the drawing in
// membership.go): leaving once its own Node is deleted, and sweeping the
// members of machines that are gone. kube-local's runtime runs it over
// the etcd it runs; a real node's agent runs it over the stacked etcd
// member kubeadm made (package kubeadm). Set the fields, then call Run
// once; the fields are not changed after.
type Membership struct {
	// NodeName is this machine's Node, and its etcd member's name.
	NodeName string
	// PeerURL is this machine's etcd peer URL: how it finds its member.
	PeerURL string
	// Etcd asks the members (this machine's own first); Client asks the
	// cluster's API server.
	Etcd   *Etcd
	Client *Client
	// Flavour starts every condition message ("kube-local", "kubeadm").
	Flavour string
	// LearnerTimeout is how long a learner may stay unstarted or
	// unpromoted before the sweep removes it.
	LearnerTimeout time.Duration
	// JoinsBeforeNodeLabel: a joining machine's member may start before
	// its Node is a control plane (kubeadm registers the Node, or not yet,
	// without the control-plane label, and labels it only after its member
	// is promoted). The sweep then matches members to Nodes of any role,
	// and a started learner counts as having its Node: a member goes only
	// once no Node at all has its name and it does not answer, a learner
	// only after LearnerTimeout. Without it (kube-local, which registers
	// a control plane's Node already labelled) a member is matched to
	// control-plane Nodes only, and a started learner without one is a
	// machine that died joining: removed at once.
	JoinsBeforeNodeLabel bool
	Log                  zerolog.Logger
	// Registered reports whether this machine's Node was registered once:
	// only then does "not found" mean deleted.
	Registered func(ctx context.Context) bool
	// Paused, when set and true, skips a pass.
	Paused func() bool
	// SetCondition reports an etcd condition (CondEtcdMemberRemoved,
	// CondEtcdMembersHealthy).
	SetCondition func(typ string, c Condition)
	// Leaving, when set, is called once as this machine starts leaving.
	Leaving func()
}

// OwnNodeDeleted is true when this machine's Node was registered before
// and the API server says it is not found now (any other answer, or
// none, is not a deletion).
func (m *Membership) OwnNodeDeleted(ctx context.Context) bool {
	return NodeGone(m.Registered(ctx), m.ownNode(ctx))
}

func (m *Membership) ownNode(ctx context.Context) error {
	var n listedNode
	return m.Client.Get(ctx, "/api/v1/nodes/"+m.NodeName, &n)
}

// NodeGone decides from what the API server answered for a machine's own
// Node (getErr) whether the Node was deleted: only a Node registered
// before and now not found (404). A Node not registered yet, or an
// answer that is not a 404 (an API server that does not answer, refuses,
// fails), is never a deletion.
func NodeGone(registered bool, getErr error) bool {
	return registered && IsStatus(getErr, http.StatusNotFound)
}

func (m *Membership) say(msg string) string { return m.Flavour + ": " + msg }

// Run runs the membership loop every SweepEvery until ctx ends (left
// false) or this machine's Node was deleted and it left etcd: then done
// says what was done, and the caller stops what ran on the machine and
// reports EtcdMemberRemoved=True (MemberRemoved).
func (m *Membership) Run(ctx context.Context) (done string, left bool) {
	st := &sweepState{misses: map[EtcdID]int{}, firstSeen: map[EtcdID]time.Time{}}
	t := time.NewTicker(SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return "", false
		case <-t.C:
		}
		if m.Paused != nil && m.Paused() {
			continue
		}
		if m.OwnNodeDeleted(ctx) {
			return m.Leave(ctx)
		}
		m.sweep(ctx, st)
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
func (m *Membership) sweep(ctx context.Context, st *sweepState) {
	log := m.Log
	list := controlPlaneNodes
	if m.JoinsBeforeNodeLabel {
		list = allNodes
	}
	nodes, err := list(ctx, m.Client)
	if err != nil {
		return
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Metadata.Name)
	}
	if !slices.Contains(names, m.NodeName) {
		return
	}
	members, err := m.Etcd.Members(ctx)
	if err != nil {
		m.SetCondition(CondEtcdMembersHealthy, Condition{Status: "Unknown", Reason: ReasonMemberUnhealthy, Message: m.say("cannot list the etcd members: " + err.Error())})
		return
	}
	now := time.Now()
	learners := map[EtcdID]time.Time{}
	for _, mem := range members {
		if mem.IsLearner {
			learners[mem.ID] = now
			if seen, ok := st.firstSeen[mem.ID]; ok {
				learners[mem.ID] = seen
			}
		}
	}
	st.firstSeen = learners
	health := m.Etcd.MembersHealth(ctx, members)
	planNodes := names
	if m.JoinsBeforeNodeLabel {
		planNodes = WithJoiningLearners(members, names)
	}
	plan := PlanSweep(members, health, m.NodeName, planNodes, st.misses, st.firstSeen, m.LearnerTimeout, now)
	misses := map[EtcdID]int{}
	for _, mem := range members {
		if mem.Started() && !mem.IsLearner && mem.Name != m.NodeName && !slices.Contains(names, mem.Name) && !health.Healthy(mem.ID) {
			misses[mem.ID] = st.misses[mem.ID] + 1
		}
	}
	st.misses = misses

	voting := slices.DeleteFunc(slices.Clone(members), func(mem Member) bool { return mem.IsLearner })
	state := DescribeHealth(voting, health)
	cond := Condition{Status: "True", Reason: ReasonMembersHealthy, Message: m.say(fmt.Sprintf("%d voting etcd members: %s", len(voting), state))}
	for _, mem := range voting {
		if !health.Healthy(mem.ID) {
			cond.Status, cond.Reason = "False", ReasonMemberUnhealthy
		}
	}
	for _, mem := range plan.Waiting {
		log.Debug().Str("member", mem.ID.String()).Str("name", mem.Name).Msg("an etcd member without a control-plane Node still answers: leaving it to remove itself")
	}
	if len(plan.Refused) > 0 && plan.Remove == nil {
		msg := errors.Join(plan.Refused...).Error()
		log.Warn().Str("refused", msg).Msg("not removing the etcd member of a control-plane machine that is gone: it would lose quorum")
		cond = Condition{Status: "False", Reason: ReasonQuorumAtRisk, Message: m.say("refused to remove an etcd member: " + msg)}
	}
	if rm := plan.Remove; rm != nil {
		log.Info().Str("member", rm.ID.String()).Str("name", memberName(*rm)).Str("why", plan.Why).Int("members", len(members)).Msg("removing an etcd member")
		if err := m.Etcd.Remove(ctx, rm.ID); err != nil {
			log.Warn().Err(err).Str("member", rm.ID.String()).Str("name", memberName(*rm)).Msg("cannot remove the etcd member")
			cond = Condition{Status: "False", Reason: ReasonRemovalFailed, Message: m.say(fmt.Sprintf("cannot remove etcd member %s (%s): %v", memberName(*rm), plan.Why, err))}
		} else {
			log.Info().Str("member", rm.ID.String()).Str("name", memberName(*rm)).Int("members", len(members)-1).Msg("removed an etcd member")
			left := slices.DeleteFunc(slices.Clone(voting), func(x Member) bool { return x.ID == rm.ID })
			cond = Condition{Status: "True", Reason: ReasonMemberRemoved, Message: m.say(fmt.Sprintf("removed etcd member %s: %s; %d voting members left: %s",
				memberName(*rm), plan.Why, len(left), DescribeHealth(left, health)))}
			delete(st.misses, rm.ID)
			delete(st.firstSeen, rm.ID)
		}
	}
	m.SetCondition(CondEtcdMembersHealthy, cond)
}

// WithJoiningLearners is nodes and the names of the started learners: to
// PlanSweep, a learner of a machine still joining looks as if it had its
// Node, so it is removed only once it has not been promoted within the
// learner timeout (Membership.JoinsBeforeNodeLabel).
func WithJoiningLearners(members []Member, nodes []string) []string {
	out := slices.Clone(nodes)
	for _, mem := range members {
		if mem.IsLearner && mem.Started() && !slices.Contains(out, mem.Name) {
			out = append(out, mem.Name)
		}
	}
	return out
}

// Leave takes this machine out of etcd, as kubeadm reset's etcd phase and
// Cluster API's control plane do. It tries every SweepEvery until it is
// done (ok, done saying what was done) or ctx ends, reporting each time
// why not (EtcdMemberRemoved=False). The caller then stops what runs on
// the machine and reports EtcdMemberRemoved=True.
func (m *Membership) Leave(ctx context.Context) (done string, ok bool) {
	log := m.Log
	if m.Leaving != nil {
		m.Leaving()
	}
	log.Info().Str("node", m.NodeName).Msg("this machine's Node was deleted: leaving the cluster's etcd")
	m.SetCondition(CondEtcdMemberRemoved, Condition{Status: "False", Reason: ReasonLeaving, Message: m.say("leaving the cluster's etcd")})
	t := time.NewTicker(SweepEvery)
	defer t.Stop()
	for {
		done, err := m.leaveOnce(ctx)
		if err == nil {
			return done, true
		}
		reason := ReasonRemovalFailed
		if qe := (*QuorumError)(nil); errors.As(err, &qe) {
			reason = ReasonQuorumAtRisk
		}
		log.Warn().Err(err).Str("reason", reason).Msg("cannot leave etcd yet")
		m.SetCondition(CondEtcdMemberRemoved, Condition{Status: "False", Reason: reason, Message: m.say(err.Error())})
		select {
		case <-ctx.Done():
			return "", false
		case <-t.C:
		}
	}
}

// leaveOnce makes one attempt: done says what was done, err why nothing
// was (a *QuorumError when removing this member would lose quorum).
func (m *Membership) leaveOnce(ctx context.Context) (string, error) {
	members, err := m.Etcd.Members(ctx)
	if err != nil {
		return "", fmt.Errorf("list the etcd members: %w", err)
	}
	self, ok := ByPeerURL(members, m.PeerURL)
	if !ok {
		return fmt.Sprintf("etcd member at %s already removed (by another control plane)", m.PeerURL), nil
	}
	var others []string
	for _, mem := range members {
		if mem.ID != self.ID {
			others = append(others, mem.ClientURLs...)
		}
	}
	health := m.Etcd.MembersHealth(ctx, members)
	if err := CheckRemoval(members, health, self.ID); err != nil {
		return "", err
	}
	moved := ""
	if !self.IsLearner {
		own, err := m.Etcd.At(self.ClientURLs)
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
			m.Log.Info().Str("to", target.Name).Msg("this member leads etcd: moving leadership before removing it")
			if err := own.MoveLeader(ctx, target.ID); err != nil {
				return "", fmt.Errorf("move etcd leadership to %s: %w", target.Name, err)
			}
			moved = fmt.Sprintf(" after moving leadership to %s", target.Name)
		}
	}
	rest, err := m.Etcd.At(others)
	if err != nil {
		return "", err
	}
	defer rest.Close()
	m.Log.Info().Str("member", self.ID.String()).Str("name", self.Name).Msg("removing this machine's etcd member")
	if err := rest.Remove(ctx, self.ID); err != nil {
		return "", fmt.Errorf("remove this etcd member %s: %w", self.ID, err)
	}
	left := slices.DeleteFunc(slices.Clone(members), func(mem Member) bool { return mem.ID == self.ID || mem.IsLearner })
	return fmt.Sprintf("etcd member %s (%s) removed%s; %d voting members left: %s", self.Name, self.ID, moved, len(left), DescribeHealth(left, health)), nil
}
