package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/types/known/durationpb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// The AddonSet resource: its kind, modes, removal policies and defaults.
const (
	KindAddonSet = "AddonSet"

	// AddonApplyOnce applies a set to a cluster once; a changed set is not
	// applied again (Cluster API's ClusterResourceSet ApplyOnce).
	AddonApplyOnce = "ApplyOnce"
	// AddonReconcile applies a set again on every change and every
	// reconcile interval: drift is undone.
	AddonReconcile = "Reconcile"

	// AddonRemoveLeave keeps the objects of a set that stops selecting a
	// cluster; AddonRemoveDelete deletes them.
	AddonRemoveLeave  = "Leave"
	AddonRemoveDelete = "Delete"

	// DefaultAddonReconcileInterval and MinAddonReconcileInterval bound how
	// often a Reconcile set is applied again with nothing changed.
	DefaultAddonReconcileInterval = time.Minute
	MinAddonReconcileInterval     = 5 * time.Second

	// MaxAddonObjects bounds the objects of one set (all its manifests).
	MaxAddonObjects = 500
)

// Label selector operators (Kubernetes').
const (
	SelectorIn           = "In"
	SelectorNotIn        = "NotIn"
	SelectorExists       = "Exists"
	SelectorDoesNotExist = "DoesNotExist"
)

