package machinemanager

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/health/policy"
)

// Condition types of a machine's deletion (Cluster API v1beta1's names).
const (
	CondPreDrainDeleteHookSucceeded     = "PreDrainDeleteHookSucceeded"
	CondDrainingSucceeded               = "DrainingSucceeded"
	CondPreTerminateDeleteHookSucceeded = "PreTerminateDeleteHookSucceeded"
)

// Reasons of the deletion's conditions. The Deleting condition's reason
// is the step the deletion is at.
const (
	ReasonWaitingExternalHook = "WaitingExternalHook"
	ReasonDraining            = "Draining"
	ReasonDrainingFailed      = "DrainingFailed"

	ReasonWaitingForNodeRef                = "WaitingForNodeRef"
	ReasonWaitingForPreDrainHook           = "WaitingForPreDrainHook"
	ReasonDrainingNode                     = "DrainingNode"
	ReasonWaitingForNodeDeletion           = "WaitingForNodeDeletion"
	ReasonWaitingForEtcdMemberRemoval      = "WaitingForEtcdMemberRemoval"
	ReasonWaitingForPreTerminateHook       = "WaitingForPreTerminateHook"
	ReasonWaitingForInfrastructureDeletion = "WaitingForInfrastructureDeletion"
)

// Defaults and pacing of a deletion (Cluster API's).
const (
	// DefaultNodeDeletionTimeout is how long a deletion waits for its
	// Node's deletion when the machine sets none.
	DefaultNodeDeletionTimeout = 10 * time.Second
	// drainRequeue is how often a drain in progress is looked at when
	// nothing wakes the machine (Cluster API requeues drains every 20s).
	drainRequeue = 20 * time.Second
	// etcdRequeue bounds the wait for the etcd member's removal between
	// reports.
	etcdRequeue = 10 * time.Second
	// nodeLookupTimeout bounds the wait for the health-watcher to find a
	// deleting machine's Node, or to find none, when the machine's cluster
	// has Nodes it reads (NodeHealth.node_expected). A deletion wakes the
	// watcher's read of the cluster's Nodes, so it answers within a
	// second while the API server answers; one that does not answer
	// cannot be drained through either.
	nodeLookupTimeout = 30 * time.Second
	// agentSilence: a machine whose agent sent no heartbeat for this long
	// is unreachable (the health policy's default heartbeat grace).
	agentSilence = policy.DefaultHeartbeatGrace
)

