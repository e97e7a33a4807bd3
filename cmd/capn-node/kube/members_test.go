package kube_test

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
)

// TestNodeGone: a control plane leaves etcd only once its own Node, seen
// registered before, is answered 404; nothing else the API server says
// (or fails to say) is a deletion.
func TestNodeGone(t *testing.T) {
	notFound := &kube.StatusError{Code: http.StatusNotFound}
	tests := []struct {
		name       string
		registered bool
		err        error
		gone       bool
	}{
		{"registered, 404", true, notFound, true},
		{"registered, 404 wrapped", true, fmt.Errorf("get node: %w", notFound), true},
		{"registered, found", true, nil, false},
		{"not registered yet, 404", false, notFound, false},
		{"registered, forbidden", true, &kube.StatusError{Code: http.StatusForbidden}, false},
		{"registered, API server failing", true, &kube.StatusError{Code: http.StatusServiceUnavailable}, false},
		{"registered, no answer", true, errors.New("dial tcp 10.0.0.1:6443: connect: connection refused"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := kube.NodeGone(tt.registered, tt.err); got != tt.gone {
				t.Errorf("NodeGone(%t, %v) = %t, want %t", tt.registered, tt.err, got, tt.gone)
			}
		})
	}
}

// TestSweepJoiningLearners: with JoinsBeforeNodeLabel (kubeadm labels a
// Node a control plane only after its member is promoted), a started
// learner without a Node is a machine joining: kept until the learner
// timeout, then removed; a dead voting member whose Node is gone is
// removed as before, one with a Node of any role never.
func TestSweepJoiningLearners(t *testing.T) {
	now := time.Unix(1000, 0)
	const timeout = 2 * time.Minute
	nodes := []string{"cp-0", "cp-1"}
	members := []kube.Member{cp0, cp1, joining}
	if got := kube.WithJoiningLearners(members, nodes); !slices.Equal(got, []string{"cp-0", "cp-1", "cp-5"}) {
		t.Fatalf("WithJoiningLearners = %v", got)
	}
	if !slices.Equal(nodes, []string{"cp-0", "cp-1"}) {
		t.Fatalf("WithJoiningLearners changed its argument: %v", nodes)
	}
	if got := kube.WithJoiningLearners([]kube.Member{cp0, ghost}, nodes); !slices.Equal(got, nodes) {
		t.Errorf("an unstarted learner has no name to add: %v", got)
	}
	tests := []struct {
		name      string
		members   []kube.Member
		health    kube.Health
		misses    map[kube.EtcdID]int
		firstSeen time.Time
		remove    string
	}{
		{"joining learner, just seen", members, healthOf(), nil, now, ""},
		{"joining learner within the timeout", members, healthOf(), nil, now.Add(-timeout + time.Second), ""},
		{"learner not promoted within the timeout", members, healthOf(), nil, now.Add(-timeout), "cp-5"},
		{"dead member without a Node, seen twice", []kube.Member{cp0, cp1, cp2}, healthOf(cp2.ID), map[kube.EtcdID]int{cp2.ID: 1}, now, "cp-2"},
		{"member without a Node that answers: it leaves by itself", []kube.Member{cp0, cp1, cp2}, healthOf(), map[kube.EtcdID]int{cp2.ID: 3}, now, ""},
	}
	// A promoted member whose Node is registered but not labelled a
	// control plane yet (the sweep lists Nodes of any role) is kept,
	// however long it does not answer.
	if p := kube.PlanSweep([]kube.Member{cp0, cp1, cp2}, healthOf(cp2.ID), "cp-0", kube.WithJoiningLearners(nil, []string{"cp-0", "cp-1", "cp-2"}),
		map[kube.EtcdID]int{cp2.ID: 5}, nil, timeout, now); p.Remove != nil {
		t.Errorf("removed %s, a joining member with its Node: %s", p.Remove.Name, p.Why)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := kube.PlanSweep(tt.members, tt.health, "cp-0", kube.WithJoiningLearners(tt.members, nodes), tt.misses,
				map[kube.EtcdID]time.Time{joining.ID: tt.firstSeen}, timeout, now)
			got := ""
			if p.Remove != nil {
				got = p.Remove.Name
			}
			if got != tt.remove {
				t.Errorf("remove %q (%s), want %q", got, p.Why, tt.remove)
			}
		})
	}
	// Without the rule (kube-local), the same learner goes at once.
	if p := kube.PlanSweep(members, healthOf(), "cp-0", nodes, nil, map[kube.EtcdID]time.Time{joining.ID: now}, timeout, now); p.Remove == nil || p.Remove.Name != "cp-5" {
		t.Errorf("kube-local's sweep kept a started learner without a Node: %+v", p)
	}
}
