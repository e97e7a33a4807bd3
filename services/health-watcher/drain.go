package healthwatcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/kubeapi"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// Draining the Node of a deleting machine, as Cluster API drains (its
// drain helper is kubectl drain's): the machine-manager starts a drain
// (DrainingSucceeded False, reason Draining) and the health-watcher, on
// each read of the cluster's Nodes, makes one pass — cordon the Node,
// list its pods, evict every pod the drain moves through the Eviction
// API, which honours PodDisruptionBudgets — and records what is left in
// the machine's NodeHealth.drain. Level-driven: a pass starts from what
// the API says, so a restarted watcher goes on where the last one was.
// No pod is ever deleted: a budget that refuses holds the drain until it
// allows, or until the machine's nodeDrainTimeout ends it.

// DrainPass is what one pass over a Node's pods found and did.
type DrainPass struct {
	// Cordoned: the Node is unschedulable (the pass's first step).
	Cordoned bool
	// Evicted are the pods whose eviction the API accepted this pass.
	Evicted []kubeapi.Pod
	// Blocked are the pods whose eviction a budget refused, by budget
	// name ("" when neither the API nor a budget's selector named one).
	Blocked map[string][]kubeapi.Pod
	// Terminating are pods being deleted that the drain waits for.
	Terminating []kubeapi.Pod
	// Failed are evictions that failed otherwise, with why.
	Failed []string
}

// Skipped reports whether the drain leaves pod p on the Node, as kubectl
// drain does: a DaemonSet's pod (recreated at once), a static pod's
// mirror (the kubelet owns it), one that finished (Succeeded or Failed).
// A terminating pod is waited for while the Node is Ready; on a Node
// that is not, its kubelet cannot finish it, and it is skipped (Cluster
// API skips such pods on unreachable Nodes).
func Skipped(p kubeapi.Pod, nodeReady bool) bool {
	switch {
	case p.DaemonSet, p.Mirror, p.Phase == "Succeeded", p.Phase == "Failed":
		return true
	case p.Terminating:
		return !nodeReady
	}
	return false
}

// Summary is the NodeDrain a pass leads to: Drained when nothing the
// drain moves is left, else Evicting with the pods left and what holds
// them.
func (d DrainPass) Summary() *capnv1.NodeDrain {
	left := len(d.Evicted) + len(d.Terminating) + len(d.Failed)
	var blocking []string
	budgets := make([]string, 0, len(d.Blocked))
	for b, pods := range d.Blocked {
		budgets = append(budgets, b)
		left += len(pods)
		for _, p := range pods {
			blocking = append(blocking, p.String())
		}
	}
	if left == 0 {
		return &capnv1.NodeDrain{State: capnv1.NodeDrainDrained}
	}
	slices.Sort(budgets)
	slices.Sort(blocking)
	var parts []string
	for _, b := range budgets {
		pods := d.Blocked[b]
		names := make([]string, 0, len(pods))
		for _, p := range pods {
			names = append(names, p.String())
		}
		slices.Sort(names)
		what := "PodDisruptionBudget " + b
		if b == "" {
			what = "a PodDisruptionBudget"
		}
		parts = append(parts, fmt.Sprintf("%s blocked by %s (%s)", plural(len(pods), "pod"), what, list(names, 3)))
	}
	if n := len(d.Evicted) + len(d.Terminating); n > 0 {
		parts = append(parts, plural(n, "pod")+" terminating")
	}
	if len(d.Failed) > 0 {
		parts = append(parts, fmt.Sprintf("%s failed to evict (%s)", plural(len(d.Failed), "pod"), list(d.Failed, 2)))
	}
	return &capnv1.NodeDrain{State: capnv1.NodeDrainEvicting, PodsRemaining: int32(left), Message: strings.Join(parts, "; "), BlockingPods: blocking}
}

func plural(n int, what string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// list names up to max items, then "…".
func list(items []string, max int) string {
	if len(items) <= max {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:max], ", ") + ", …"
}

