package healthwatcher

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func taint(key, value, effect string) *capnv1.Taint {
	return &capnv1.Taint{Key: key, Value: value, Effect: effect}
}

func TestSyncNode(t *testing.T) {
	kubelet := map[string]string{"kubernetes.io/hostname": "w-0", "kubernetes.io/os": "linux"}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := maps.Clone(m)
		if out == nil {
			out = map[string]string{}
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	tests := []struct {
		name   string
		node   NodeMeta
		labels map[string]string
		taints []*capnv1.Taint
		// want is the Node after the change; set, removed the counts.
		want                                               NodeMeta
		labelsSet, labelsRemoved, taintsSet, taintsRemoved int
	}{
		{
			name: "nothing wanted, nothing owned: no change",
			node: NodeMeta{Labels: kubelet, Taints: []NodeTaint{{Key: "node.kubernetes.io/not-ready", Effect: "NoSchedule"}}},
			want: NodeMeta{Labels: kubelet, Taints: []NodeTaint{{Key: "node.kubernetes.io/not-ready", Effect: "NoSchedule"}}},
		},
		{
			name:   "first sync: labels and taints set, ownership recorded, the kubelet's kept",
			node:   NodeMeta{Labels: kubelet, Taints: []NodeTaint{{Key: "node.kubernetes.io/unschedulable", Effect: "NoSchedule"}}},
			labels: map[string]string{"tier": "web", "node-role.kubernetes.io/web": ""},
			taints: []*capnv1.Taint{taint("dedicated", "web", "NoSchedule"), taint("gpu", "", "NoExecute")},
			want: NodeMeta{Labels: with(kubelet, "tier", "web", "node-role.kubernetes.io/web", ""),
				Annotations: map[string]string{AnnotationManagedLabels: "node-role.kubernetes.io/web,tier", AnnotationManagedTaints: "dedicated:NoSchedule,gpu:NoExecute"},
				Taints: []NodeTaint{{Key: "node.kubernetes.io/unschedulable", Effect: "NoSchedule"},
					{Key: "dedicated", Value: "web", Effect: "NoSchedule"}, {Key: "gpu", Effect: "NoExecute"}}},
			labelsSet: 2, taintsSet: 2,
		},
		{
			name: "in sync: no change",
			node: NodeMeta{Labels: with(kubelet, "tier", "web"), Annotations: map[string]string{AnnotationManagedLabels: "tier", AnnotationManagedTaints: "dedicated:NoSchedule", "user": "x"},
				Taints: []NodeTaint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}}},
			labels: map[string]string{"tier": "web"},
			taints: []*capnv1.Taint{taint("dedicated", "web", "NoSchedule")},
			want: NodeMeta{Labels: with(kubelet, "tier", "web"), Annotations: map[string]string{AnnotationManagedLabels: "tier", AnnotationManagedTaints: "dedicated:NoSchedule", "user": "x"},
				Taints: []NodeTaint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}}},
		},
		{
			name: "removed from the pool: only capn's keys go, the user's same-looking ones stay",
			node: NodeMeta{Labels: with(kubelet, "tier", "web", "team", "a", "owner", "user"),
				Annotations: map[string]string{AnnotationManagedLabels: "team,tier", AnnotationManagedTaints: "dedicated:NoSchedule"},
				Taints: []NodeTaint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}, {Key: "dedicated", Value: "user", Effect: "NoExecute"},
					{Key: "user", Effect: "PreferNoSchedule"}}},
			labels: map[string]string{"team": "a"},
			want: NodeMeta{Labels: with(kubelet, "team", "a", "owner", "user"), Annotations: map[string]string{AnnotationManagedLabels: "team"},
				Taints: []NodeTaint{{Key: "dedicated", Value: "user", Effect: "NoExecute"}, {Key: "user", Effect: "PreferNoSchedule"}}},
			labelsRemoved: 1, taintsRemoved: 1,
		},
		{
			name:          "everything removed: annotations and taints removed",
			node:          NodeMeta{Labels: with(kubelet, "tier", "web"), Annotations: map[string]string{AnnotationManagedLabels: "tier", AnnotationManagedTaints: "dedicated:NoSchedule"}, Taints: []NodeTaint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}}},
			want:          NodeMeta{Labels: kubelet, Annotations: map[string]string{}, Taints: []NodeTaint{}},
			labelsRemoved: 1, taintsRemoved: 1,
		},
		{
			name: "changed values update, a changed effect is another taint",
			node: NodeMeta{Labels: with(kubelet, "tier", "web"), Annotations: map[string]string{AnnotationManagedLabels: "tier", AnnotationManagedTaints: "dedicated:NoSchedule"},
				Taints: []NodeTaint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}}},
			labels: map[string]string{"tier": "db"},
			taints: []*capnv1.Taint{taint("dedicated", "db", "NoExecute")},
			want: NodeMeta{Labels: with(kubelet, "tier", "db"), Annotations: map[string]string{AnnotationManagedLabels: "tier", AnnotationManagedTaints: "dedicated:NoExecute"},
				Taints: []NodeTaint{{Key: "dedicated", Value: "db", Effect: "NoExecute"}}},
			labelsSet: 1, taintsSet: 1, taintsRemoved: 1,
		},
		{
			name: "a foreign key capn wants is overwritten and becomes capn's; its timeAdded is kept",
			node: NodeMeta{Labels: with(kubelet, "tier", "user"),
				Taints: []NodeTaint{{Key: "dedicated", Value: "user", Effect: "NoExecute", TimeAdded: "2026-12-04T10:00:00Z"}}},
			labels: map[string]string{"tier": "web"},
			taints: []*capnv1.Taint{taint("dedicated", "web", "NoExecute")},
			want: NodeMeta{Labels: with(kubelet, "tier", "web"), Annotations: map[string]string{AnnotationManagedLabels: "tier", AnnotationManagedTaints: "dedicated:NoExecute"},
				Taints: []NodeTaint{{Key: "dedicated", Value: "web", Effect: "NoExecute", TimeAdded: "2026-12-04T10:00:00Z"}}},
			labelsSet: 1, taintsSet: 1,
		},
		{
			name:      "an owned key someone removed from the Node is set again; one removed from both is forgotten",
			node:      NodeMeta{Labels: kubelet, Annotations: map[string]string{AnnotationManagedLabels: "gone,tier"}},
			labels:    map[string]string{"tier": "web"},
			want:      NodeMeta{Labels: with(kubelet, "tier", "web"), Annotations: map[string]string{AnnotationManagedLabels: "tier"}},
			labelsSet: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := SyncNode(tt.node, tt.labels, tt.taints)
			got := s.Apply(tt.node)
			if !maps.Equal(got.Labels, tt.want.Labels) {
				t.Errorf("labels %v, want %v", got.Labels, tt.want.Labels)
			}
			if !maps.Equal(got.Annotations, tt.want.Annotations) {
				t.Errorf("annotations %v, want %v", got.Annotations, tt.want.Annotations)
			}
			if !slices.Equal(got.Taints, tt.want.Taints) {
				t.Errorf("taints %v, want %v", got.Taints, tt.want.Taints)
			}
			if s.LabelsSet != tt.labelsSet || s.LabelsRemoved != tt.labelsRemoved || s.TaintsSet != tt.taintsSet || s.TaintsRemoved != tt.taintsRemoved {
				t.Errorf("counts set/removed labels %d/%d taints %d/%d, want %d/%d %d/%d", s.LabelsSet, s.LabelsRemoved, s.TaintsSet, s.TaintsRemoved,
					tt.labelsSet, tt.labelsRemoved, tt.taintsSet, tt.taintsRemoved)
			}
			if again := SyncNode(got, tt.labels, tt.taints); !again.Empty() {
				t.Errorf("not idempotent: again %+v", again)
			}
		})
	}
}