// deleteStep is one step of a machine's deletion, in Cluster API's order:
//
//	pre-drain hooks → drain the Node → delete the Node → (control plane)
//	etcd member removed → pre-terminate hooks → delete the infrastructure
//	→ Deleted
//
// The Node steps apply to a machine with a workload Node (the
// health-watcher matched one: NodeHealth.node_uid) whose drain is not
// excluded (annotations.ExcludeNodeDraining: its cluster is being
// deleted); the health-watcher cordons, evicts and deletes, this step
// decides when each may begin and when to stop waiting. Each hold says
// where it is in the Deleting condition's reason and message.
func deleteStep(out *Output, st *capnv1.MachineStatus, in Input, deleteID string) {
	now := in.Now
	ann := in.Desired.GetMetadata().GetAnnotations()
	spec := in.Desired.GetSpec()
	node := nodeOf(in)
	nodeName := st.GetNodeName()
	if n := node.GetNodeName(); n != "" {
		nodeName = n
	}
	if nodeName == "" {
		nodeName = in.Name
	}
	setPhase(st, capnv1.MachineDeleting, now)
	setCondition(st, CondReady, capnv1.ConditionFalse, "Deleting", "", now)
	deleting := func(reason, msg string) {
		setCondition(st, CondDeleting, capnv1.ConditionTrue, reason, msg, now)
	}
	requeue := func(d time.Duration) {
		if d > 0 && (out.RequeueAfter == 0 || d < out.RequeueAfter) {
			out.RequeueAfter = d
		}
	}

	// Pre-drain hooks hold every deletion, as Cluster API's.
	if hooks := annotations.Hooks(ann, annotations.PreDrainHookPrefix); len(hooks) > 0 {
		msg := "waiting for pre-drain hooks: " + strings.Join(hooks, ", ")
		if holdChanged(st, CondPreDrainDeleteHookSucceeded, msg) {
			out.Events = append(out.Events, Event{Phase: st.GetPhase(), Reason: "PreDrainHookHold", At: now,
				Message: fmt.Sprintf("machine %s deletion held before draining by pre-drain hooks: %s", in.Name, strings.Join(hooks, ", "))})
		}
		setCondition(st, CondPreDrainDeleteHookSucceeded, capnv1.ConditionFalse, ReasonWaitingExternalHook, msg, now)
		deleting(ReasonWaitingForPreDrainHook, msg)
		return
	}
	releaseHold(st, CondPreDrainDeleteHookSucceeded, now)

	if left := nodeLookup(st, node, ann, in.Desired, now); left > 0 {
		deleting(ReasonWaitingForNodeRef, fmt.Sprintf("looking for the Node of machine %s in the workload cluster (at most %s)", in.Name, nodeLookupTimeout))
		requeue(left)
		return
	}
	if c := conditions.Get(st.GetConditions(), CondDeleting); c.GetReason() == ReasonWaitingForNodeRef && node.GetNodeUid() == "" && !node.GetNodeDeleted() {
		out.Events = append(out.Events, Event{Phase: capnv1.MachineDeleting.Wire(), Reason: "NodeNotFound", At: now,
			Message: fmt.Sprintf("machine %s: the health-watcher found no Node of it within %s (is the workload API server answering?); deleting it without a drain", in.Name, nodeLookupTimeout)})
	}
	if nodeSteps(st, node, ann) {
		if !drained(out, st, in, node, nodeName, deleting, requeue) {
			return
		}
		if !node.GetNodeDeleted() {
			if st.NodeDeletionStartTime == nil {
				st.NodeDeletionStartTime = timestamppb.New(now)
			}
			limit := spec.GetNodeDeletionTimeout().AsDuration()
			if limit <= 0 {
				limit = DefaultNodeDeletionTimeout
			}
			if left := st.GetNodeDeletionStartTime().AsTime().Add(limit).Sub(now); left > 0 {
				deleting(ReasonWaitingForNodeDeletion, fmt.Sprintf("waiting for node %s to be deleted from the workload cluster (at most %s)", nodeName, limit))
				requeue(left)
				return
			}
		}
		if spec.GetRole() == "control-plane" && agentReachable(node, now) {
			if c := etcdRemoved(node); c.GetStatus() != capnv1.ConditionTrue.Wire() {
				msg := fmt.Sprintf("waiting for the etcd member of %s to be removed", nodeName)
				if c != nil && c.GetMessage() != "" {
					msg += ": " + c.GetMessage()
				}
				deleting(ReasonWaitingForEtcdMemberRemoval, msg)
				requeue(min(etcdRequeue, node.GetLastHeartbeat().AsTime().Add(agentSilence).Sub(now)))
				return
			}
		}
	}

	if hooks := annotations.Hooks(ann, annotations.PreTerminateHookPrefix); len(hooks) > 0 {
		msg := "waiting for pre-terminate hooks: " + strings.Join(hooks, ", ")
		if holdChanged(st, CondPreTerminateDeleteHookSucceeded, msg) {
			out.Events = append(out.Events, Event{Phase: st.GetPhase(), Reason: "PreTerminateHookHold", At: now,
				Message: fmt.Sprintf("machine %s deletion held before its infrastructure is deleted by pre-terminate hooks: %s", in.Name, strings.Join(hooks, ", "))})
		}
		setCondition(st, CondPreTerminateDeleteHookSucceeded, capnv1.ConditionFalse, ReasonWaitingExternalHook, msg, now)
		deleting(ReasonWaitingForPreTerminateHook, msg)
		return
	}
	releaseHold(st, CondPreTerminateDeleteHookSucceeded, now)

	// A create was sent once bootstrap data was ready; from then on the
	// provider may hold infrastructure, so it is asked to delete it and
	// the machine is Deleted only when its infra key is gone.
	createSent := conditions.IsTrue(st.GetConditions(), CondBootstrapReady)
	infraGone := in.Infra == nil || in.Infra.GetStateValue() == capnv1.InfraDeleted
	provider := "the provider"
	if p := st.GetProvider(); p != "" {
		provider = "provider " + p
	}
	deleting(ReasonWaitingForInfrastructureDeletion, fmt.Sprintf("waiting for %s to delete the infrastructure", provider))
	if createSent {
		out.Commands = append(out.Commands, Command{CmdDelete, deleteID})
	}
	if createSent && !infraGone {
		setCondition(st, CondInfrastructureReady, capnv1.ConditionFalse, "Deleting", "waiting for the provider to delete the infrastructure", now)
		requeue(30 * time.Second)
		return
	}
	setPhase(st, capnv1.MachineDeleted, now)
	setCondition(st, CondInfrastructureReady, capnv1.ConditionFalse, "Deleted", "no infrastructure left", now)
}

