package machinemanager

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"pgregory.net/rapid"

	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
)

// deletingWith is a deleting machine (created an hour before t0) with
// annotations and spec changes.
func deletingWith(ann map[string]string, mut ...func(*capnv1.MachineSpec)) *capnv1.Machine {
	m := machine(true)
	m.Metadata.CreationTimestamp = timestamppb.New(t0.Add(-time.Hour))
	m.Metadata.Annotations = ann
	for _, f := range mut {
		f(m.Spec)
	}
	return m
}

func drainTimeout(d time.Duration) func(*capnv1.MachineSpec) {
	return func(s *capnv1.MachineSpec) { s.NodeDrainTimeout = durationpb.New(d) }
}

func controlPlane(s *capnv1.MachineSpec) { s.Role = "control-plane"; s.Pool = "control-plane" }

// kubeNode is the health-watcher's record of a machine with a workload
// Node w-1, its agent's last heartbeat at hb.
func kubeNode(hb time.Time, mut ...func(*capnv1.NodeHealth)) *capnv1.NodeHealth {
	n := &capnv1.NodeHealth{Cluster: "c1", Machine: "m1", NodeName: "w-1", NodeUid: "uid-w-1", Ready: true,
		LastHeartbeat: timestamppb.New(hb), Updated: timestamppb.New(hb)}
	for _, f := range mut {
		f(n)
	}
	return n
}

func drain(state, msg string) func(*capnv1.NodeHealth) {
	return func(n *capnv1.NodeHealth) { n.Drain = &capnv1.NodeDrain{State: state, Message: msg} }
}

func nodeDeleted(n *capnv1.NodeHealth) { n.NodeDeleted = true }

// unmatched: the machine's cluster has Nodes the health-watcher reads,
// and no read matched this machine's Node yet.
func unmatched(n *capnv1.NodeHealth) { n.NodeExpected, n.NodeUid, n.NodeName = true, "", "" }

func infraReady(s *capnv1.MachineStatus) {
	s.InfrastructureReadyTime = timestamppb.New(t0.Add(-time.Hour))
}

// deletedAt is a deleting machine whose deletion was requested at at.
func deletedAt(at time.Time) *capnv1.Machine {
	m := deletingWith(nil)
	m.Metadata.DeletionTimestamp = timestamppb.New(at)
	return m
}

func etcd(status, msg string) func(*capnv1.NodeHealth) {
	return func(n *capnv1.NodeHealth) {
		n.Conditions = append(n.Conditions, &capnv1.NodeCondition{Type: annotations.CondEtcdMemberRemoved, Status: status, Reason: "QuorumAtRisk", Message: msg})
	}
}

// deletingSince is a Deleting status whose drain started at drain (zero:
// not yet), and whose drain and Node deletion went as the mutators say.
func deletingSince(mut ...func(*capnv1.MachineStatus)) *capnv1.MachineStatus {
	return status(capnv1.MachineDeleting.Wire(), append([]func(*capnv1.MachineStatus){withBootstrap}, mut...)...)
}

func drainStarted(at time.Time) func(*capnv1.MachineStatus) {
	return func(s *capnv1.MachineStatus) {
		s.DrainStartTime = timestamppb.New(at)
		setCondition(s, CondDrainingSucceeded, capnv1.ConditionFalse, ReasonDraining, "draining node w-1", at)
	}
}

func drainDone(s *capnv1.MachineStatus) {
	s.DrainStartTime = timestamppb.New(t0)
	setCondition(s, CondDrainingSucceeded, capnv1.ConditionTrue, "Drained", "", t0)
}

func nodeDeletionStarted(at time.Time) func(*capnv1.MachineStatus) {
	return func(s *capnv1.MachineStatus) { s.NodeDeletionStartTime = timestamppb.New(at) }
}