func TestSyncNodePatch(t *testing.T) {
	node := NodeMeta{ResourceVersion: "42", Labels: map[string]string{"old": "x", "keep": "y"},
		Annotations: map[string]string{AnnotationManagedLabels: "old", AnnotationManagedTaints: "t:NoSchedule"},
		Taints:      []NodeTaint{{Key: "t", Effect: "NoSchedule"}}}
	s := SyncNode(node, map[string]string{"new": "z"}, nil)
	b, err := json.Marshal(s.Patch(node.ResourceVersion))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"annotations":{"capn.dev/managed-labels":"new","capn.dev/managed-taints":null},"labels":{"new":"z","old":null},"resourceVersion":"42"},"spec":{"taints":null}}`
	if string(b) != want {
		t.Errorf("patch\n %s\nwant\n %s", b, want)
	}
	// Labels only: spec is not in the patch, so the taints are not written.
	s = SyncNode(NodeMeta{ResourceVersion: "7"}, map[string]string{"a": "b"}, nil)
	if b, _ := json.Marshal(s.Patch("7")); strings.Contains(string(b), "spec") {
		t.Errorf("patch %s writes spec", b)
	}
}

// Properties over random Nodes and wants: applying the change gives a Node
// that carries every wanted label and taint, keeps every key capn does not
// own untouched, carries no owned key it no longer wants, records exactly
// what it wants, and needs no further change.
func TestSyncNodeProperties(t *testing.T) {
	keysGen := rapid.SampledFrom([]string{"a", "b", "c", "x.io/d", "kubernetes.io/hostname"})
	valGen := rapid.SampledFrom([]string{"", "1", "2"})
	effGen := rapid.SampledFrom([]string{"NoSchedule", "PreferNoSchedule", "NoExecute"})
	taintsGen := func(t *rapid.T, label string) []NodeTaint {
		var out []NodeTaint
		seen := map[string]bool{}
		for _, tt := range rapid.SliceOfN(rapid.Custom(func(t *rapid.T) NodeTaint {
			return NodeTaint{Key: keysGen.Draw(t, "key"), Value: valGen.Draw(t, "value"), Effect: effGen.Draw(t, "effect")}
		}), 0, 6).Draw(t, label) {
			if !seen[tt.id()] {
				seen[tt.id()] = true
				out = append(out, tt)
			}
		}
		return out
	}
	rapid.Check(t, func(t *rapid.T) {
		node := NodeMeta{Labels: rapid.MapOfN(keysGen, valGen, 0, 5).Draw(t, "nodeLabels"), Taints: taintsGen(t, "nodeTaints")}
		ownedLabels := rapid.SliceOfNDistinct(keysGen, 0, 5, rapid.ID).Draw(t, "ownedLabels")
		var ownedTaints []string
		for _, tt := range taintsGen(t, "ownedTaints") {
			ownedTaints = append(ownedTaints, tt.id())
		}
		node.Annotations = map[string]string{AnnotationManagedLabels: strings.Join(ownedLabels, ","), AnnotationManagedTaints: strings.Join(ownedTaints, ",")}
		labels := rapid.MapOfN(keysGen, valGen, 0, 5).Draw(t, "labels")
		var taints []*capnv1.Taint
		for _, tt := range taintsGen(t, "taints") {
			taints = append(taints, taint(tt.Key, tt.Value, tt.Effect))
		}

		got := SyncNode(node, labels, taints).Apply(node)
		for k, v := range labels {
			if got.Labels[k] != v {
				t.Fatalf("label %s=%q, want %q", k, got.Labels[k], v)
			}
		}
		for k, v := range node.Labels {
			_, wanted := labels[k]
			owned := slices.Contains(ownedLabels, k)
			gv, kept := got.Labels[k]
			switch {
			case wanted:
			case owned && kept:
				t.Fatalf("owned label %s no longer wanted but kept", k)
			case !owned && (!kept || gv != v):
				t.Fatalf("foreign label %s=%q changed to %q (kept %v)", k, v, gv, kept)
			}
		}
		gotTaints := map[string]NodeTaint{}
		for _, tt := range got.Taints {
			if _, dup := gotTaints[tt.id()]; dup {
				t.Fatalf("taint %s twice: %v", tt.id(), got.Taints)
			}
			gotTaints[tt.id()] = tt
		}
		want := map[string]bool{}
		for _, tt := range taints {
			want[tt.Key+":"+tt.Effect] = true
			if g, ok := gotTaints[tt.Key+":"+tt.Effect]; !ok || g.Value != tt.Value {
				t.Fatalf("taint %s=%s:%s missing: %v", tt.Key, tt.Value, tt.Effect, got.Taints)
			}
		}
		for _, tt := range node.Taints {
			g, kept := gotTaints[tt.id()]
			owned := slices.Contains(ownedTaints, tt.id())
			switch {
			case want[tt.id()]:
			case owned && kept:
				t.Fatalf("owned taint %s no longer wanted but kept", tt.id())
			case !owned && (!kept || g != tt):
				t.Fatalf("foreign taint %v changed to %v (kept %v)", tt, g, kept)
			}
		}
		if len(gotTaints) != len(want)+countForeign(node.Taints, ownedTaints, want) {
			t.Fatalf("taints %v: not the wanted and the foreign ones", got.Taints)
		}
		if rec := got.Annotations[AnnotationManagedLabels]; rec != joinManaged(slices.Collect(maps.Keys(labels))) {
			t.Fatalf("managed labels recorded %q, want %v", rec, labels)
		}
		if again := SyncNode(got, labels, taints); !again.Empty() {
			t.Fatalf("not idempotent: %+v", again)
		}
	})
}

func countForeign(taints []NodeTaint, owned []string, want map[string]bool) int {
	n := 0
	for _, t := range taints {
		if !want[t.id()] && !slices.Contains(owned, t.id()) {
			n++
		}
	}
	return n
}