// DecodeAddonSet reads exactly one AddonSet from YAML or JSON, reporting
// every unknown field and wrong type with its path, as Decode does for a
// Cluster.
func DecodeAddonSet(data []byte) (*capnv1.AddonSet, error) {
	docs, err := parseDocuments(data)
	if err != nil {
		return nil, err
	}
	switch len(docs) {
	case 0:
		return nil, ErrEmpty
	case 1:
	default:
		return nil, fmt.Errorf("%w: found %d; send one add-on set per request", ErrMultipleDocuments, len(docs))
	}
	top, ok := docs[0].(yaml.MapSlice)
	if !ok {
		return nil, &FieldError{Path: "(document)", Reason: "must be a mapping with apiVersion, kind, metadata and spec, not " + describe(docs[0])}
	}
	var errs fieldErrors
	for _, it := range top {
		switch it.Key {
		case "apiVersion", "api_version":
			if s, ok := it.Value.(string); ok && s != APIVersion {
				hint := ""
				if strings.Contains(s, "addons.cluster.x-k8s.io") {
					hint = " (this looks like a Cluster API ClusterResourceSet: convert it with capn import)"
				}
				errs.add("apiVersion", s, "unsupported: must be %s%s", APIVersion, hint)
			}
		case "kind":
			if s, ok := it.Value.(string); ok && s != KindAddonSet {
				errs.add("kind", s, "unsupported: must be %s", KindAddonSet)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s := &capnv1.AddonSet{}
	f := &filler{}
	f.message(top, s.ProtoReflect(), "")
	// Values that were not strings (apiVersion: 1) are checked as filled.
	if s.ApiVersion != "" && s.ApiVersion != APIVersion {
		f.errs.add("apiVersion", s.ApiVersion, "unsupported: must be %s", APIVersion)
	}
	if s.Kind != "" && s.Kind != KindAddonSet {
		f.errs.add("kind", s.Kind, "unsupported: must be %s", KindAddonSet)
	}
	if len(f.errs) > 0 {
		return nil, errors.Join(f.errs...)
	}
	return s, nil
}

// DefaultAddonSet fills what an AddonSet may leave out, in place
// (idempotent): apiVersion and kind, mode ApplyOnce, onRemove Leave, the
// reconcile interval of a Reconcile set (1m), and each manifest's name
// (manifest-<index>).
func DefaultAddonSet(s *capnv1.AddonSet) {
	if s == nil {
		return
	}
	if s.ApiVersion == "" {
		s.ApiVersion = APIVersion
	}
	if s.Kind == "" {
		s.Kind = KindAddonSet
	}
	sp := s.Spec
	if sp == nil {
		return
	}
	if sp.Mode == "" {
		sp.Mode = AddonApplyOnce
	}
	if sp.OnRemove == "" {
		sp.OnRemove = AddonRemoveLeave
	}
	if sp.Mode == AddonReconcile && sp.ReconcileInterval == nil {
		sp.ReconcileInterval = durationpb.New(DefaultAddonReconcileInterval)
	}
	for i, m := range sp.Manifests {
		if m != nil && m.Name == "" {
			m.Name = fmt.Sprintf("manifest-%d", i)
		}
	}
}

// ValidateAddonSet reports every bad field of a (defaulted) AddonSet at
// once, as errors.Join of *FieldError: its name, the selector, the modes,
// and every manifest — inline YAML must parse into Kubernetes objects,
// each with apiVersion, kind and metadata.name.
func ValidateAddonSet(s *capnv1.AddonSet) error {
	if s == nil {
		return &FieldError{Path: "(document)", Reason: "no add-on set"}
	}
	var errs fieldErrors
	if s.ApiVersion != APIVersion {
		errs.add("apiVersion", s.ApiVersion, "must be %s", APIVersion)
	}
	if s.Kind != KindAddonSet {
		errs.add("kind", s.Kind, "must be %s", KindAddonSet)
	}
	validateMeta(s.Metadata, "metadata", &errs)
	sp := s.Spec
	p := path("spec")
	if sp == nil {
		errs.add(p, nil, "required")
		return errors.Join(errs...)
	}
	validateSelector(sp.ClusterSelector, p.child("clusterSelector"), &errs)
	switch sp.Mode {
	case AddonApplyOnce, AddonReconcile, "":
	default:
		errs.add(p.child("mode"), sp.Mode, "must be %s or %s", AddonApplyOnce, AddonReconcile)
	}
	switch sp.OnRemove {
	case AddonRemoveLeave, AddonRemoveDelete, "":
	default:
		errs.add(p.child("onRemove"), sp.OnRemove, "must be %s or %s", AddonRemoveLeave, AddonRemoveDelete)
	}
	if d := sp.ReconcileInterval; d != nil {
		switch {
		case d.CheckValid() != nil || d.AsDuration() < MinAddonReconcileInterval:
			errs.add(p.child("reconcileInterval"), d.AsDuration().String(), "must be at least %s", MinAddonReconcileInterval)
		case sp.Mode != AddonReconcile && sp.Mode != "":
			errs.add(p.child("reconcileInterval"), d.AsDuration().String(), "only a Reconcile set is applied again: set mode: Reconcile, or leave it out")
		}
	}
	if len(sp.Manifests) == 0 {
		errs.add(p.child("manifests"), nil, "required: at least one manifest (yaml or secret)")
	}
	names := map[string]int{}
	objects := 0
	for i, m := range sp.Manifests {
		mp := p.child("manifests").index(i)
		if m == nil {
			errs.add(mp, nil, "must not be null")
			continue
		}
		switch {
		case m.Name == "":
			errs.add(mp.child("name"), nil, "required")
		case !IsDNSLabel(m.Name):
			errs.add(mp.child("name"), m.Name, dnsLabelRule)
		default:
			if j, dup := names[m.Name]; dup {
				errs.add(mp.child("name"), m.Name, "duplicate: spec.manifests[%d] has the same name", j)
			}
			names[m.Name] = i
		}
		switch {
		case m.Yaml != "" && m.Secret != "":
			errs.add(mp, nil, "set one of yaml and secret, not both")
		case m.Yaml == "" && m.Secret == "":
			errs.add(mp, nil, "required: yaml (the objects, inline) or secret (the name of an add-on secret holding them)")
		case m.Secret != "" && !IsDNSLabel(m.Secret):
			errs.add(mp.child("secret"), m.Secret, dnsLabelRule)
		case m.Yaml != "":
			objs, err := ParseAddonObjects(m.Yaml)
			for _, e := range flatten(err) {
				if e != nil {
					errs.add(mp.child("yaml"), nil, "%v", e)
				}
			}
			if err == nil && len(objs) == 0 {
				errs.add(mp.child("yaml"), nil, "holds no object")
			}
			objects += len(objs)
		}
	}
	if objects > MaxAddonObjects {
		errs.add(p.child("manifests"), nil, "%d objects: a set holds at most %d (split it into several sets)", objects, MaxAddonObjects)
	}
	return errors.Join(errs...)
}

func validateSelector(sel *capnv1.LabelSelector, p path, errs *fieldErrors) {
	if sel == nil {
		return
	}
	validateLabels(sel.MatchLabels, p.child("matchLabels"), errs)
	for i, r := range sel.MatchExpressions {
		rp := p.child("matchExpressions").index(i)
		if r == nil {
			errs.add(rp, nil, "must not be null")
			continue
		}
		switch {
		case r.Key == "":
			errs.add(rp.child("key"), nil, "required")
		case !IsQualifiedName(r.Key):
			errs.add(rp.child("key"), r.Key, qualifiedNameRule)
		}
		switch r.Operator {
		case SelectorIn, SelectorNotIn:
			if len(r.Values) == 0 {
				errs.add(rp.child("values"), nil, "required: %s needs at least one value", r.Operator)
			}
		case SelectorExists, SelectorDoesNotExist:
			if len(r.Values) > 0 {
				errs.add(rp.child("values"), nil, "must be empty: %s takes no values", r.Operator)
			}
		case "":
			errs.add(rp.child("operator"), nil, "required: %s, %s, %s or %s", SelectorIn, SelectorNotIn, SelectorExists, SelectorDoesNotExist)
		default:
			errs.add(rp.child("operator"), r.Operator, "must be %s, %s, %s or %s", SelectorIn, SelectorNotIn, SelectorExists, SelectorDoesNotExist)
		}
		for j, v := range r.Values {
			if !IsLabelValue(v) {
				errs.add(rp.child("values").index(j), v, labelValueRule)
			}
		}
	}
}

// IsDefaultAddonSet reports a set with an empty cluster selector: it
// selects every cluster but those that disable the default add-ons.
func IsDefaultAddonSet(s *capnv1.AddonSet) bool {
	sel := s.GetSpec().GetClusterSelector()
	return len(sel.GetMatchLabels()) == 0 && len(sel.GetMatchExpressions()) == 0
}

// AddonSetSelects says whether set s is for cluster c: its selector
// matches c's labels (an empty one every cluster, unless c disables the
// default add-ons). A set or cluster being deleted selects nothing.
func AddonSetSelects(s *capnv1.AddonSet, c *capnv1.Cluster) bool {
	if s == nil || c == nil || s.GetMetadata().GetDeletionTimestamp() != nil || c.GetMetadata().GetDeletionTimestamp() != nil {
		return false
	}
	if IsDefaultAddonSet(s) {
		return !c.GetSpec().GetAddons().GetDisableDefaults()
	}
	return SelectorMatches(s.GetSpec().GetClusterSelector(), c.GetMetadata().GetLabels())
}

// SelectorMatches says whether labels satisfy sel (nil or empty: every
// labels). An operator it does not know matches nothing.
func SelectorMatches(sel *capnv1.LabelSelector, labels map[string]string) bool {
	for k, v := range sel.GetMatchLabels() {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for _, r := range sel.GetMatchExpressions() {
		v, ok := labels[r.GetKey()]
		switch r.GetOperator() {
		case SelectorIn:
			if !ok || !slices.Contains(r.GetValues(), v) {
				return false
			}
		case SelectorNotIn:
			if ok && slices.Contains(r.GetValues(), v) {
				return false
			}
		case SelectorExists:
			if !ok {
				return false
			}
		case SelectorDoesNotExist:
			if ok {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// AddonObject is one Kubernetes object of an add-on manifest, as JSON
// values (map[string]any, []any, string, bool, int64, float64, nil), with
// what identifies it.
type AddonObject struct {
	APIVersion, Kind, Namespace, Name string
	Body                              map[string]any
}

// String is kind/name or kind/namespace/name.
func (o AddonObject) String() string {
	if o.Namespace != "" {
		return o.Kind + "/" + o.Namespace + "/" + o.Name
	}
	return o.Kind + "/" + o.Name
}

// ParseAddonObjects reads the objects of an add-on manifest: YAML
// documents separated by "---" (empty ones skipped), JSON objects, or a
// JSON array. Each must be a mapping with apiVersion, kind and
// metadata.name (metadata.namespace, when set, a DNS label); a List is
// refused (write its items as documents). Every problem is reported,
// naming its document.
func ParseAddonObjects(src string) ([]AddonObject, error) {
	docs, err := parseAnyDocuments([]byte(src))
	if err != nil {
		return nil, err
	}
	var out []AddonObject
	var errs []error
	bad := func(i int, format string, a ...any) {
		errs = append(errs, fmt.Errorf("document %d: %s", i+1, fmt.Sprintf(format, a...)))
	}
	for i, d := range docs {
		body, ok := plain(d).(map[string]any)
		if !ok {
			bad(i, "must be a Kubernetes object (a mapping with apiVersion, kind and metadata), not %s", describe(d))
			continue
		}
		o := AddonObject{Body: body}
		o.APIVersion, _ = body["apiVersion"].(string)
		o.Kind, _ = body["kind"].(string)
		md, _ := body["metadata"].(map[string]any)
		o.Name, _ = md["name"].(string)
		ns, nsSet := md["namespace"]
		o.Namespace, _ = ns.(string)
		n := len(errs)
		if o.APIVersion == "" {
			bad(i, "apiVersion: required (a string: v1, apps/v1, ...)")
		} else if g, v, ok := strings.Cut(o.APIVersion, "/"); strings.Count(o.APIVersion, "/") > 1 || (ok && (g == "" || v == "")) {
			bad(i, "apiVersion: %q: must be VERSION or GROUP/VERSION", o.APIVersion)
		}
		switch {
		case o.Kind == "":
			bad(i, "kind: required (a string)")
		case o.Kind == "List" || (strings.HasSuffix(o.Kind, "List") && body["items"] != nil):
			bad(i, "kind: %q: a list is not applied as one object: write its items as documents", o.Kind)
		}
		switch {
		case md == nil:
			bad(i, "metadata.name: required")
		case o.Name == "":
			bad(i, "metadata.name: required (a string); generateName is not supported: add-ons are applied again by name")
		case strings.ContainsAny(o.Name, "/%") || o.Name == "." || o.Name == "..":
			bad(i, "metadata.name: %q: not a name the API accepts in a path", o.Name)
		}
		if nsSet && !IsDNSLabel(o.Namespace) {
			bad(i, "metadata.namespace: %v: %s", ns, dnsLabelRule)
		}
		if len(errs) == n {
			out = append(out, o)
		}
	}
	return out, errors.Join(errs...)
}

// parseAnyDocuments is parseDocuments for documents of any shape (a
// document that is not a mapping is reported by its reader, with its
// number).
func parseAnyDocuments(data []byte) ([]any, error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n\ufeff")
	if len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') {
		return parseJSON(trimmed)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []any
	for {
		var doc any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parse manifest: %w", err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// plain turns a parsed document into JSON values: mappings become
// map[string]any (keys as strings), sequences []any.
func plain(v any) any {
	switch x := v.(type) {
	case yaml.MapSlice:
		m := make(map[string]any, len(x))
		for _, it := range x {
			m[keyString(it.Key)] = plain(it.Value)
		}
		return m
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, v := range x {
			m[keyString(k)] = plain(v)
		}
		return m
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plain(e)
		}
		return out
	case int:
		return int64(x)
	}
	return v
}

// AddonApplied is the rule the cluster-planner's AddonsApplied condition
// and the addon-manager share: a cluster's record of set s says the set
// is applied — the record is of this incarnation of the set (its uid),
// its Applied condition is True and, for a Reconcile set, it was applied
// at the set's current generation (an ApplyOnce set is never applied
// again, so any generation will do).
func AddonApplied(s *capnv1.AddonSet, rec *capnv1.ClusterAddonStatus) bool {
	if s == nil || rec == nil || rec.GetSetUid() != s.GetMetadata().GetUid() {
		return false
	}
	ok := false
	for _, c := range rec.GetConditions() {
		if c.GetType() == AddonConditionApplied {
			ok = c.GetStatusValue() == capnv1.ConditionTrue
		}
	}
	if !ok {
		return false
	}
	return s.GetSpec().GetMode() != AddonReconcile || rec.GetAppliedGeneration() >= s.GetMetadata().GetGeneration()
}

// AddonConditionApplied is the condition of a ClusterAddonStatus.
const AddonConditionApplied = "Applied"