// TestDeletionSequence: every branch of a deletion, Cluster API's order.
func TestDeletionSequence(t *testing.T) {
	pre := map[string]string{annotations.PreDrainHookPrefix + "backup": "velero", annotations.PreDrainHookPrefix + "audit": "ci"}
	term := map[string]string{annotations.PreTerminateHookPrefix + "storage": "csi"}
	exclude := map[string]string{annotations.ExcludeNodeDraining: "cluster is being deleted"}
	now := t0.Add(time.Minute)
	tests := []struct {
		name    string
		in      Input
		reason  string // of the Deleting condition
		msg     string // in the Deleting condition's message
		cmds    []string
		phase   capnv1.MachinePhase
		conds   map[string]string // type → "Status/Reason"
		events  []string          // reasons
		requeue time.Duration     // 0: not checked
	}{
		{name: "sim machine (no Node): straight to the delete command, as before",
			in:     Input{Desired: deletingWith(nil), Status: status(capnv1.MachineRunning.Wire(), withBootstrap), Infra: infra("Running"), Node: nodeAt(true, now)},
			reason: ReasonWaitingForInfrastructureDeletion, msg: "waiting for provider sim to delete the infrastructure", cmds: []string{CmdDelete}, phase: capnv1.MachineDeleting,
			events: []string{"Deleting"}},
		{name: "real cluster, Node not matched yet: waits for the health-watcher's lookup",
			in:     Input{Desired: deletedAt(now.Add(-10 * time.Second)), Status: status(capnv1.MachineRunning.Wire(), withBootstrap, infraReady), Infra: infra("Running"), Node: kubeNode(now, unmatched)},
			reason: ReasonWaitingForNodeRef, msg: "looking for the Node of machine m1", phase: capnv1.MachineDeleting,
			events: []string{"Deleting"}, requeue: 20 * time.Second},
		{name: "real cluster, the lookup found the Node: the drain starts",
			in: Input{Desired: deletedAt(now.Add(-10 * time.Second)), Status: deletingSince(infraReady, func(s *capnv1.MachineStatus) {
				setCondition(s, CondDeleting, capnv1.ConditionTrue, ReasonWaitingForNodeRef, "", t0)
			}), Infra: infra("Running"), Node: kubeNode(now, func(n *capnv1.NodeHealth) { n.NodeExpected = true })},
			reason: ReasonDrainingNode, msg: "draining node w-1", phase: capnv1.MachineDeleting, events: []string{"DrainStarted"}},
		{name: "real cluster, the lookup found no Node: the delete command",
			in:     Input{Desired: deletedAt(now.Add(-10 * time.Second)), Status: status(capnv1.MachineRunning.Wire(), withBootstrap, infraReady), Infra: infra("Running"), Node: kubeNode(now, unmatched, nodeDeleted)},
			reason: ReasonWaitingForInfrastructureDeletion, cmds: []string{CmdDelete}, phase: capnv1.MachineDeleting, events: []string{"Deleting"}},
		{name: "real cluster, no answer within the lookup timeout: NodeNotFound, the delete command",
			in: Input{Desired: deletedAt(now.Add(-nodeLookupTimeout)), Status: deletingSince(infraReady, func(s *capnv1.MachineStatus) {
				setCondition(s, CondDeleting, capnv1.ConditionTrue, ReasonWaitingForNodeRef, "", t0)
			}), Infra: infra("Running"), Node: kubeNode(now, unmatched)},
			reason: ReasonWaitingForInfrastructureDeletion, cmds: []string{CmdDelete}, phase: capnv1.MachineDeleting, events: []string{"NodeNotFound"}},
		{name: "real cluster, infrastructure never came up: no lookup",
			in:     Input{Desired: deletedAt(now), Status: status(capnv1.MachineProvisioning.Wire(), withBootstrap), Infra: infra("Creating"), Node: kubeNode(now, unmatched)},
			reason: ReasonWaitingForInfrastructureDeletion, cmds: []string{CmdDelete}, phase: capnv1.MachineDeleting, events: []string{"Deleting"}},
		{name: "pre-drain hooks hold, even without a Node",
			in:     Input{Desired: deletingWith(pre), Status: status(capnv1.MachineRunning.Wire(), withBootstrap), Infra: infra("Running")},
			reason: ReasonWaitingForPreDrainHook, msg: "waiting for pre-drain hooks: audit, backup", phase: capnv1.MachineDeleting,
			conds:  map[string]string{CondPreDrainDeleteHookSucceeded: "False/" + ReasonWaitingExternalHook},
			events: []string{"Deleting", "PreDrainHookHold"}},
		{name: "pre-drain hooks hold a machine with a Node before its drain",
			in:     Input{Desired: deletingWith(pre), Status: status(capnv1.MachineRunning.Wire(), withBootstrap), Infra: infra("Running"), Node: kubeNode(now)},
			reason: ReasonWaitingForPreDrainHook, msg: "audit, backup", phase: capnv1.MachineDeleting,
			events: []string{"Deleting", "PreDrainHookHold"}},
		{name: "hook released: the drain starts",
			in: Input{Desired: deletingWith(nil), Status: deletingSince(func(s *capnv1.MachineStatus) {
				setCondition(s, CondPreDrainDeleteHookSucceeded, capnv1.ConditionFalse, ReasonWaitingExternalHook, "x", t0)
			}), Infra: infra("Running"), Node: kubeNode(now)},
			reason: ReasonDrainingNode, msg: "draining node w-1: cordoning", phase: capnv1.MachineDeleting,
			conds:  map[string]string{CondPreDrainDeleteHookSucceeded: "True/", CondDrainingSucceeded: "False/" + ReasonDraining},
			events: []string{"DrainStarted"}, requeue: drainRequeue},
		{name: "running machine with a Node: Deleting, drain started, no delete command",
			in:     Input{Desired: deletingWith(nil), Status: status(capnv1.MachineRunning.Wire(), withBootstrap), Infra: infra("Running"), Node: kubeNode(now)},
			reason: ReasonDrainingNode, msg: "draining node w-1", phase: capnv1.MachineDeleting,
			conds:  map[string]string{CondDrainingSucceeded: "False/" + ReasonDraining},
			events: []string{"Deleting", "DrainStarted"}},
		{name: "drain in progress, blocked by a PDB: the message says so",
			in: Input{Desired: deletingWith(nil), Status: deletingSince(drainStarted(t0)), Infra: infra("Running"),
				Node: kubeNode(now, drain(capnv1.NodeDrainEvicting, "3 pods blocked by PodDisruptionBudget web-pdb (default/web-a, default/web-b, default/web-c)"))},
			reason: ReasonDrainingNode, msg: "draining node w-1: 3 pods blocked by PodDisruptionBudget web-pdb (default/web-a", phase: capnv1.MachineDeleting,
			conds: map[string]string{CondDrainingSucceeded: "False/" + ReasonDraining}, requeue: drainRequeue},
		{name: "drain in progress, its timeout close: requeued for it",
			in: Input{Desired: deletingWith(nil, drainTimeout(70*time.Second)), Status: deletingSince(drainStarted(t0)), Infra: infra("Running"),
				Node: kubeNode(now, drain(capnv1.NodeDrainEvicting, "1 pod terminating"))},
			reason: ReasonDrainingNode, phase: capnv1.MachineDeleting, requeue: 10 * time.Second},
		{name: "drained: the Node's deletion is awaited",
			in:     Input{Desired: deletingWith(nil), Status: deletingSince(drainStarted(t0)), Infra: infra("Running"), Node: kubeNode(now, drain(capnv1.NodeDrainDrained, ""))},
			reason: ReasonWaitingForNodeDeletion, msg: "node w-1", phase: capnv1.MachineDeleting,
			conds: map[string]string{CondDrainingSucceeded: "True/Drained"}, events: []string{"DrainSucceeded"}, requeue: DefaultNodeDeletionTimeout},
		{name: "drain timeout: DrainingFailed, the deletion goes on",
			in: Input{Desired: deletingWith(nil, drainTimeout(30*time.Second)), Status: deletingSince(drainStarted(t0)), Infra: infra("Running"),
				Node: kubeNode(now, drain(capnv1.NodeDrainEvicting, "1 pod blocked by PodDisruptionBudget web-pdb (default/web-a)"))},
			reason: ReasonWaitingForNodeDeletion, phase: capnv1.MachineDeleting,
			conds: map[string]string{CondDrainingSucceeded: "False/" + ReasonDrainingFailed}, events: []string{ReasonDrainingFailed}},
		{name: "no drain timeout: waits forever, never skips",
			in: Input{Desired: deletingWith(nil), Status: deletingSince(drainStarted(t0)), Infra: infra("Running"), Now: t0.Add(1000 * time.Hour),
				Node: kubeNode(t0.Add(1000*time.Hour), drain(capnv1.NodeDrainEvicting, "1 pod blocked"))},
			reason: ReasonDrainingNode, phase: capnv1.MachineDeleting},
		{name: "Node deleted: the delete command",
			in:     Input{Desired: deletingWith(nil), Status: deletingSince(drainDone, nodeDeletionStarted(t0)), Infra: infra("Running"), Node: kubeNode(now, drain(capnv1.NodeDrainDrained, ""), nodeDeleted)},
			reason: ReasonWaitingForInfrastructureDeletion, cmds: []string{CmdDelete}, phase: capnv1.MachineDeleting},
		{name: "Node deletion timeout: the delete command",
			in:     Input{Desired: deletingWith(nil), Status: deletingSince(drainDone, nodeDeletionStarted(t0)), Infra: infra("Running"), Node: kubeNode(now, drain(capnv1.NodeDrainDrained, ""))},
			reason: ReasonWaitingForInfrastructureDeletion, cmds: []string{CmdDelete}, phase: capnv1.MachineDeleting},
		{name: "excluded (cluster deleted): no drain, no Node wait, no etcd wait",
			in:     Input{Desired: deletingWith(exclude, controlPlane), Status: status(capnv1.MachineRunning.Wire(), withBootstrap), Infra: infra("Running"), Node: kubeNode(now)},
			reason: ReasonWaitingForInfrastructureDeletion, cmds: []string{CmdDelete}, phase: capnv1.MachineDeleting, events: []string{"Deleting"}},
		{name: "control plane: waits for its etcd member's removal",
			in:     Input{Desired: deletingWith(nil, controlPlane), Status: deletingSince(drainDone), Infra: infra("Running"), Node: kubeNode(now, nodeDeleted)},
			reason: ReasonWaitingForEtcdMemberRemoval, msg: "waiting for the etcd member of w-1 to be removed", phase: capnv1.MachineDeleting, requeue: etcdRequeue},
		{name: "control plane: a False EtcdMemberRemoved keeps it waiting, its message shown",
			in: Input{Desired: deletingWith(nil, controlPlane), Status: deletingSince(drainDone), Infra: infra("Running"),
				Node: kubeNode(now, nodeDeleted, etcd("False", "removing the member would leave 1 of 3 voting members"))},
			reason: ReasonWaitingForEtcdMemberRemoval, msg: "would leave 1 of 3 voting members", phase: capnv1.MachineDeleting},
		{name: "control plane: member removed, the delete command",
			in:     Input{Desired: deletingWith(nil, controlPlane), Status: deletingSince(drainDone), Infra: infra("Running"), Node: kubeNode(now, nodeDeleted, etcd("True", ""))},
			reason: ReasonWaitingForInfrastructureDeletion, cmds: []string{CmdDelete}, phase: capnv1.MachineDeleting},
		{name: "control plane whose agent is silent: no etcd wait (the others remove the member)",
			in:     Input{Desired: deletingWith(nil, controlPlane), Status: deletingSince(drainDone), Infra: infra("Running"), Node: kubeNode(now.Add(-agentSilence), nodeDeleted)},
			reason: ReasonWaitingForInfrastructureDeletion, cmds: []string{CmdDelete}, phase: capnv1.MachineDeleting},
		{name: "control plane that never had a Node: no etcd wait",
			in:     Input{Desired: deletingWith(nil, controlPlane), Status: status(capnv1.MachineRunning.Wire(), withBootstrap), Infra: infra("Running"), Node: nodeAt(true, now)},
			reason: ReasonWaitingForInfrastructureDeletion, cmds: []string{CmdDelete}, phase: capnv1.MachineDeleting, events: []string{"Deleting"}},
		{name: "pre-terminate hook holds after the Node steps, before the delete command",
			in:     Input{Desired: deletingWith(term), Status: deletingSince(drainDone), Infra: infra("Running"), Node: kubeNode(now, nodeDeleted)},
			reason: ReasonWaitingForPreTerminateHook, msg: "waiting for pre-terminate hooks: storage", phase: capnv1.MachineDeleting,
			conds: map[string]string{CondPreTerminateDeleteHookSucceeded: "False/" + ReasonWaitingExternalHook}, events: []string{"PreTerminateHookHold"}},
		{name: "a Node that appears past the Node steps is not drained",
			in: Input{Desired: deletingWith(nil), Status: deletingSince(func(s *capnv1.MachineStatus) {
				setCondition(s, CondDeleting, capnv1.ConditionTrue, ReasonWaitingForInfrastructureDeletion, "", t0)
			}), Infra: infra("Running"), Node: kubeNode(now)},
			reason: ReasonWaitingForInfrastructureDeletion, cmds: []string{CmdDelete}, phase: capnv1.MachineDeleting},
		{name: "a previous incarnation's Node record is not this machine's Node",
			in:     Input{Desired: deletingWith(nil), Status: status(capnv1.MachineRunning.Wire(), withBootstrap), Infra: infra("Running"), Node: kubeNode(t0.Add(-2 * time.Hour))},
			reason: ReasonWaitingForInfrastructureDeletion, cmds: []string{CmdDelete}, phase: capnv1.MachineDeleting, events: []string{"Deleting"}},
		{name: "infrastructure gone: Deleted",
			in:     Input{Desired: deletingWith(nil), Status: deletingSince(drainDone), Node: kubeNode(now, nodeDeleted)},
			reason: ReasonWaitingForInfrastructureDeletion, cmds: []string{CmdDelete}, phase: capnv1.MachineDeleted, events: []string{"Deleted"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Cluster, tt.in.Name = "c1", "m1"
			if tt.in.Now.IsZero() {
				tt.in.Now = now
			}
			out := Step(tt.in, Timeouts{})
			st := out.Status
			if st.GetPhaseValue() != tt.phase {
				t.Fatalf("phase %s, want %s", st.GetPhase(), tt.phase.Wire())
			}
			d := conditions.Get(st.GetConditions(), CondDeleting)
			if d.GetReason() != tt.reason || !strings.Contains(d.GetMessage(), tt.msg) {
				t.Errorf("Deleting %s: %q, want %s: …%q…", d.GetReason(), d.GetMessage(), tt.reason, tt.msg)
			}
			var kinds []string
			for _, c := range out.Commands {
				kinds = append(kinds, c.Kind)
			}
			if !slices.Equal(kinds, tt.cmds) {
				t.Errorf("commands %v, want %v", kinds, tt.cmds)
			}
			for typ, want := range tt.conds {
				c := conditions.Get(st.GetConditions(), typ)
				if got := c.GetStatus() + "/" + c.GetReason(); got != want {
					t.Errorf("%s = %s (%q), want %s", typ, got, c.GetMessage(), want)
				}
			}
			var reasons []string
			for _, ev := range out.Events {
				reasons = append(reasons, ev.Reason)
				if !strings.HasPrefix(ev.Message, "machine m1") || !camelCase.MatchString(ev.Reason) {
					t.Errorf("event %+v: want a CamelCase reason and a message about machine m1", ev)
				}
			}
			if !slices.Equal(reasons, tt.events) {
				t.Errorf("events %v, want %v", reasons, tt.events)
			}
			if tt.requeue > 0 && out.RequeueAfter != tt.requeue {
				t.Errorf("requeue after %s, want %s", out.RequeueAfter, tt.requeue)
			}
			// Idempotent: the step's own output, stepped again at the same
			// time, makes no new event and the same status.
			again := tt.in
			again.Status = st
			out2 := Step(again, Timeouts{})
			if st.GetPhaseValue() == capnv1.MachineDeleting && (len(out2.Events) != 0 || !proto.Equal(out2.Status, st)) {
				t.Errorf("stepped again: events %v, status changed %v", out2.Events, !proto.Equal(out2.Status, st))
			}
		})
	}
}

