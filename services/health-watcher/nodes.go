package healthwatcher

import (
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
)

// The pure half of reading a workload cluster's Nodes (workload.go is the
// other): which Node is which machine's, what a Node adds to the machine's
// record, and which Nodes to delete.

// SourceKubernetes is the source of the conditions read from a workload
// cluster's Node objects (NodeConditions.source), as opposed to reports
// on capn.health.> (node-problem-detector's bridge, capn-node).
const SourceKubernetes = "kubernetes"

// WorkloadNode is a Node of a workload cluster as the health-watcher reads
// it from GET /api/v1/nodes.
type WorkloadNode struct {
	Name, UID, ProviderID string
	// KubeletVersion is status.nodeInfo.kubeletVersion.
	KubeletVersion string
	// Created is metadata.creationTimestamp (the API server's clock).
	Created time.Time
	// Conditions are status.conditions: the kubelet's (Ready,
	// MemoryPressure, ...) and those others write there, such as
	// node-problem-detector's Kubernetes exporter (KernelDeadlock, ...).
	Conditions []*capnv1.NodeCondition
	// Meta: its labels, annotations and taints (nodesync.go).
	Meta NodeMeta
}

// WorkloadMachine is one machine of the cluster, for matching Nodes.
type WorkloadMachine struct {
	Name string
	// ProviderID is the machine's observed status provider_id ("" until
	// its infrastructure reported one).
	ProviderID string
	// Deleting: its deletion was requested, or it is Deleting or Deleted.
	Deleting bool
	// HoldNode: deleting, but its Node may not be deleted yet — the
	// deletion has not got past the drain (NodeDeletionHold).
	HoldNode bool
	// Drain: deleting, and the machine-manager asks for its Node to be
	// drained now (DrainingSucceeded False, reason Draining).
	Drain bool
	// Drained: deleting, and this deletion drained its Node (the status
	// has a drain start time): the Node is deleted as soon as it is
	// released, however young (the grace is for Nodes that may not be
	// the machine's: an orphan's, a previous incarnation's).
	Drained bool
}

// NodeDeletion is a Node to delete from the workload cluster, and why.
type NodeDeletion struct {
	Node WorkloadNode
	// Machine is the Deleting machine whose Node it is; "" when no machine
	// of the cluster has its providerID any more.
	Machine string
}

// NodePlan is what one read of a workload cluster's Nodes calls for.
type NodePlan struct {
	// Match is each live machine's Node, by machine name.
	Match map[string]WorkloadNode
	// Delete are the Nodes of machines that are being deleted or gone.
	Delete []NodeDeletion
	// Drain are the Nodes of deleting machines to drain (Machine set).
	Drain []NodeDeletion
	// Found are the Nodes of deleting machines that are kept (held or
	// draining), to record as the machine's Node (node_uid) if its record
	// does not name it yet: a machine deleted before a read matched its
	// Node is drained all the same.
	Found []NodeDeletion
	// Gone are the deleting machines (with a provider id) that no Node
	// has: their Node was deleted, if they ever had one.
	Gone []string
}

// PlanNodes matches Nodes to machines by spec.providerID == the machine's
// provider_id (Cluster API's nodeRef rule) and picks the Nodes to delete:
//
//   - a Node without a providerID is not capn's to judge: left alone;
//   - a Node whose machine is Deleting (or Deleted, or its deletion
//     requested) is drained while the machine asks for it (Drain), kept
//     while its deletion has not got past the drain (HoldNode), and
//     deleted after — deleting a control-plane machine's Node is what
//     takes its etcd member out (the control-plane agents remove the
//     member of a name without a control-plane Node);
//   - a Node whose providerID has the scheme of one of the cluster's
//     providers (schemes: "process" for process://...) but is no machine's
//     is deleted, unless live holds its providerID (an infrastructure
//     record of a machine not in the caches yet);
//   - no Node younger than grace is deleted (by its creationTimestamp): a
//     Node that registers before its machine's record lands, or before
//     this replica's caches show it, is never taken for an orphan; only
//     the Node a deletion drained (Drained) goes at once.
//
// Two Nodes claiming one machine: the older is its Node; neither is
// deleted. The result is sorted (deletions by Node name).
func PlanNodes(nodes []WorkloadNode, machines []WorkloadMachine, live map[string]bool, schemes []string, grace time.Duration, now time.Time) NodePlan {
	byID := make(map[string]WorkloadMachine, len(machines))
	for _, m := range machines {
		if m.ProviderID != "" {
			byID[m.ProviderID] = m
		}
	}
	plan := NodePlan{Match: map[string]WorkloadNode{}}
	seen := map[string]bool{}
	for _, n := range nodes {
		if n.ProviderID == "" {
			continue
		}
		seen[n.ProviderID] = true
		old := n.Created.IsZero() || !now.Before(n.Created.Add(grace))
		m, ok := byID[n.ProviderID]
		switch {
		case ok && m.Deleting && m.Drain:
			plan.Drain = append(plan.Drain, NodeDeletion{Node: n, Machine: m.Name})
			plan.Found = append(plan.Found, NodeDeletion{Node: n, Machine: m.Name})
		case ok && m.Deleting && m.HoldNode:
			plan.Found = append(plan.Found, NodeDeletion{Node: n, Machine: m.Name})
		case ok && m.Deleting:
			if old || m.Drained {
				plan.Delete = append(plan.Delete, NodeDeletion{Node: n, Machine: m.Name})
			}
		case ok:
			if cur, dup := plan.Match[m.Name]; !dup || n.Created.Before(cur.Created) {
				plan.Match[m.Name] = n
			}
		case old && !live[n.ProviderID] && slices.Contains(schemes, scheme(n.ProviderID)):
			plan.Delete = append(plan.Delete, NodeDeletion{Node: n})
		}
	}
	for _, m := range machines {
		if m.Deleting && m.ProviderID != "" && !seen[m.ProviderID] {
			plan.Gone = append(plan.Gone, m.Name)
		}
	}
	byNode := func(a, b NodeDeletion) int { return strings.Compare(a.Node.Name, b.Node.Name) }
	slices.SortFunc(plan.Delete, byNode)
	slices.SortFunc(plan.Drain, byNode)
	slices.SortFunc(plan.Found, byNode)
	slices.Sort(plan.Gone)
	return plan
}