// drainPass makes one pass over node n: cordon, list, evict. A pass that
// fails after the cordon says so (Cordoned). A budget
// that refuses is named from the API's answer, or found among the pod
// namespace's budgets by its selector.
func drainPass(ctx context.Context, c *kubeapi.Client, n WorkloadNode) (DrainPass, error) {
	if err := c.Cordon(ctx, n.Name); err != nil {
		return DrainPass{}, err
	}
	pods, err := c.ListPodsOnNode(ctx, n.Name)
	if err != nil {
		return DrainPass{Cordoned: true}, err
	}
	ready := nodeReady(n)
	pass := DrainPass{Cordoned: true, Blocked: map[string][]kubeapi.Pod{}}
	budgets := map[string][]kubeapi.PDB{} // by namespace, read once a pass
	for _, p := range pods {
		switch {
		case Skipped(p, ready):
			continue
		case p.Terminating:
			pass.Terminating = append(pass.Terminating, p)
			continue
		}
		err := c.Evict(ctx, p)
		var blocked *kubeapi.EvictionBlocked
		switch {
		case err == nil:
			pass.Evicted = append(pass.Evicted, p)
		case errors.As(err, &blocked):
			name := blocked.Budget
			if name == "" {
				if _, ok := budgets[p.Namespace]; !ok {
					budgets[p.Namespace], _ = c.ListPDBs(ctx, p.Namespace)
				}
				for _, b := range budgets[p.Namespace] {
					if b.Selects(p.Labels) {
						name = b.Name
						break
					}
				}
			}
			pass.Blocked[name] = append(pass.Blocked[name], p)
		case ctx.Err() != nil:
			return DrainPass{}, ctx.Err()
		default:
			pass.Failed = append(pass.Failed, fmt.Sprintf("%s: %v", p, err))
		}
	}
	return pass, nil
}

// nodeReady: the Node's Ready condition is True.
func nodeReady(n WorkloadNode) bool {
	return slices.ContainsFunc(n.Conditions, func(c *capnv1.NodeCondition) bool {
		return c.GetType() == ConditionReady && c.GetStatus() == capnv1.ConditionTrue.Wire()
	})
}

// mergeDrain records a drain's progress d in h; a pass that found the
// same as the last one changes nothing (its time is not a change).
func mergeDrain(h *capnv1.NodeHealth, d *capnv1.NodeDrain, at time.Time) bool {
	if cur := h.GetDrain(); cur != nil {
		prev := proto.Clone(cur).(*capnv1.NodeDrain)
		prev.Updated = nil
		if proto.Equal(prev, d) {
			return false
		}
	}
	d = proto.Clone(d).(*capnv1.NodeDrain)
	d.Updated = timestamppb.New(at)
	h.Drain = d
	return true
}

// mergeNodeDeleted records that the deleting machine's Node is gone:
// deleted by the watcher, or not found on a read. With no node_uid the
// machine never had a Node this watcher saw: it has none to drain (the
// machine-manager waits for this answer, node_expected). A Node that is
// gone is drained, too.
func mergeNodeDeleted(h *capnv1.NodeHealth, at time.Time) bool {
	if h.GetNodeDeleted() {
		return false
	}
	h.NodeDeleted = true
	if h.GetNodeUid() != "" && h.GetDrain().GetState() != capnv1.NodeDrainDrained {
		h.Drain = &capnv1.NodeDrain{State: capnv1.NodeDrainDrained, Message: "the Node is gone", Updated: timestamppb.New(at)}
	}
	return true
}

// recordDeleting merges into the record of a deleting machine (its
// reports and the evaluation leave it alone): the drain's progress, the
// Node's deletion. The machine must still be desired (its incarnation's
// creation time keys the record).
func (s *Service) recordDeleting(ctx context.Context, cluster, machine string, at time.Time, merge func(*capnv1.NodeHealth) bool) (bool, error) {
	dm, ok := decodeCached(s.desired, keys.Machine(cluster, machine), newMachine)
	if !ok {
		return false, nil
	}
	r := report{cluster: cluster, machine: machine, key: cluster + "." + machine, at: at, created: dm.GetMetadata().GetCreationTimestamp().AsTime()}
	wrote, err := s.applyReport(ctx, r, merge)
	if err != nil {
		return false, fmt.Errorf("record the drain of %s.%s: %w", cluster, machine, err)
	}
	return wrote, nil
}