// nodeSteps: the deletion drains and deletes a workload Node first. The
// machine has one (node_uid: the health-watcher matched a Node of the
// workload cluster to it, which never happens on sim) and its drain is
// not excluded. A deletion that went past the Node steps without
// starting them (no Node then) does not come back to them.
func nodeSteps(st *capnv1.MachineStatus, node *capnv1.NodeHealth, ann map[string]string) bool {
	if drainExcluded(ann) {
		return false
	}
	if st.GetDrainStartTime() != nil {
		return true
	}
	return node.GetNodeUid() != "" && !pastNodeSteps(st)
}

// drainExcluded: the machine's annotations exclude its Node from draining
// (and so from the Node steps and the lookup before them).
func drainExcluded(ann map[string]string) bool {
	_, excluded := ann[annotations.ExcludeNodeDraining]
	return excluded
}

// pastNodeSteps: the deletion went on to the pre-terminate hooks or the
// infrastructure's deletion; it never comes back to the Node steps.
func pastNodeSteps(st *capnv1.MachineStatus) bool {
	switch conditions.Get(st.GetConditions(), CondDeleting).GetReason() {
	case ReasonWaitingForPreTerminateHook, ReasonWaitingForInfrastructureDeletion:
		return true
	}
	return false
}

// nodeLookup is how much longer the deletion waits for the
// health-watcher's answer on whether the machine has a Node: its cluster's
// Nodes are read (node_expected), its infrastructure came up (so its agent
// may have registered one), and the watcher has neither matched a Node
// (node_uid) nor found none (node_deleted). Without the wait, a machine
// deleted in the seconds between its Node's registration and the watcher's
// next read would lose its Node undrained. 0: no wait (the answer is in,
// no Node is possible, or the lookup timed out).
func nodeLookup(st *capnv1.MachineStatus, node *capnv1.NodeHealth, ann map[string]string, dm *capnv1.Machine, now time.Time) time.Duration {
	if dm == nil || drainExcluded(ann) || pastNodeSteps(st) || !node.GetNodeExpected() || node.GetNodeUid() != "" ||
		node.GetNodeDeleted() || st.GetInfrastructureReadyTime() == nil || st.GetDrainStartTime() != nil {
		return 0
	}
	since := now
	if dt := dm.GetMetadata().GetDeletionTimestamp(); dt != nil {
		since = dt.AsTime()
	}
	return max(0, since.Add(nodeLookupTimeout).Sub(now))
}

