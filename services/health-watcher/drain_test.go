package healthwatcher

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func deletingStatus(deletingReason string, drain ...string) *capnv1.MachineStatus {
	st := &capnv1.MachineStatus{Phase: capnv1.MachineDeleting.Wire()}
	st.Conditions = append(st.Conditions, &capnv1.Condition{Type: "Deleting", Status: "True", Reason: deletingReason})
	if len(drain) == 2 {
		st.Conditions = append(st.Conditions, &capnv1.Condition{Type: "DrainingSucceeded", Status: drain[0], Reason: drain[1]})
	}
	return st
}

// TestNodeDeletionHold: a deleting machine's Node is kept until its
// deletion got past the drain, and drained while the machine-manager
// asks for it.
func TestNodeDeletionHold(t *testing.T) {
	m := &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: "w-1", DeletionTimestamp: timestamppb.Now()}}
	excluded := &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: "w-1", Annotations: map[string]string{annotations.ExcludeNodeDraining: ""}}}
	tests := []struct {
		name        string
		dm          *capnv1.Machine
		st          *capnv1.MachineStatus
		hold, drain bool
	}{
		{"deletion not looked at yet", m, &capnv1.MachineStatus{Phase: "Running"}, true, false},
		{"waiting for this watcher to find its Node", m, deletingStatus("WaitingForNodeRef"), true, false},
		{"pre-drain hook holds", m, deletingStatus("WaitingForPreDrainHook"), true, false},
		{"draining", m, deletingStatus("DrainingNode", "False", "Draining"), true, true},
		{"drained", m, deletingStatus("WaitingForNodeDeletion", "True", "Drained"), false, false},
		{"drain timed out", m, deletingStatus("WaitingForNodeDeletion", "False", "DrainingFailed"), false, false},
		{"no Node steps (no Node then)", m, deletingStatus("WaitingForInfrastructureDeletion"), false, false},
		{"an older machine-manager's deletion", m, deletingStatus("DeletionRequested"), false, false},
		{"excluded: cluster deleted", excluded, &capnv1.MachineStatus{Phase: "Running"}, false, false},
		{"deleted", m, &capnv1.MachineStatus{Phase: "Deleted"}, false, false},
		{"gone from desired", nil, deletingStatus("DrainingNode", "False", "Draining"), false, false},
	}
	for _, tt := range tests {
		if hold, drain := NodeDeletionHold(tt.dm, tt.st); hold != tt.hold || drain != tt.drain {
			t.Errorf("%s: hold %v drain %v, want %v %v", tt.name, hold, drain, tt.hold, tt.drain)
		}
	}
}

func TestPlanNodesDrainsHoldsAndFindsGone(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	old := now.Add(-time.Hour)
	nodes := []WorkloadNode{
		{Name: "w-0", ProviderID: "process://c/w-0", Created: old},
		{Name: "w-1", ProviderID: "process://c/w-1", Created: old},
		{Name: "w-2", ProviderID: "process://c/w-2", Created: old},
		{Name: "w-3", ProviderID: "process://c/w-3", Created: old},
	}
	machines := []WorkloadMachine{
		{Name: "w-0", ProviderID: "process://c/w-0"},
		{Name: "w-1", ProviderID: "process://c/w-1", Deleting: true, HoldNode: true, Drain: true},
		{Name: "w-2", ProviderID: "process://c/w-2", Deleting: true, HoldNode: true},
		{Name: "w-3", ProviderID: "process://c/w-3", Deleting: true},
		{Name: "w-4", ProviderID: "process://c/w-4", Deleting: true}, // its Node is gone
	}
	plan := PlanNodes(nodes, machines, nil, []string{"process"}, time.Second, now)
	names := func(ds []NodeDeletion) (out []string) {
		for _, d := range ds {
			out = append(out, d.Node.Name+"/"+d.Machine)
		}
		return out
	}
	if got := names(plan.Drain); !slices.Equal(got, []string{"w-1/w-1"}) {
		t.Errorf("drain %v, want w-1", got)
	}
	if got := names(plan.Delete); !slices.Equal(got, []string{"w-3/w-3"}) {
		t.Errorf("delete %v, want only w-3 (w-1 drains, w-2 is held)", got)
	}
	if !slices.Equal(plan.Gone, []string{"w-4"}) {
		t.Errorf("gone %v, want w-4", plan.Gone)
	}
	if got := names(plan.Found); !slices.Equal(got, []string{"w-1/w-1", "w-2/w-2"}) {
		t.Errorf("found %v, want w-1 and w-2 (kept: their records may not name them yet)", got)
	}
	if _, ok := plan.Match["w-1"]; ok || len(plan.Match) != 1 {
		t.Errorf("match %v, want w-0 only", plan.Match)
	}
}

