package kube

import (
	"context"
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
// removes). The loop is Membership (members.go): kube-local's runtime
// runs it over the etcd it runs, a real node's agent over the stacked
// member kubeadm made (package kubeadm); what follows a leave (stopping
// what runs: kube-local's children, kubeadm's static pods) is each
// one's own:
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

// membership is this machine's part in the etcd membership (the loop
// kube-local and a kubeadm node's agent share: Membership).
func (r *Runtime) membership(c *Client, etcd *Etcd) *Membership {
	return &Membership{
		NodeName: r.cfg.NodeName, PeerURL: url("https", netip.MustParseAddr(r.opts.Address), r.opts.Ports.EtcdPeer),
		Etcd: etcd, Client: c, Flavour: "kube-local", LearnerTimeout: r.learnerTimeout(), Log: r.opts.Log,
		Registered:   func(context.Context) bool { return r.wasRegistered() },
		Paused:       r.restoring.Load, // the members and Nodes are being replaced (restore.go)
		SetCondition: r.setEtcdCondition,
		Leaving: func() {
			r.leaving.Store(true)
			r.setCondition(Condition{Status: "False", Reason: ReasonLeaving, Message: "kube-local: the Node was deleted: leaving the cluster's etcd"})
		},
	}
}

// ownNodeDeleted is true when this machine's Node was registered before
// and the API server says it is not found now.
func (r *Runtime) ownNodeDeleted(ctx context.Context, c *Client) bool {
	return r.membership(c, nil).OwnNodeDeleted(ctx)
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
	if done, left := r.membership(c, etcd).Run(ctx); left {
		r.stopLeft(ctx, done)
	}
}

// leave takes this machine out of etcd (Membership.Leave), then stops
// every child and reports EtcdMemberRemoved=True.
func (r *Runtime) leave(ctx context.Context, c *Client, etcd *Etcd) {
	if done, ok := r.membership(c, etcd).Leave(ctx); ok {
		r.stopLeft(ctx, done)
	}
}

// stopLeft stops every child of a machine that left etcd, records it and
// reports it, then waits for ctx to end.
func (r *Runtime) stopLeft(ctx context.Context, done string) {
	log := r.opts.Log
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