// drained runs the drain step: it records when the drain started (the
// health-watcher drains while DrainingSucceeded is False with reason
// Draining), and reports true once the Node is drained or the machine's
// nodeDrainTimeout (unset or 0: none) passed.
func drained(out *Output, st *capnv1.MachineStatus, in Input, node *capnv1.NodeHealth, nodeName string,
	deleting func(reason, msg string), requeue func(time.Duration)) bool {
	now := in.Now
	if c := conditions.Get(st.GetConditions(), CondDrainingSucceeded); c != nil &&
		(c.GetStatusValue() == capnv1.ConditionTrue || c.GetReason() == ReasonDrainingFailed) {
		return true
	}
	if st.DrainStartTime == nil {
		st.DrainStartTime = timestamppb.New(now)
		out.Events = append(out.Events, Event{Phase: capnv1.MachineDeleting.Wire(), Reason: "DrainStarted", At: now,
			Message: fmt.Sprintf("machine %s: cordoning and draining node %s", in.Name, nodeName)})
	}
	d := node.GetDrain()
	if d.GetState() == capnv1.NodeDrainDrained {
		setCondition(st, CondDrainingSucceeded, capnv1.ConditionTrue, "Drained", "", now)
		out.Events = append(out.Events, Event{Phase: capnv1.MachineDeleting.Wire(), Reason: "DrainSucceeded", At: now,
			Message: fmt.Sprintf("machine %s: node %s drained in %s", in.Name, nodeName, now.Sub(st.GetDrainStartTime().AsTime()).Round(time.Second))})
		return true
	}
	progress := fmt.Sprintf("draining node %s", nodeName)
	switch {
	case d.GetMessage() != "":
		progress += ": " + d.GetMessage()
	case d.GetState() == "":
		progress += ": cordoning"
	}
	limit := in.Desired.GetSpec().GetNodeDrainTimeout().AsDuration()
	if limit > 0 {
		left := st.GetDrainStartTime().AsTime().Add(limit).Sub(now)
		if left <= 0 {
			msg := fmt.Sprintf("drain of node %s did not finish within nodeDrainTimeout %s (%s); deleting the machine anyway", nodeName, limit, strings.TrimPrefix(progress, "draining node "+nodeName+": "))
			setCondition(st, CondDrainingSucceeded, capnv1.ConditionFalse, ReasonDrainingFailed, msg, now)
			out.Events = append(out.Events, Event{Phase: capnv1.MachineDeleting.Wire(), Reason: ReasonDrainingFailed, At: now,
				Message: fmt.Sprintf("machine %s: %s", in.Name, msg)})
			return true
		}
		requeue(left)
	}
	setCondition(st, CondDrainingSucceeded, capnv1.ConditionFalse, ReasonDraining, progress, now)
	deleting(ReasonDrainingNode, progress)
	requeue(drainRequeue)
	return false
}

// nodeOf is the health-watcher's record of this incarnation's node (one
// updated before the machine was created is a previous machine's).
func nodeOf(in Input) *capnv1.NodeHealth {
	n := in.Node
	if n == nil || n.GetUpdated() == nil {
		return nil
	}
	if created := in.Desired.GetMetadata().GetCreationTimestamp(); created != nil && n.GetUpdated().AsTime().Before(created.AsTime()) {
		return nil
	}
	return n
}

// agentReachable: the machine's agent heartbeated within agentSilence.
// One that did not cannot remove its own etcd member; the other control
// planes' agents remove the member of a machine without a Node.
func agentReachable(n *capnv1.NodeHealth, now time.Time) bool {
	hb := n.GetLastHeartbeat()
	return hb != nil && now.Sub(hb.AsTime()) < agentSilence
}

// etcdRemoved is the EtcdMemberRemoved condition the leaving machine's
// agent reported (nil: none yet).
func etcdRemoved(n *capnv1.NodeHealth) *capnv1.NodeCondition {
	for _, c := range n.GetConditions() {
		if c.GetType() == annotations.CondEtcdMemberRemoved {
			return c
		}
	}
	return nil
}

// holdChanged: a hook hold with message msg is new (the condition does not
// say it yet): worth a timeline event.
func holdChanged(st *capnv1.MachineStatus, typ, msg string) bool {
	c := conditions.Get(st.GetConditions(), typ)
	return c == nil || c.GetStatusValue() != capnv1.ConditionFalse || c.GetMessage() != msg
}

// releaseHold marks a hook condition True once no hook holds, if a hook
// ever held (machines no hook touched do not carry the condition).
func releaseHold(st *capnv1.MachineStatus, typ string, now time.Time) {
	if conditions.Get(st.GetConditions(), typ) != nil {
		setCondition(st, typ, capnv1.ConditionTrue, "", "", now)
	}
}
