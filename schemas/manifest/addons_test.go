package manifest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

const cniSet = `apiVersion: capn.dev/v1alpha1
kind: AddonSet
metadata:
  name: cni
spec:
  clusterSelector:
    matchLabels:
      cni: demo
    matchExpressions:
    - key: env
      operator: NotIn
      values: [prod]
  mode: Reconcile
  blocking: true
  order: -1
  onRemove: Delete
  reconcileInterval: 30s
  manifests:
  - name: base
    yaml: |
      apiVersion: v1
      kind: Namespace
      metadata:
        name: demo-cni
      ---
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: settings
        namespace: demo-cni
      data:
        mtu: "1450"
        "80": port
  - secret: cni-credentials
`

func TestDecodeAddonSet(t *testing.T) {
	s, err := DecodeAddonSet([]byte(cniSet))
	if err != nil {
		t.Fatal(err)
	}
	DefaultAddonSet(s)
	if err := ValidateAddonSet(s); err != nil {
		t.Fatalf("valid set refused: %v", err)
	}
	sp := s.GetSpec()
	if sp.GetMode() != AddonReconcile || !sp.GetBlocking() || sp.GetOrder() != -1 || sp.GetOnRemove() != AddonRemoveDelete ||
		sp.GetReconcileInterval().AsDuration() != 30*time.Second || sp.GetManifests()[1].GetName() != "manifest-1" {
		t.Errorf("decoded %v", sp)
	}
	objs, err := ParseAddonObjects(sp.GetManifests()[0].GetYaml())
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].String() != "Namespace/demo-cni" || objs[1].String() != "ConfigMap/demo-cni/settings" {
		t.Fatalf("objects %v", objs)
	}
	if d := objs[1].Body["data"].(map[string]any); d["80"] != "port" || d["mtu"] != "1450" {
		t.Errorf("data %v", d)
	}
	// Encode gives back what decodes to the same set.
	out, err := EncodeAddonSet(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeAddonSet(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !proto.Equal(back, s) {
		t.Errorf("round trip:\n%s\ngave %v", out, back)
	}

	for _, tt := range []struct{ name, in, want string }{
		{"a cluster", "apiVersion: capn.dev/v1alpha1\nkind: Cluster\n", `kind: "Cluster": unsupported: must be AddonSet`},
		{"a ClusterResourceSet", "apiVersion: addons.cluster.x-k8s.io/v1beta1\nkind: ClusterResourceSet\n", "convert it with capn import"},
		{"unknown field", "apiVersion: capn.dev/v1alpha1\nkind: AddonSet\nspec:\n  mod: Reconcile\n", `spec.mod: unknown field; did you mean "mode"?`},
		{"two", "kind: AddonSet\n---\nkind: AddonSet\n", "more than one document"},
	} {
		if _, err := DecodeAddonSet([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

func validSet() *capnv1.AddonSet {
	s := &capnv1.AddonSet{Metadata: &capnv1.ObjectMeta{Name: "cni"}, Spec: &capnv1.AddonSetSpec{
		Manifests: []*capnv1.AddonManifest{{Yaml: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: default\n"}}}}
	DefaultAddonSet(s)
	return s
}

func TestValidateAddonSet(t *testing.T) {
	if err := ValidateAddonSet(validSet()); err != nil {
		t.Fatal(err)
	}
	if s := validSet(); s.Spec.Mode != AddonApplyOnce || s.Spec.OnRemove != AddonRemoveLeave || s.Spec.ReconcileInterval != nil {
		t.Errorf("defaults: %v", s.Spec)
	}
	tests := []struct {
		name   string
		modify func(s *capnv1.AddonSet)
		want   []string
	}{
		{"name", func(s *capnv1.AddonSet) { s.Metadata.Name = "CNI.x" }, []string{`metadata.name: "CNI.x": must be a DNS-1123 label`}},
		{"no spec", func(s *capnv1.AddonSet) { s.Spec = nil }, []string{"spec: required"}},
		{"modes", func(s *capnv1.AddonSet) { s.Spec.Mode, s.Spec.OnRemove = "Always", "Orphan" },
			[]string{`spec.mode: "Always": must be ApplyOnce or Reconcile`, `spec.onRemove: "Orphan": must be Leave or Delete`}},
		{"interval without Reconcile", func(s *capnv1.AddonSet) { s.Spec.ReconcileInterval = durationpb.New(time.Minute) },
			[]string{`spec.reconcileInterval: "1m0s": only a Reconcile set is applied again`}},
		{"interval too short", func(s *capnv1.AddonSet) {
			s.Spec.Mode, s.Spec.ReconcileInterval = AddonReconcile, durationpb.New(time.Second)
		}, []string{`spec.reconcileInterval: "1s": must be at least 5s`}},
		{"selector", func(s *capnv1.AddonSet) {
			s.Spec.ClusterSelector = &capnv1.LabelSelector{MatchLabels: map[string]string{"a b": "x"}, MatchExpressions: []*capnv1.LabelSelectorRequirement{
				{Key: "env", Operator: "In"}, {Key: "x", Operator: "Exists", Values: []string{"y"}}, {Key: "z", Operator: "Near"}, {Operator: "Exists"}}}
		}, []string{"spec.clusterSelector.matchLabels[a b]: key must be a qualified name", "spec.clusterSelector.matchExpressions[0].values: required: In needs at least one value",
			"spec.clusterSelector.matchExpressions[1].values: must be empty", `spec.clusterSelector.matchExpressions[2].operator: "Near": must be In, NotIn, Exists or DoesNotExist`,
			"spec.clusterSelector.matchExpressions[3].key: required"}},
		{"no manifests", func(s *capnv1.AddonSet) { s.Spec.Manifests = nil }, []string{"spec.manifests: required"}},
		{"both and neither", func(s *capnv1.AddonSet) {
			s.Spec.Manifests = []*capnv1.AddonManifest{{Name: "a", Yaml: "x", Secret: "y"}, {Name: "b"}, {Name: "a", Secret: "Bad_Name"}}
		}, []string{"spec.manifests[0]: set one of yaml and secret, not both", "spec.manifests[1]: required: yaml", `spec.manifests[2].name: "a": duplicate`,
			`spec.manifests[2].secret: "Bad_Name": must be a DNS-1123 label`}},
		{"objects", func(s *capnv1.AddonSet) {
			s.Spec.Manifests[0].Yaml = "kind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nmetadata: {}\n---\n- a\n---\napiVersion: a/b/c\nkind: List\nmetadata:\n  name: x\n  namespace: Bad\n"
		}, []string{"spec.manifests[0].yaml: document 1: apiVersion: required", "spec.manifests[0].yaml: document 2: kind: required",
			"spec.manifests[0].yaml: document 2: metadata.name: required", "spec.manifests[0].yaml: document 3: must be a Kubernetes object",
			`spec.manifests[0].yaml: document 4: apiVersion: "a/b/c"`, `spec.manifests[0].yaml: document 4: kind: "List"`, "spec.manifests[0].yaml: document 4: metadata.namespace: Bad"}},
		{"not YAML", func(s *capnv1.AddonSet) { s.Spec.Manifests[0].Yaml = "a: [" }, []string{"spec.manifests[0].yaml: parse manifest"}},
		{"only comments", func(s *capnv1.AddonSet) { s.Spec.Manifests[0].Yaml = "# nothing\n---\n" }, []string{"spec.manifests[0].yaml: holds no object"}},
		{"too many", func(s *capnv1.AddonSet) {
			s.Spec.Manifests[0].Yaml = strings.Repeat("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n", MaxAddonObjects+1)
		}, []string{"spec.manifests: 501 objects: a set holds at most 500"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSet()
			tt.modify(s)
			err := ValidateAddonSet(s)
			var got []string
			for _, e := range flatten(err) {
				var fe *FieldError
				if !errors.As(e, &fe) {
					t.Fatalf("not a FieldError: %v", e)
				}
				got = append(got, fe.Error())
			}
			for _, w := range tt.want {
				found := false
				for _, g := range got {
					found = found || strings.HasPrefix(g, w)
				}
				if !found {
					t.Errorf("want %q among:\n  %s", w, strings.Join(got, "\n  "))
				}
			}
			if len(got) != len(tt.want) {
				t.Errorf("got %d errors, want %d:\n  %s", len(got), len(tt.want), strings.Join(got, "\n  "))
			}
		})
	}
}

func TestAddonSetSelects(t *testing.T) {
	cluster := func(labels map[string]string, optOut bool) *capnv1.Cluster {
		return &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "c", Labels: labels},
			Spec: &capnv1.ClusterSpec{Addons: &capnv1.AddonsSpec{DisableDefaults: optOut}}}
	}
	set := func(sel *capnv1.LabelSelector) *capnv1.AddonSet {
		return &capnv1.AddonSet{Metadata: &capnv1.ObjectMeta{Name: "s"}, Spec: &capnv1.AddonSetSpec{ClusterSelector: sel}}
	}
	expr := func(key, op string, values ...string) *capnv1.LabelSelector {
		return &capnv1.LabelSelector{MatchExpressions: []*capnv1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
	}
	web := map[string]string{"tier": "web", "env": "dev"}
	tests := []struct {
		name string
		set  *capnv1.AddonSet
		c    *capnv1.Cluster
		want bool
	}{
		{"default set, any cluster", set(nil), cluster(nil, false), true},
		{"default set, opted out", set(&capnv1.LabelSelector{}), cluster(web, true), false},
		{"labelled set, opted out of defaults only", set(&capnv1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}), cluster(web, true), true},
		{"matchLabels miss", set(&capnv1.LabelSelector{MatchLabels: map[string]string{"tier": "db"}}), cluster(web, false), false},
		{"In", set(expr("env", SelectorIn, "dev", "qa")), cluster(web, false), true},
		{"In, label absent", set(expr("zone", SelectorIn, "a")), cluster(web, false), false},
		{"NotIn", set(expr("env", SelectorNotIn, "prod")), cluster(web, false), true},
		{"NotIn, label absent", set(expr("zone", SelectorNotIn, "a")), cluster(web, false), true},
		{"NotIn hit", set(expr("env", SelectorNotIn, "dev")), cluster(web, false), false},
		{"Exists", set(expr("tier", SelectorExists)), cluster(web, false), true},
		{"DoesNotExist", set(expr("tier", SelectorDoesNotExist)), cluster(web, false), false},
		{"unknown operator", set(expr("tier", "Near")), cluster(web, false), false},
	}
	for _, tt := range tests {
		if got := AddonSetSelects(tt.set, tt.c); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	deleting := set(nil)
	deleting.Metadata.DeletionTimestamp = timestamppb.Now()
	if AddonSetSelects(deleting, cluster(nil, false)) {
		t.Error("a set being deleted selects")
	}
}

func TestAddonApplied(t *testing.T) {
	set := &capnv1.AddonSet{Metadata: &capnv1.ObjectMeta{Name: "s", Uid: "u1", Generation: 3}, Spec: &capnv1.AddonSetSpec{Mode: AddonReconcile}}
	rec := func(uid string, gen int64, status capnv1.ConditionStatus) *capnv1.ClusterAddonStatus {
		return &capnv1.ClusterAddonStatus{SetUid: uid, AppliedGeneration: gen,
			Conditions: []*capnv1.Condition{{Type: AddonConditionApplied, Status: status.Wire()}}}
	}
	if !AddonApplied(set, rec("u1", 3, capnv1.ConditionTrue)) {
		t.Error("applied at the current generation: not applied")
	}
	for name, r := range map[string]*capnv1.ClusterAddonStatus{
		"none": nil, "another incarnation": rec("u0", 3, capnv1.ConditionTrue), "older generation": rec("u1", 2, capnv1.ConditionTrue),
		"failed": rec("u1", 3, capnv1.ConditionFalse), "no condition": {SetUid: "u1", AppliedGeneration: 3},
	} {
		if AddonApplied(set, r) {
			t.Errorf("%s: applied", name)
		}
	}
	set.Spec.Mode = AddonApplyOnce
	if !AddonApplied(set, rec("u1", 1, capnv1.ConditionTrue)) {
		t.Error("an ApplyOnce set applied at an older generation: not applied")
	}
}

// FuzzDecodeAddonSet: decoding and validating never panic; whatever
// decodes encodes to a manifest that decodes to the same set; inline YAML
// that parses gives objects with a kind and a name.
func FuzzDecodeAddonSet(f *testing.F) {
	f.Add([]byte(cniSet))
	f.Add([]byte("apiVersion: capn.dev/v1alpha1\nkind: AddonSet\nspec:\n  manifests:\n  - yaml: '{\"kind\": \"A\"}'\n"))
	f.Add([]byte(`{"kind":"AddonSet","spec":{"clusterSelector":{"matchExpressions":[{"key":"a","operator":"In"}]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeAddonSet(data)
		if err != nil {
			return
		}
		DefaultAddonSet(s)
		_ = ValidateAddonSet(s)
		out, err := EncodeAddonSet(s)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		back, err := DecodeAddonSet(out)
		if err != nil || !proto.Equal(back, s) {
			t.Fatalf("round trip (%v):\n%s", err, out)
		}
		for _, m := range s.GetSpec().GetManifests() {
			objs, err := ParseAddonObjects(m.GetYaml())
			if err != nil {
				continue
			}
			for _, o := range objs {
				if o.Kind == "" || o.Name == "" || o.APIVersion == "" {
					t.Fatalf("an object without identity: %+v", o)
				}
			}
		}
	})
}