// TestDrainStartEventAndMessage pins the timeline entries of a drain.
func TestDrainStartEventAndMessage(t *testing.T) {
	in := Input{Cluster: "c1", Name: "m1", Desired: deletingWith(nil), Status: status(capnv1.MachineRunning.Wire(), withBootstrap),
		Infra: infra("Running"), Node: kubeNode(t0), Now: t0.Add(time.Second)}
	out := Step(in, Timeouts{})
	if len(out.Events) != 2 {
		t.Fatalf("events %v", out.Events)
	}
	if got, want := out.Events[0].Message, "machine m1 deleting: draining node w-1: cordoning"; got != want {
		t.Errorf("phase event %q, want %q", got, want)
	}
	if got, want := out.Events[1].Message, "machine m1: cordoning and draining node w-1"; got != want || !out.Events[1].At.Equal(in.Now) {
		t.Errorf("drain event %q at %v, want %q at %v", got, out.Events[1].At, want, in.Now)
	}
	in.Status, in.Now = out.Status, t0.Add(95*time.Second)
	in.Node = kubeNode(t0, drain(capnv1.NodeDrainDrained, ""))
	out = Step(in, Timeouts{})
	if len(out.Events) != 1 || out.Events[0].Message != "machine m1: node w-1 drained in 1m34s" {
		t.Errorf("drained: %v", out.Events)
	}
}

