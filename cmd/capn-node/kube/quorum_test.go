package kube_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
)

var (
	cp0     = kube.Member{ID: 1, Name: "cp-0", ClientURLs: []string{"https://127.0.0.1:2379"}}
	cp1     = kube.Member{ID: 2, Name: "cp-1", ClientURLs: []string{"https://127.0.0.3:2379"}}
	cp2     = kube.Member{ID: 3, Name: "cp-2", ClientURLs: []string{"https://127.0.0.4:2379"}}
	cp3     = kube.Member{ID: 4, Name: "cp-3", ClientURLs: []string{"https://127.0.0.5:2379"}}
	cp4     = kube.Member{ID: 5, Name: "cp-4", ClientURLs: []string{"https://127.0.0.6:2379"}}
	ghost   = kube.Member{ID: 9, PeerURLs: []string{"https://127.0.0.9:2380"}, IsLearner: true}
	joining = kube.Member{ID: 8, Name: "cp-5", IsLearner: true}
	errDown = errors.New("connection refused")
)

func healthOf(dead ...kube.EtcdID) kube.Health {
	h := kube.Health{}
	for _, m := range []kube.Member{cp0, cp1, cp2, cp3, cp4} {
		h[m.ID] = nil
	}
	for _, id := range dead {
		h[id] = errDown
	}
	return h
}

func TestCheckRemoval(t *testing.T) {
	tests := []struct {
		name    string
		members []kube.Member
		health  kube.Health
		remove  kube.EtcdID
		refused bool
		says    string
	}{
		{"3 healthy, remove one", []kube.Member{cp0, cp1, cp2}, healthOf(), cp2.ID, false, ""},
		{"3 with one dead: a healthy one may not go", []kube.Member{cp0, cp1, cp2}, healthOf(cp2.ID), cp1.ID, true,
			"1 healthy of 2 voting members, fewer than the 2 a quorum needs: cp-0 healthy, cp-2 unhealthy (connection refused)"},
		{"3 with one dead: the dead one may go", []kube.Member{cp0, cp1, cp2}, healthOf(cp2.ID), cp2.ID, false, ""},
		{"2 healthy: one may go", []kube.Member{cp0, cp1}, healthOf(), cp1.ID, false, ""},
		{"2 with one dead: the healthy may not go", []kube.Member{cp0, cp1}, healthOf(cp1.ID), cp0.ID, true, "0 healthy of 1"},
		{"the last member never goes", []kube.Member{cp0}, healthOf(), cp0.ID, true, "0 voting members"},
		{"5 with two dead: a dead one may go", []kube.Member{cp0, cp1, cp2, cp3, cp4}, healthOf(cp3.ID, cp4.ID), cp4.ID, false, ""},
		{"5 with two dead: a healthy one may not", []kube.Member{cp0, cp1, cp2, cp3, cp4}, healthOf(cp3.ID, cp4.ID), cp0.ID, true, "2 healthy of 4"},
		{"a learner always may go", []kube.Member{cp0, ghost}, healthOf(), ghost.ID, false, ""},
		{"a learner does not vote", []kube.Member{cp0, cp1, joining}, healthOf(), cp1.ID, false, ""},
		{"a member not asked is not healthy", []kube.Member{cp0, cp1, cp2}, kube.Health{cp0.ID: nil}, cp0.ID, true, "cp-1 not asked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := kube.CheckRemoval(tt.members, tt.health, tt.remove)
			var qe *kube.QuorumError
			if tt.refused != (err != nil) || err != nil && !errors.As(err, &qe) {
				t.Fatalf("CheckRemoval = %v, refused want %t", err, tt.refused)
			}
			if err != nil && !strings.Contains(err.Error(), tt.says) {
				t.Errorf("%v, want it to say %q", err, tt.says)
			}
		})
	}
}

