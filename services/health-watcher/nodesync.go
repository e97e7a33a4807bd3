package healthwatcher

import (
	"maps"
	"slices"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// The pure half of syncing a pool's labels and taints to its Nodes
// (nodesync_apply.go is the other). A machine's spec carries its pool's
// labels and taints as the user wrote them (the planner rewrites them in
// place when the pool's change, never rolling a machine); each is set on
// the machine's Node. The keys capn set are recorded on the Node itself,
// in two annotations, so that a key removed from the pool is removed from
// the Node and a key capn never set (the kubelet's, a user's, another
// controller's) is never touched — Cluster API keeps the same record in
// cluster.x-k8s.io/labels-from-machine. capn's bookkeeping labels on the
// machine record (capn.dev/cluster, capn.dev/pool: metadata.labels) are
// not the pool's and are not synced.

// Annotations on a workload Node recording what capn set on it.
const (
	// AnnotationManagedLabels: the label keys capn set, sorted,
	// comma-separated.
	AnnotationManagedLabels = "capn.dev/managed-labels"
	// AnnotationManagedTaints: the taints capn set, as key:effect, sorted,
	// comma-separated (a Node's taint is identified by its key and effect).
	AnnotationManagedTaints = "capn.dev/managed-taints"
)

// NodeMeta is what the sync reads and writes of a Node.
type NodeMeta struct {
	// ResourceVersion is the Node's metadata.resourceVersion: a patch is
	// applied only to the Node as it was read.
	ResourceVersion string
	Labels          map[string]string
	Annotations     map[string]string
	Taints          []NodeTaint
}

// NodeTaint is one of a Node's spec.taints, as the API server has it.
type NodeTaint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
	// TimeAdded is kept as the API server wrote it (the node lifecycle
	// controller sets it on NoExecute taints).
	TimeAdded string `json:"timeAdded,omitempty"`
}

func (t NodeTaint) id() string { return t.Key + ":" + t.Effect }

// NodeSync is the change SyncNode calls for. The zero value changes
// nothing.
type NodeSync struct {
	// Labels and Annotations to set (a value) or remove (nil).
	Labels      map[string]*string
	Annotations map[string]*string
	// Taints is the Node's whole new taint list when it changes (a Node's
	// taints are a list: it is written whole, compare-and-set on the
	// resourceVersion); nil when they do not change.
	Taints []NodeTaint
	// TaintsChanged: Taints is to be written (it may be empty).
	TaintsChanged bool
	// Counts for the log: labels set/removed, taints set/removed.
	LabelsSet, LabelsRemoved, TaintsSet, TaintsRemoved int
}

// Empty reports whether the Node is already as the machine wants it.
func (s NodeSync) Empty() bool {
	return len(s.Labels) == 0 && len(s.Annotations) == 0 && !s.TaintsChanged
}

// SyncNode computes the change that makes node carry labels and taints
// (the machine's spec), capn's way:
//
//   - every label and taint the machine wants is set; one that exists with
//     another value is overwritten (the pool's spec wins, as in Cluster API);
//   - a label or taint capn set before (listed in the Node's managed
//     annotations) that the machine no longer wants is removed;
//   - nothing else of the Node is touched;
//   - the managed annotations are rewritten to what the machine wants now
//     (removed when it wants nothing).
//
// A taint is identified by key and effect (the API server refuses two
// taints with the same pair), so one key may be wanted with two effects.
// Applying the result and computing again gives an empty NodeSync.
func SyncNode(node NodeMeta, labels map[string]string, taints []*capnv1.Taint) NodeSync {
	var s NodeSync
	ownedLabels := splitManaged(node.Annotations[AnnotationManagedLabels])
	for _, k := range sortedMapKeys(labels) {
		if cur, ok := node.Labels[k]; !ok || cur != labels[k] {
			s.setLabel(k, labels[k])
			s.LabelsSet++
		}
	}
	for _, k := range ownedLabels {
		if _, want := labels[k]; !want {
			if _, ok := node.Labels[k]; ok {
				s.removeLabel(k)
				s.LabelsRemoved++
			}
		}
	}

	want := map[string]NodeTaint{}
	var order []string
	for _, t := range taints {
		nt := NodeTaint{Key: t.GetKey(), Value: t.GetValue(), Effect: t.GetEffect()}
		if _, dup := want[nt.id()]; !dup {
			order = append(order, nt.id())
		}
		want[nt.id()] = nt
	}
	ownedTaints := splitManaged(node.Annotations[AnnotationManagedTaints])
	next := make([]NodeTaint, 0, len(node.Taints)+len(order))
	have := map[string]bool{}
	for _, t := range node.Taints {
		id := t.id()
		w, wanted := want[id]
		switch {
		case wanted && have[id]:
			// A second taint of one key and effect (the API server refuses
			// it; never seen): dropped in favour of the first.
			s.TaintsRemoved++
		case wanted:
			have[id] = true
			if t.Value != w.Value {
				t.Value = w.Value
				s.TaintsSet++
			}
			next = append(next, t)
		case slices.Contains(ownedTaints, id):
			s.TaintsRemoved++
		default:
			next = append(next, t)
		}
	}
	for _, id := range order {
		if !have[id] {
			next = append(next, want[id])
			s.TaintsSet++
		}
	}
	if s.TaintsSet > 0 || s.TaintsRemoved > 0 {
		s.Taints, s.TaintsChanged = next, true
	}

	s.annotate(node.Annotations, AnnotationManagedLabels, joinManaged(sortedMapKeys(labels)))
	s.annotate(node.Annotations, AnnotationManagedTaints, joinManaged(order))
	return s
}