// TestDeletionNeverSkipsTheNode: a property over random deletions — a
// machine with a workload Node whose drain is not excluded gets no delete
// command before its Node is drained (or its drain timed out) and deleted
// (or the deletion timed out); a pre-drain hook always holds everything;
// a pre-terminate hook always holds the delete command.
func TestDeletionNeverSkipsTheNode(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ann := map[string]string{}
		preHook := rapid.Bool().Draw(t, "preHook")
		termHook := rapid.Bool().Draw(t, "termHook")
		excluded := rapid.Bool().Draw(t, "excluded")
		if preHook {
			ann[annotations.PreDrainHookPrefix+"h"] = "x"
		}
		if termHook {
			ann[annotations.PreTerminateHookPrefix+"h"] = "x"
		}
		if excluded {
			ann[annotations.ExcludeNodeDraining] = ""
		}
		var mut []func(*capnv1.MachineSpec)
		timeout := time.Duration(rapid.IntRange(0, 120).Draw(t, "drainTimeoutS")) * time.Second
		if timeout > 0 {
			mut = append(mut, drainTimeout(timeout))
		}
		if rapid.Bool().Draw(t, "controlPlane") {
			mut = append(mut, controlPlane)
		}
		hasNode := rapid.Bool().Draw(t, "hasNode")
		drained := rapid.Bool().Draw(t, "drained")
		deleted := rapid.Bool().Draw(t, "nodeDeleted")
		etcdDone := rapid.Bool().Draw(t, "etcdRemoved")
		elapsed := time.Duration(rapid.IntRange(0, 300).Draw(t, "elapsedS")) * time.Second
		now := t0.Add(elapsed)
		node := nodeAt(true, now)
		node.Updated = timestamppb.New(now)
		if hasNode {
			node.NodeUid, node.NodeName = "uid", "w-1"
		}
		if drained {
			node.Drain = &capnv1.NodeDrain{State: capnv1.NodeDrainDrained}
		}
		node.NodeDeleted = deleted
		if etcdDone {
			etcd("True", "")(node)
		}
		in := Input{Cluster: "c1", Name: "m1", Desired: deletingWith(ann, mut...), Status: status(capnv1.MachineRunning.Wire(), withBootstrap),
			Infra: infra("Running"), Node: node, Now: t0}
		// Step from t0 until now, as the loop would, a step every 5s.
		var out Output
		for at := t0; !at.After(now); at = at.Add(5 * time.Second) {
			in.Now = at
			out = Step(in, Timeouts{})
			in.Status = out.Status
			if len(out.Commands) > 0 {
				break
			}
		}
		sent := len(out.Commands) > 0
		switch {
		case preHook && sent:
			t.Fatal("delete command under a pre-drain hook")
		case termHook && sent:
			t.Fatal("delete command under a pre-terminate hook")
		case hasNode && !excluded && sent:
			st := out.Status
			drainOK := drained || (timeout > 0 && conditions.Get(st.GetConditions(), CondDrainingSucceeded).GetReason() == ReasonDrainingFailed)
			if !drainOK {
				t.Fatalf("delete command before the drain ended: %v", st.GetConditions())
			}
			if !deleted && in.Now.Sub(st.GetNodeDeletionStartTime().AsTime()) < DefaultNodeDeletionTimeout {
				t.Fatal("delete command before the Node was deleted or its deletion timed out")
			}
		case !preHook && !termHook && (!hasNode || excluded) && !sent:
			t.Fatal("a machine without a Node to drain did not get its delete command at once")
		}
	})
}