func TestPlanSweep(t *testing.T) {
	now := time.Unix(1000, 0)
	const timeout = 2 * time.Minute
	tests := []struct {
		name      string
		members   []kube.Member
		health    kube.Health
		nodes     []string
		misses    map[kube.EtcdID]int
		firstSeen map[kube.EtcdID]time.Time
		remove    string // name (or ID for an unstarted member), "" for none
		refused   int
		waiting   int
	}{
		{"all there", []kube.Member{cp0, cp1, cp2}, healthOf(), []string{"cp-0", "cp-1", "cp-2"}, nil, nil, "", 0, 0},
		{"dead, Node gone, seen once: not yet", []kube.Member{cp0, cp1, cp2}, healthOf(cp2.ID), []string{"cp-0", "cp-1"}, nil, nil, "", 0, 0},
		{"dead, Node gone, seen twice: removed", []kube.Member{cp0, cp1, cp2}, healthOf(cp2.ID), []string{"cp-0", "cp-1"}, map[kube.EtcdID]int{cp2.ID: 1}, nil, "cp-2", 0, 0},
		{"Node gone but it answers: it leaves by itself", []kube.Member{cp0, cp1, cp2}, healthOf(), []string{"cp-0", "cp-1"}, map[kube.EtcdID]int{cp2.ID: 3}, nil, "", 0, 1},
		{"dead with its Node: kept", []kube.Member{cp0, cp1, cp2}, healthOf(cp2.ID), []string{"cp-0", "cp-1", "cp-2"}, map[kube.EtcdID]int{cp2.ID: 3}, nil, "", 0, 0},
		{"two gone and dead of three: refused, quorum lost already", []kube.Member{cp0, cp1, cp2}, healthOf(cp1.ID, cp2.ID), []string{"cp-0"},
			map[kube.EtcdID]int{cp1.ID: 1, cp2.ID: 1}, nil, "", 2, 0},
		{"two gone of five, one per pass", []kube.Member{cp0, cp1, cp2, cp3, cp4}, healthOf(cp3.ID, cp4.ID), []string{"cp-0", "cp-1", "cp-2"},
			map[kube.EtcdID]int{cp3.ID: 1, cp4.ID: 1}, nil, "cp-3", 0, 0},
		{"self is never removed", []kube.Member{cp0, cp1}, healthOf(cp0.ID), []string{"cp-1"}, map[kube.EtcdID]int{cp0.ID: 5}, nil, "", 0, 0},
		{"unstarted learner within the timeout", []kube.Member{cp0, cp1, ghost}, healthOf(), []string{"cp-0", "cp-1"}, nil,
			map[kube.EtcdID]time.Time{ghost.ID: now.Add(-timeout + time.Second)}, "", 0, 0},
		{"unstarted learner past the timeout", []kube.Member{cp0, cp1, ghost}, healthOf(), []string{"cp-0", "cp-1"}, nil,
			map[kube.EtcdID]time.Time{ghost.ID: now.Add(-timeout)}, "9", 0, 0},
		{"unstarted learner first seen now", []kube.Member{cp0, cp1, ghost}, healthOf(), []string{"cp-0", "cp-1"}, nil, nil, "", 0, 0},
		{"started learner with its Node, not promoted in time", []kube.Member{cp0, joining}, healthOf(), []string{"cp-0", "cp-5"}, nil,
			map[kube.EtcdID]time.Time{joining.ID: now.Add(-time.Hour)}, "cp-5", 0, 0},
		{"started learner without a Node", []kube.Member{cp0, joining}, healthOf(), []string{"cp-0"}, nil, nil, "cp-5", 0, 0},
		{"a learner goes even with quorum at risk", []kube.Member{cp0, cp1, cp2, ghost}, healthOf(cp1.ID), []string{"cp-0", "cp-1", "cp-2"}, nil,
			map[kube.EtcdID]time.Time{ghost.ID: now.Add(-time.Hour)}, "9", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := kube.PlanSweep(tt.members, tt.health, "cp-0", tt.nodes, tt.misses, tt.firstSeen, timeout, now)
			got := ""
			if p.Remove != nil {
				got = p.Remove.Name
				if got == "" {
					got = p.Remove.ID.String()
				}
				if p.Why == "" {
					t.Error("a removal without a why")
				}
			}
			if got != tt.remove || len(p.Refused) != tt.refused || len(p.Waiting) != tt.waiting {
				t.Errorf("remove %q (%s), refused %v, waiting %v; want %q, %d refused, %d waiting", got, p.Why, p.Refused, p.Waiting, tt.remove, tt.refused, tt.waiting)
			}
		})
	}
}