func (s *NodeSync) setLabel(k, v string) {
	if s.Labels == nil {
		s.Labels = map[string]*string{}
	}
	s.Labels[k] = &v
}

func (s *NodeSync) removeLabel(k string) {
	if s.Labels == nil {
		s.Labels = map[string]*string{}
	}
	s.Labels[k] = nil
}

// annotate sets annotation k to v, or removes it when v is empty, if the
// Node's differs.
func (s *NodeSync) annotate(cur map[string]string, k, v string) {
	old, ok := cur[k]
	if (v == "" && !ok) || (v != "" && ok && old == v) {
		return
	}
	if s.Annotations == nil {
		s.Annotations = map[string]*string{}
	}
	if v == "" {
		s.Annotations[k] = nil
		return
	}
	s.Annotations[k] = &v
}

// Apply returns node with the change made, as the API server makes it
// from the patch (the resource version aside).
func (s NodeSync) Apply(node NodeMeta) NodeMeta {
	out := NodeMeta{ResourceVersion: node.ResourceVersion, Labels: maps.Clone(node.Labels),
		Annotations: maps.Clone(node.Annotations), Taints: slices.Clone(node.Taints)}
	patch := func(m map[string]string, p map[string]*string) map[string]string {
		if len(p) > 0 && m == nil {
			m = map[string]string{}
		}
		for k, v := range p {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = *v
			}
		}
		return m
	}
	out.Labels = patch(out.Labels, s.Labels)
	out.Annotations = patch(out.Annotations, s.Annotations)
	if s.TaintsChanged {
		out.Taints = slices.Clone(s.Taints)
	}
	return out
}

// Patch is the JSON merge patch (RFC 7386) that makes the change, with the
// Node's resourceVersion as its precondition: the API server refuses it
// (409 Conflict) if the Node changed since it was read, so a concurrent
// edit of its labels or taints by the kubelet or a user is never lost.
func (s NodeSync) Patch(resourceVersion string) map[string]any {
	meta := map[string]any{"resourceVersion": resourceVersion}
	if len(s.Labels) > 0 {
		meta["labels"] = s.Labels
	}
	if len(s.Annotations) > 0 {
		meta["annotations"] = s.Annotations
	}
	body := map[string]any{"metadata": meta}
	if s.TaintsChanged {
		var taints any // null removes spec.taints
		if len(s.Taints) > 0 {
			taints = s.Taints
		}
		body["spec"] = map[string]any{"taints": taints}
	}
	return body
}

// splitManaged reads a managed annotation: its items, empty ones dropped.
func splitManaged(v string) []string {
	var out []string
	for _, k := range strings.Split(v, ",") {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, k)
		}
	}
	return out
}

func joinManaged(items []string) string {
	items = slices.Clone(items)
	slices.Sort(items)
	return strings.Join(slices.Compact(items), ",")
}

func sortedMapKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