// TestDeletionDrainsANodeMatchedLate: a property over a machine of a real
// cluster deleted before the health-watcher matched its Node (the gap of
// a scale-down right after a new machine came up): when the watcher
// matches it within the lookup timeout, the delete command never comes
// before the drain; when it answers "no Node", or never, the deletion
// goes on, and in the latter case only after the timeout with an event.
func TestDeletionDrainsANodeMatchedLate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		answer := time.Duration(rapid.IntRange(0, 60).Draw(t, "answerS")) * time.Second
		found := rapid.Bool().Draw(t, "found")
		// An answer at the timeout's step still counts: the step sees it.
		timedOut := answer > nodeLookupTimeout
		requested := t0
		in := Input{Cluster: "c1", Name: "m1", Desired: deletedAt(requested), Status: status(capnv1.MachineRunning.Wire(), withBootstrap, infraReady),
			Infra: infra("Running")}
		var events []string
		for at := requested; at.Before(requested.Add(2 * time.Minute)); at = at.Add(time.Second) {
			node := kubeNode(at, unmatched)
			if at.Sub(requested) >= answer {
				if found {
					node.NodeUid, node.NodeName = "uid", "w-1"
				} else {
					node.NodeDeleted = true
				}
			}
			in.Now, in.Node = at, node
			out := Step(in, Timeouts{})
			in.Status = out.Status
			for _, ev := range out.Events {
				events = append(events, ev.Reason)
			}
			if len(out.Commands) == 0 {
				continue
			}
			waited := at.Sub(requested)
			switch {
			case found && !timedOut && out.Status.GetDrainStartTime() == nil:
				t.Fatalf("delete command at +%s without a drain; the Node was matched at +%s", waited, answer)
			case timedOut && waited < nodeLookupTimeout:
				t.Fatalf("delete command at +%s, before the lookup timed out", waited)
			case timedOut && !slices.Contains(events, "NodeNotFound"):
				t.Fatalf("lookup timed out without a NodeNotFound event: %v", events)
			case !timedOut && slices.Contains(events, "NodeNotFound"):
				t.Fatalf("a NodeNotFound event, but the answer came at +%s: %v", answer, events)
			}
			return
		}
		if !found || timedOut {
			t.Fatalf("no delete command within 2 minutes (answer at +%s, found %v)", answer, found)
		}
	})
}