// Names the machine-manager gives a deletion's steps (its
// DrainingSucceeded condition and the Deleting condition's reasons; not
// imported: services do not import each other).
const (
	condDrainingSucceeded    = "DrainingSucceeded"
	condDeleting             = "Deleting"
	reasonDraining           = "Draining"
	reasonWaitingForPreDrain = "WaitingForPreDrainHook"
	reasonDrainingNode       = "DrainingNode"
	reasonWaitingForNodeRef  = "WaitingForNodeRef"
)

// NodeDeletionHold says, for a deleting machine (dm its desired record,
// nil when gone; st its status), whether its Node must be kept (hold) and
// whether it is to be drained now (drain). The Node is kept until the
// machine-manager's deletion got past the drain: while the deletion was
// not looked at yet, while it waits for this watcher to find the Node,
// while a pre-drain hook holds it, and while it drains. A machine excluded from draining (annotations.ExcludeNodeDraining),
// Deleted or gone holds nothing.
func NodeDeletionHold(dm *capnv1.Machine, st *capnv1.MachineStatus) (hold, drain bool) {
	if dm == nil || st.GetPhaseValue() == capnv1.MachineDeleted {
		return false, false
	}
	if _, ok := dm.GetMetadata().GetAnnotations()[annotations.ExcludeNodeDraining]; ok {
		return false, false
	}
	deleting := conditions.Get(st.GetConditions(), condDeleting)
	if st.GetPhaseValue() != capnv1.MachineDeleting || deleting == nil {
		return true, false // the machine-manager has not looked yet
	}
	if d := conditions.Get(st.GetConditions(), condDrainingSucceeded); d != nil && d.GetStatusValue() == capnv1.ConditionFalse && d.GetReason() == reasonDraining {
		return true, true
	}
	switch deleting.GetReason() {
	case reasonWaitingForNodeRef, reasonWaitingForPreDrain, reasonDrainingNode:
		return true, false
	}
	return false, false
}

// scheme is the part of a providerID before "://" ("" if none).
func scheme(providerID string) string {
	s, _, ok := strings.Cut(providerID, "://")
	if !ok {
		return ""
	}
	return s
}

// mergeNodeRef records n as a deleting machine's Node (its name and
// uid), which no read had matched while the machine was live.
func mergeNodeRef(h *capnv1.NodeHealth, n WorkloadNode) bool {
	if n.UID == "" || h.GetNodeUid() != "" || h.GetNodeDeleted() {
		return false
	}
	h.NodeUid, h.NodeName = n.UID, n.Name
	return true
}

// mergeNode folds what the machine's Node says into its record: node_name
// (the machine's nodeRef), node_uid (the machine has a workload Node),
// kubelet_version, and the Node's conditions as
// the node conditions the health policy judges, merged by mergeConditions'
// rules, with source kubernetes — the latest per type wins, a repeated
// status keeps its transition, a mere newer heartbeat is no change, and the
// Node's Ready is kept beside the one capn-node's heartbeats decide (both
// are judged). at is when the Nodes were read. It reports whether the
// record changed (a KV write is due).
func mergeNode(h *capnv1.NodeHealth, n WorkloadNode, at time.Time) bool {
	changed := false
	if n.Name != "" && h.GetNodeName() != n.Name {
		h.NodeName, changed = n.Name, true
	}
	if n.UID != "" && h.GetNodeUid() != n.UID {
		h.NodeUid, changed = n.UID, true
	}
	if n.KubeletVersion != "" && h.GetKubeletVersion() != n.KubeletVersion {
		h.KubeletVersion, changed = n.KubeletVersion, true
	}
	if len(n.Conditions) > 0 {
		r := &capnv1.NodeConditions{Cluster: h.GetCluster(), Machine: h.GetMachine(), Source: SourceKubernetes,
			Conditions: n.Conditions, Time: timestamppb.New(at)}
		if mergeConditions(h, r, at) {
			changed = true
		}
	}
	return changed
}