func TestDrainPassSkipsAndSummarises(t *testing.T) {
	pod := func(name string, mut ...func(*kubeapi.Pod)) kubeapi.Pod {
		p := kubeapi.Pod{Namespace: "default", Name: name, Phase: "Running"}
		for _, f := range mut {
			f(&p)
		}
		return p
	}
	for _, tt := range []struct {
		p       kubeapi.Pod
		ready   bool
		skipped bool
	}{
		{pod("ds", func(p *kubeapi.Pod) { p.DaemonSet = true }), true, true},
		{pod("mirror", func(p *kubeapi.Pod) { p.Mirror = true }), true, true},
		{pod("done", func(p *kubeapi.Pod) { p.Phase = "Succeeded" }), true, true},
		{pod("failed", func(p *kubeapi.Pod) { p.Phase = "Failed" }), true, true},
		{pod("going", func(p *kubeapi.Pod) { p.Terminating = true }), true, false},
		{pod("going-on-a-dead-node", func(p *kubeapi.Pod) { p.Terminating = true }), false, true},
		{pod("web"), true, false},
	} {
		if got := Skipped(tt.p, tt.ready); got != tt.skipped {
			t.Errorf("%s (node ready %v): skipped %v, want %v", tt.p.Name, tt.ready, got, tt.skipped)
		}
	}
	if s := (DrainPass{}).Summary(); s.GetState() != capnv1.NodeDrainDrained || s.GetPodsRemaining() != 0 {
		t.Errorf("empty pass: %v, want Drained", s)
	}
	pass := DrainPass{
		Blocked:     map[string][]kubeapi.Pod{"web-pdb": {pod("web-c"), pod("web-a"), pod("web-b"), pod("web-d")}},
		Evicted:     []kubeapi.Pod{pod("solo")},
		Terminating: []kubeapi.Pod{pod("old")},
	}
	s := pass.Summary()
	want := "4 pods blocked by PodDisruptionBudget web-pdb (default/web-a, default/web-b, default/web-c, …); 2 pods terminating"
	if s.GetState() != capnv1.NodeDrainEvicting || s.GetPodsRemaining() != 6 || s.GetMessage() != want {
		t.Errorf("summary %v\nwant Evicting, 6 left, %q", s, want)
	}
	if !slices.Equal(s.GetBlockingPods(), []string{"default/web-a", "default/web-b", "default/web-c", "default/web-d"}) {
		t.Errorf("blocking pods %v", s.GetBlockingPods())
	}

	// The record changes when the drain does, not when only time passes.
	h := &capnv1.NodeHealth{}
	t0 := time.Now()
	if !mergeDrain(h, s, t0) || mergeDrain(h, pass.Summary(), t0.Add(time.Minute)) {
		t.Error("mergeDrain: want a change, then none for the same drain")
	}
	if !mergeDrain(h, (DrainPass{}).Summary(), t0.Add(2*time.Minute)) || h.GetDrain().GetState() != capnv1.NodeDrainDrained {
		t.Errorf("drained not recorded: %v", h.GetDrain())
	}
	// A Node found gone is deleted and drained; only once. A machine that
	// never had one: TestNodeRefOfADeletingMachine.
	h = &capnv1.NodeHealth{NodeUid: "u", Drain: &capnv1.NodeDrain{State: capnv1.NodeDrainEvicting}}
	if !mergeNodeDeleted(h, t0) || !h.GetNodeDeleted() || h.GetDrain().GetState() != capnv1.NodeDrainDrained || mergeNodeDeleted(h, t0) {
		t.Errorf("Node gone: %v", h)
	}
}

// TestNodeRefOfADeletingMachine: a deleting machine's record learns its
// Node from a read (mergeNodeRef) or that it has none (mergeNodeDeleted
// with no node_uid), once.
func TestNodeRefOfADeletingMachine(t *testing.T) {
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	h := &capnv1.NodeHealth{NodeExpected: true}
	if !mergeNodeRef(h, WorkloadNode{Name: "w-1", UID: "u1"}) || h.GetNodeUid() != "u1" || h.GetNodeName() != "w-1" {
		t.Fatalf("mergeNodeRef: %v", h)
	}
	if mergeNodeRef(h, WorkloadNode{Name: "w-1", UID: "u2"}) || h.GetNodeUid() != "u1" {
		t.Errorf("a second Node replaced the first: %v", h)
	}
	none := &capnv1.NodeHealth{NodeExpected: true}
	if !mergeNodeDeleted(none, at) || !none.GetNodeDeleted() || none.GetDrain() != nil {
		t.Errorf("no Node: %v, want node_deleted and no drain record", none)
	}
	if mergeNodeDeleted(none, at) {
		t.Error("recorded twice")
	}
	if mergeNodeRef(none, WorkloadNode{Name: "w-1", UID: "u1"}) {
		t.Error("a Node found after \"none\" was recorded: the deletion went past its Node steps")
	}
	seen := &capnv1.NodeHealth{NodeUid: "u1"}
	if !mergeNodeDeleted(seen, at) || seen.GetDrain().GetState() != capnv1.NodeDrainDrained {
		t.Errorf("a seen Node gone: %v, want drained", seen)
	}
}
