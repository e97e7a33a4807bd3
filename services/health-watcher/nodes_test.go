package healthwatcher

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
)

func TestPlanNodesMatchesByProviderIDAndDeletesOnlyWhatIsCapnsToDelete(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	grace := 30 * time.Second
	old, young := now.Add(-time.Hour), now.Add(-10*time.Second)
	nodes := []WorkloadNode{
		{Name: "cp-0", ProviderID: "process://c/cp-0", Created: old},
		{Name: "w-0", ProviderID: "process://c/w-0", Created: old},
		{Name: "w-1", ProviderID: "process://c/w-1", Created: old},          // its machine is Deleting
		{Name: "w-1-young", ProviderID: "process://c/w-1b", Created: young}, // Deleting too, but registered just now
		{Name: "w-4-young", ProviderID: "process://c/w-4", Created: young},  // Deleting, and drained by this deletion
		{Name: "gone", ProviderID: "process://c/gone", Created: old},        // no machine has it
		{Name: "early", ProviderID: "process://c/new", Created: young},      // no machine yet: registering first
		{Name: "infra-only", ProviderID: "process://c/w-2", Created: old},   // the status has no id yet, the infra record does
		{Name: "foreign", ProviderID: "aws:///us-east-1a/i-1", Created: old},
		{Name: "no-id", Created: old},
		{Name: "w-0-dup", ProviderID: "process://c/w-0", Created: old.Add(time.Minute)},
	}
	machines := []WorkloadMachine{
		{Name: "cp-0", ProviderID: "process://c/cp-0"},
		{Name: "w-0", ProviderID: "process://c/w-0"},
		{Name: "w-1", ProviderID: "process://c/w-1", Deleting: true},
		{Name: "w-1b", ProviderID: "process://c/w-1b", Deleting: true},
		{Name: "w-2"},
		{Name: "w-3", ProviderID: "process://c/w-3"}, // no Node yet
		{Name: "w-4", ProviderID: "process://c/w-4", Deleting: true, Drained: true},
	}
	live := map[string]bool{"process://c/w-2": true}
	plan := PlanNodes(nodes, machines, live, []string{"process"}, grace, now)

	if len(plan.Match) != 2 || plan.Match["cp-0"].Name != "cp-0" || plan.Match["w-0"].Name != "w-0" {
		t.Errorf("matches: %+v; want cp-0 and w-0 (the older of two Nodes claiming w-0)", plan.Match)
	}
	var deleted []string
	for _, d := range plan.Delete {
		deleted = append(deleted, d.Node.Name+"/"+d.Machine)
	}
	if want := []string{"gone/", "w-1/w-1", "w-4-young/w-4"}; !equal(deleted, want) {
		t.Errorf("deletions %v, want %v", deleted, want)
	}

	// Once the grace has passed, the young Node of the Deleting machine goes
	// too; the one registering before its machine (still no machine) as well.
	plan = PlanNodes(nodes, machines, live, []string{"process"}, grace, now.Add(time.Minute))
	deleted = nil
	for _, d := range plan.Delete {
		deleted = append(deleted, d.Node.Name)
	}
	if want := []string{"early", "gone", "w-1", "w-1-young", "w-4-young"}; !equal(deleted, want) {
		t.Errorf("deletions a minute later %v, want %v", deleted, want)
	}

	// Another provider's scheme: orphans of it are not this cluster's to delete.
	plan = PlanNodes(nodes, machines, live, []string{"docker"}, grace, now)
	for _, d := range plan.Delete {
		if d.Machine == "" {
			t.Errorf("deleted %s although its scheme is no provider of the cluster's", d.Node.Name)
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMergeNodeRecordsNodeRefVersionAndConditionsOnlyOnChange(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	cond := func(typ, status, reason string, hb, tr time.Time) *capnv1.NodeCondition {
		return &capnv1.NodeCondition{Type: typ, Status: status, Reason: reason,
			LastHeartbeatTime: timestamppb.New(hb), LastTransitionTime: timestamppb.New(tr)}
	}
	n := WorkloadNode{Name: "w-0", ProviderID: "process://c/w-0", KubeletVersion: "v1.37.2", Conditions: []*capnv1.NodeCondition{
		cond("Ready", "True", "KubeletReady", t0, t0),
		cond("KernelDeadlock", "False", "KernelHasNoDeadlock", t0, t0),
		cond("MemoryPressure", "False", "KubeletHasSufficientMemory", t0, t0),
	}}
	h := &capnv1.NodeHealth{Cluster: "c", Machine: "w-0", NodeName: "w-0-agent", KubeletVersion: "v0.0.0-capn"}
	if !mergeNode(h, n, t0) {
		t.Fatal("first read: no change")
	}
	if h.GetNodeName() != "w-0" || h.GetKubeletVersion() != "v1.37.2" || len(h.GetConditions()) != 3 {
		t.Fatalf("after the first read: %v", h)
	}
	// The same Node read again, its heartbeats newer: nothing to write.
	n2 := n
	n2.Conditions = []*capnv1.NodeCondition{
		cond("Ready", "True", "KubeletReady", t0.Add(10*time.Second), t0),
		cond("KernelDeadlock", "False", "KernelHasNoDeadlock", t0.Add(10*time.Second), t0),
		cond("MemoryPressure", "False", "KubeletHasSufficientMemory", t0.Add(10*time.Second), t0),
	}
	if mergeNode(h, n2, t0.Add(10*time.Second)) {
		t.Errorf("a re-read with newer heartbeats only changed the record: %v", h)
	}
	// NPD's exporter sets KernelDeadlock=True: the policy judges it.
	t1 := t0.Add(time.Minute)
	n3 := n
	n3.Conditions = []*capnv1.NodeCondition{cond("KernelDeadlock", "True", "DockerHung", t1, t1)}
	if !mergeNode(h, n3, t1) {
		t.Fatal("KernelDeadlock=True: no change")
	}
	p := policy.Default().Fill()
	pol := policy.Policy{UnhealthyConditions: append(p.UnhealthyConditions, policy.Condition{Type: "KernelDeadlock", Status: "True"}),
		HeartbeatGrace: p.HeartbeatGrace, NodeStartupTimeout: p.NodeStartupTimeout}
	s := State{ControlPlaneInitialized: true, Targets: []Target{{Machine: "w-0", Pool: "md-0", Created: t0.Add(-time.Hour),
		Phase: capnv1.MachineRunning, Conditions: h.GetConditions(), Reported: true}}}
	out, _ := Evaluate(s, Policies{Default: pol}, t1.Add(time.Second))
	if len(out) != 1 || out[0].Reasons[0].GetType() != "KernelDeadlock" || !out[0].Since.Equal(t1) {
		t.Fatalf("verdict %+v; want KernelDeadlock since %s", out, t1)
	}
	// A Node's Ready=False (no heartbeats from capn-node) is judged as the
	// heartbeat-derived one is: unhealthy after the policy's timeout.
	h2 := &capnv1.NodeHealth{Cluster: "c", Machine: "w-1"}
	mergeNode(h2, WorkloadNode{Name: "w-1", Conditions: []*capnv1.NodeCondition{cond("Ready", "False", "KubeletNotReady", t1, t1)}}, t1)
	s.Targets[0].Conditions = h2.GetConditions()
	if out, _ := Evaluate(s, Policies{Default: pol}, t1.Add(policy.DefaultConditionTimeout)); len(out) != 1 || out[0].Reasons[0].GetType() != "Ready" {
		t.Errorf("Ready=False from the Node for the timeout: verdict %+v", out)
	}
	// With heartbeats, the Node's Ready is recorded too, in a slot of its
	// own (source kubernetes): TestNodeReadyJudgedBesideHeartbeats.
	h3 := &capnv1.NodeHealth{Cluster: "c", Machine: "w-2", LastHeartbeat: timestamppb.New(t1)}
	mergeNode(h3, WorkloadNode{Name: "w-2", Conditions: []*capnv1.NodeCondition{cond("Ready", "False", "KubeletNotReady", t1, t1)}}, t1)
	if len(h3.GetConditions()) != 1 || h3.GetConditions()[0].GetSource() != SourceKubernetes {
		t.Errorf("the Node's Ready of a node that sends heartbeats: %v", h3.GetConditions())
	}
}

// A Node NotReady while capn-node still heartbeats (the kubelet hung, or
// kwok stopped): the Node's Ready counts with the policy's Ready timeouts,
// beside the Ready the heartbeats decide, and the reason names the Node.
func TestNodeReadyJudgedBesideHeartbeats(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	ready := func(status, reason, msg string, hb, tr time.Time) *capnv1.NodeCondition {
		return &capnv1.NodeCondition{Type: "Ready", Status: status, Reason: reason, Message: msg,
			LastHeartbeatTime: timestamppb.New(hb), LastTransitionTime: timestamppb.New(tr)}
	}
	pol := policy.Default().Fill()
	p := policy.Policy{UnhealthyConditions: []policy.Condition{
		{Type: "Ready", Status: "Unknown", Timeout: 30 * time.Second},
		{Type: "Ready", Status: "False", Timeout: time.Minute},
	}, HeartbeatGrace: pol.HeartbeatGrace, NodeStartupTimeout: pol.NodeStartupTimeout}
	pols := Policies{Default: policy.Policy{UnhealthyConditions: pol.UnhealthyConditions, HeartbeatGrace: pol.HeartbeatGrace},
		ByPool: map[string]policy.Policy{"md-0": p}}

	// capn-node heartbeats and says ready; the Node is Ready.
	h := &capnv1.NodeHealth{Cluster: "c", Machine: "w-0", LastHeartbeat: timestamppb.New(t0), Ready: true}
	if !mergeNode(h, WorkloadNode{Name: "w-0", Conditions: []*capnv1.NodeCondition{ready("True", "KubeletReady", "", t0, t0)}}, t0) {
		t.Fatal("the Node's Ready of a node that heartbeats: not recorded")
	}
	// The evaluation's view writes the heartbeats' Ready beside it, and a
	// second view changes nothing (no write per evaluation).
	tg := Target{Machine: "w-0", Pool: "md-0", Created: t0.Add(-time.Hour), Phase: capnv1.MachineRunning, Reported: true,
		LastHeartbeat: t0, Ready: true}
	v, changed := view(h, "c", tg, beat{at: t0, ready: true}, nil, p, 5*time.Minute, t0)
	if !changed || len(v.GetConditions()) != 2 || v.GetConditions()[0].GetSource() != "" || v.GetConditions()[1].GetSource() != SourceKubernetes {
		t.Fatalf("view: changed %v, conditions %v; want the heartbeats' Ready then the Node's", changed, v.GetConditions())
	}
	if _, again := view(v, "c", tg, beat{at: t0, ready: true}, nil, p, 5*time.Minute, t0.Add(time.Second)); again {
		t.Errorf("a second view of a steady node changed the record")
	}
	if st := readyStatus(v); st != capnv1.ConditionTrue {
		t.Errorf("readyStatus %q, want the heartbeats' True", st)
	}

	// The kubelet stops: the controller-manager marks the Node Unknown at
	// t1, keeping the kubelet's last heartbeat. capn-node still beats.
	t1 := t0.Add(50 * time.Second)
	const msg = "Kubelet stopped posting node status."
	if !mergeNode(v, WorkloadNode{Name: "w-0", Conditions: []*capnv1.NodeCondition{ready("Unknown", "NodeStatusUnknown", msg, t0, t1)}}, t1) {
		t.Fatal("Ready=Unknown on the Node: no change")
	}
	// A NATS report of Ready (not the Node's) is still left to heartbeats.
	if mergeConditions(v, &capnv1.NodeConditions{Source: "npd", Conditions: []*capnv1.NodeCondition{ready("False", "X", "", t1, t1)}}, t1) {
		t.Errorf("a Ready reported on NATS for a node that heartbeats was merged: %v", v.GetConditions())
	}
	tg.Conditions, tg.NodeName = v.GetConditions(), "w-0"
	s := State{ControlPlaneInitialized: true, Targets: []Target{tg}}
	now := t1.Add(29 * time.Second)
	tg.LastHeartbeat = now // fresh heartbeats all along
	s.Targets[0] = tg
	out, recheck := Evaluate(s, pols, now)
	if len(out) != 0 || recheck != time.Second {
		t.Fatalf("before the pool's 30s timeout: %+v, recheck %s; want healthy, recheck 1s", out, recheck)
	}
	now = t1.Add(30 * time.Second)
	tg.LastHeartbeat = now
	s.Targets[0] = tg
	out, _ = Evaluate(s, pols, now)
	if len(out) != 1 || len(out[0].Reasons) != 1 {
		t.Fatalf("Node Ready=Unknown for the timeout while capn-node beats: %+v; want unhealthy", out)
	}
	r := out[0].Reasons[0]
	want := "Node w-0 Ready=Unknown for at least 30s, read from the workload cluster (NodeStatusUnknown: " + msg + ")"
	if r.GetType() != "Ready" || r.GetReason() != "NodeStatusUnknown" || r.GetMessage() != want || !out[0].Since.Equal(t1.Add(30*time.Second)) {
		t.Errorf("reason %v since %s; want %q since %s", r, out[0].Since, want, t1.Add(30*time.Second))
	}
	// Stable across evaluations: the same episode, the same message.
	later, _ := Evaluate(s, pols, now.Add(time.Hour))
	if len(later) != 1 || !later[0].Since.Equal(out[0].Since) || later[0].Reasons[0].GetMessage() != want {
		t.Errorf("later evaluation %+v; want the same episode", later)
	}
	// The default pool's policy (5m) applies to a machine of it.
	tg.Pool = "other"
	s.Targets[0] = tg
	if out, _ := Evaluate(s, pols, now); len(out) != 0 {
		t.Errorf("the default policy's 5m judged after 30s: %+v", out)
	}
	tg.Pool = "md-0"

	// The kubelet is back: the Node Ready again, the machine healthy.
	t2 := now.Add(time.Minute)
	if !mergeNode(v, WorkloadNode{Name: "w-0", Conditions: []*capnv1.NodeCondition{ready("True", "KubeletReady", "", t2, t2)}}, t2) {
		t.Fatal("Ready=True again: no change")
	}
	tg.Conditions, tg.LastHeartbeat = v.GetConditions(), t2
	s.Targets[0] = tg
	if out, _ := Evaluate(s, pols, t2.Add(time.Minute)); len(out) != 0 {
		t.Errorf("Node Ready again: %+v", out)
	}

	// Heartbeats still decide for a machine without a Node read: silent for
	// the grace, then Unknown for the timeout.
	silent := Target{Machine: "sim-0", Pool: "md-0", Created: t0.Add(-time.Hour), Phase: capnv1.MachineRunning, LastHeartbeat: t0, Ready: true}
	s = State{ControlPlaneInitialized: true, Targets: []Target{silent}}
	out, _ = Evaluate(s, pols, t0.Add(p.HeartbeatGrace+30*time.Second))
	if len(out) != 1 || out[0].Reasons[0].GetReason() != "NodeStatusUnknown" || !strings.HasPrefix(out[0].Reasons[0].GetMessage(), "node condition Ready=Unknown") {
		t.Errorf("a silent node without a Node read: %+v", out)
	}
}

// A record written before conditions had a source kept the Node's Ready of
// a node without heartbeats in the one Ready slot: the Node's Ready read
// now replaces it rather than sitting beside a stale copy.
func TestNodeReadyReplacesSourcelessReadyOfOldRecords(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	old := &capnv1.NodeCondition{Type: "Ready", Status: "False", Reason: "KubeletNotReady",
		LastHeartbeatTime: timestamppb.New(t0), LastTransitionTime: timestamppb.New(t0)}
	h := &capnv1.NodeHealth{Cluster: "c", Machine: "w-0", Conditions: []*capnv1.NodeCondition{old}}
	n := WorkloadNode{Name: "w-0", Conditions: []*capnv1.NodeCondition{{Type: "Ready", Status: "True", Reason: "KubeletReady",
		LastHeartbeatTime: timestamppb.New(t0.Add(time.Minute)), LastTransitionTime: timestamppb.New(t0.Add(time.Minute))}}}
	if !mergeNode(h, n, t0.Add(time.Minute)) {
		t.Fatal("no change")
	}
	if len(h.GetConditions()) != 1 || h.GetConditions()[0].GetStatus() != "True" || h.GetConditions()[0].GetSource() != SourceKubernetes {
		t.Errorf("conditions %v; want only the Node's Ready=True", h.GetConditions())
	}
	// With heartbeats the source-less Ready is the heartbeats' and stays.
	h = &capnv1.NodeHealth{Cluster: "c", Machine: "w-0", LastHeartbeat: timestamppb.New(t0), Conditions: []*capnv1.NodeCondition{old}}
	mergeNode(h, n, t0.Add(time.Minute))
	if len(h.GetConditions()) != 2 {
		t.Errorf("conditions %v; want the heartbeats' Ready and the Node's", h.GetConditions())
	}
}

// kwok, restarted after the controller-manager marked its Node
// Ready=Unknown, sets Ready=True again with the transition time it had
// before the Unknown. A Node read is its current state: the record turns
// True (transition: the read), and a read overtaken by a later one (an
// older heartbeat) still changes nothing.
func TestNodeReadyBackWithAnEarlierTransition(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	ready := func(status, reason string, hb, tr time.Time) WorkloadNode {
		return WorkloadNode{Name: "w-0", Conditions: []*capnv1.NodeCondition{{Type: "Ready", Status: status, Reason: reason,
			LastHeartbeatTime: timestamppb.New(hb), LastTransitionTime: timestamppb.New(tr)}}}
	}
	h := &capnv1.NodeHealth{Cluster: "c", Machine: "w-0", LastHeartbeat: timestamppb.New(t0), Ready: true}
	mergeNode(h, ready("True", "KubeletReady", t0, t0), t0)
	t1 := t0.Add(50 * time.Second)
	if !mergeNode(h, ready("Unknown", "NodeStatusUnknown", t0, t1), t1) {
		t.Fatal("Unknown: no change")
	}
	t2 := t1.Add(2 * time.Minute)
	if !mergeNode(h, ready("True", "KubeletReady", t2, t0), t2.Add(time.Second)) {
		t.Fatalf("kwok's Ready=True with its old transition ignored: %v", h.GetConditions())
	}
	c := h.GetConditions()[0]
	if c.GetStatus() != "True" || !c.GetLastTransitionTime().AsTime().Equal(t2.Add(time.Second)) {
		t.Errorf("Ready %s since %s; want True since the read %s", c.GetStatus(), c.GetLastTransitionTime().AsTime(), t2.Add(time.Second))
	}
	if mergeNode(h, ready("Unknown", "NodeStatusUnknown", t0, t1), t2.Add(2*time.Second)) {
		t.Errorf("an overtaken read (older heartbeat) changed the record: %v", h.GetConditions())
	}
	p := policy.Default().Fill()
	s := State{ControlPlaneInitialized: true, Targets: []Target{{Machine: "w-0", Pool: "md-0", Created: t0.Add(-time.Hour), Phase: capnv1.MachineRunning,
		LastHeartbeat: t2.Add(time.Hour), Ready: true, Reported: true, Conditions: h.GetConditions(), NodeName: "w-0"}}}
	pol := policy.Policy{UnhealthyConditions: p.UnhealthyConditions, HeartbeatGrace: p.HeartbeatGrace}
	if out, _ := Evaluate(s, Policies{Default: pol}, t2.Add(time.Hour)); len(out) != 0 {
		t.Errorf("Node Ready again: %+v", out)
	}
}
