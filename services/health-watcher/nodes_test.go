package healthwatcher

import (
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
	if want := []string{"gone/", "w-1/w-1"}; !equal(deleted, want) {
		t.Errorf("deletions %v, want %v", deleted, want)
	}

	// Once the grace has passed, the young Node of the Deleting machine goes
	// too; the one registering before its machine (still no machine) as well.
	plan = PlanNodes(nodes, machines, live, []string{"process"}, grace, now.Add(time.Minute))
	deleted = nil
	for _, d := range plan.Delete {
		deleted = append(deleted, d.Node.Name)
	}
	if want := []string{"early", "gone", "w-1", "w-1-young"}; !equal(deleted, want) {
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
		Phase: phaseRunning, Conditions: h.GetConditions(), Reported: true}}}
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
	// With heartbeats, Ready stays capn-node's (mergeConditions' rule).
	h3 := &capnv1.NodeHealth{Cluster: "c", Machine: "w-2", LastHeartbeat: timestamppb.New(t1)}
	mergeNode(h3, WorkloadNode{Name: "w-2", Conditions: []*capnv1.NodeCondition{cond("Ready", "False", "KubeletNotReady", t1, t1)}}, t1)
	if len(h3.GetConditions()) != 0 {
		t.Errorf("the Node's Ready recorded although capn-node sends heartbeats: %v", h3.GetConditions())
	}
}
