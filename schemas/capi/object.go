package capi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v2"
)

// object is one Kubernetes object of the input, with a record of the
// paths the conversion consumed; what is left is reported as not mapped.
type object struct {
	apiVersion, kind, name string
	root                   yaml.MapSlice
	used                   map[string]bool
	// whole is set when one note covers the whole object: none of its
	// fields is reported again.
	whole bool
}

// useAll marks the whole object as covered by one note.
func (o *object) useAll() { o.whole = true }

// ref is "Kind/name", how notes and errors name an object.
func (o *object) ref() string { return o.kind + "/" + o.name }

// group is the API group of apiVersion: "cluster.x-k8s.io".
func (o *object) group() string { g, _, _ := strings.Cut(o.apiVersion, "/"); return g }

// version is the version of apiVersion: "v1beta2".
func (o *object) version() string {
	if _, v, ok := strings.Cut(o.apiVersion, "/"); ok {
		return v
	}
	return o.apiVersion
}

// at is the root of o as a node.
func (o *object) at() node { return node{o: o, v: o.root} }

// node is one value inside an object, with its path ("spec.replicas",
// "spec.files[0].path", "metadata.labels[app]").
type node struct {
	o    *object
	path string
	v    any
}

func (n node) child(p string) string {
	if n.path == "" {
		return p
	}
	return n.path + "." + p
}

// field is the value of a mapping's key (a missing node when absent).
func (n node) field(name string) node {
	out := node{o: n.o, path: n.child(name)}
	if ms, ok := n.v.(yaml.MapSlice); ok {
		for _, it := range ms {
			if fmt.Sprint(it.Key) == name {
				out.v = it.Value
			}
		}
	}
	return out
}

// get follows a dotted path of fields: n.get("spec.template.spec").
func (n node) get(path string) node {
	for p := range strings.SplitSeq(path, ".") {
		n = n.field(p)
	}
	return n
}

// exists is true for a value that is not null.
func (n node) exists() bool { return n.v != nil }

// empty is true for null, "", an empty mapping or an empty list.
func (n node) empty() bool {
	switch v := n.v.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case yaml.MapSlice:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
}

// blank is true for an empty value, or a mapping or list of blank ones
// ({template: {spec: {}}}): nothing is set in it.
func blank(v any) bool {
	switch v := v.(type) {
	case yaml.MapSlice:
		for _, it := range v {
			if !blank(it.Value) {
				return false
			}
		}
		return true
	case []any:
		return len(v) == 0
	}
	return node{v: v}.empty()
}

// use marks n and everything under it as consumed.
func (n node) use() {
	if n.o != nil {
		n.o.used[n.path] = true
	}
}

// str is a scalar as a string, consumed.
func (n node) str() (string, bool) {
	switch v := n.v.(type) {
	case string:
		n.use()
		return v, true
	case int, int64, uint64, float64, bool:
		n.use()
		return fmt.Sprint(v), true
	}
	return "", false
}

// integer is a whole number (or a string holding one), consumed.
func (n node) integer() (int64, bool) {
	switch v := n.v.(type) {
	case int:
		n.use()
		return int64(v), true
	case int64:
		n.use()
		return v, true
	case uint64:
		if v <= 1<<62 {
			n.use()
			return int64(v), true
		}
	case float64:
		if v == float64(int64(v)) {
			n.use()
			return int64(v), true
		}
	case string:
		if i, err := strconv.ParseInt(v, 10, 64); err == nil {
			n.use()
			return i, true
		}
	}
	return 0, false
}

// boolean is true or false (or "true"/"false"), consumed.
func (n node) boolean() (bool, bool) {
	switch v := n.v.(type) {
	case bool:
		n.use()
		return v, true
	case string:
		if b, err := strconv.ParseBool(v); err == nil {
			n.use()
			return b, true
		}
	}
	return false, false
}

// items are the elements of a list.
func (n node) items() []node {
	l, _ := n.v.([]any)
	out := make([]node, len(l))
	for i, v := range l {
		out[i] = node{o: n.o, path: n.path + "[" + strconv.Itoa(i) + "]", v: v}
	}
	return out
}

// strings is a list of scalars, consumed when every item is one.
func (n node) strings() ([]string, bool) {
	var out []string
	for _, it := range n.items() {
		s, ok := it.str()
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	n.use()
	return out, true
}

// entry is one key of a mapping.
type entry struct {
	key string
	val node
}

// entries are a mapping's keys in document order, each with its path as
// a field ("spec.a") or, with brackets, as a map key ("labels[a.b/c]").
func (n node) entries(asKeys bool) []entry {
	ms, _ := n.v.(yaml.MapSlice)
	out := make([]entry, 0, len(ms))
	for _, it := range ms {
		k := fmt.Sprint(it.Key)
		p := n.child(k)
		if asKeys {
			p = n.path + "[" + k + "]"
		}
		out = append(out, entry{key: k, val: node{o: n.o, path: p, v: it.Value}})
	}
	return out
}

// stringMap is a mapping of scalars (labels, v1beta1 extra args); the
// keys whose value is not a scalar are left unconsumed.
func (n node) stringMap() map[string]string {
	var out map[string]string
	for _, e := range n.entries(true) {
		if s, ok := e.val.str(); ok {
			if out == nil {
				out = map[string]string{}
			}
			out[e.key] = s
		}
	}
	return out
}

// scalarJSON renders a value for a provider parameter: scalars as they
// are, mappings and lists as compact JSON.
func scalarJSON(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case nil:
		return ""
	case int, int64, uint64, float64, bool:
		return fmt.Sprint(v)
	}
	b, err := json.Marshal(toJSON(v))
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// toJSON turns YAML values into what encoding/json writes in order.
func toJSON(v any) any {
	switch v := v.(type) {
	case yaml.MapSlice:
		var b bytes.Buffer
		b.WriteByte('{')
		for i, it := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(fmt.Sprint(it.Key))
			b.Write(k)
			b.WriteByte(':')
			val, _ := json.Marshal(toJSON(it.Value))
			b.Write(val)
		}
		b.WriteByte('}')
		return json.RawMessage(b.Bytes())
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = toJSON(e)
		}
		return out
	}
	return v
}

// parseObjects reads every document of a YAML stream (or JSON), expanding
// Kubernetes List objects, and keeps those with a kind. Documents that are
// empty are skipped; a document that is not a mapping is an error.
func parseObjects(data []byte) ([]*object, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []*object
	for i := 1; ; i++ {
		var doc yaml.MapSlice
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			var te *yaml.TypeError
			if errors.As(err, &te) {
				return nil, fmt.Errorf("document %d: must be a Kubernetes object (a mapping with apiVersion and kind)", i)
			}
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if doc == nil {
			continue
		}
		objs, err := objectsOf(doc, fmt.Sprintf("document %d", i))
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
}

func objectsOf(doc yaml.MapSlice, where string) ([]*object, error) {
	o := &object{root: doc, used: map[string]bool{}}
	n := o.at()
	o.apiVersion, _ = n.field("apiVersion").str()
	o.kind, _ = n.field("kind").str()
	o.name, _ = n.get("metadata.name").str()
	if o.kind == "" || o.apiVersion == "" {
		return nil, fmt.Errorf("%s: not a Kubernetes object: apiVersion and kind are required", where)
	}
	if o.kind == "List" || strings.HasSuffix(o.kind, "List") && n.field("items").exists() {
		var out []*object
		for i, it := range n.field("items").items() {
			ms, ok := it.v.(yaml.MapSlice)
			if !ok {
				return nil, fmt.Errorf("%s: items[%d]: must be a Kubernetes object", where, i)
			}
			objs, err := objectsOf(ms, fmt.Sprintf("%s: items[%d]", where, i))
			if err != nil {
				return nil, err
			}
			out = append(out, objs...)
		}
		return out, nil
	}
	if o.name == "" {
		return nil, fmt.Errorf("%s: %s has no metadata.name", where, o.kind)
	}
	return []*object{o}, nil
}

// silent are paths never reported: identity, server-owned metadata and
// status. metadata.namespace is not among them: capn has no namespaces,
// which the Cluster's note says.
var silent = []string{
	"apiVersion", "kind", "status",
	"metadata.name", "metadata.uid", "metadata.resourceVersion", "metadata.generation",
	"metadata.creationTimestamp", "metadata.deletionTimestamp", "metadata.managedFields", "metadata.ownerReferences",
	"metadata.finalizers", "metadata.selfLink", "metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]",
}

// unmapped walks o and returns the highest paths of which nothing was
// consumed, in document order, each with its value when it is a scalar.
func (o *object) unmapped() []node {
	if o.whole {
		return nil
	}
	for _, p := range silent {
		o.used[p] = true
	}
	var out []node
	var walk func(n node)
	walk = func(n node) {
		if n.path != "" && o.used[n.path] {
			return
		}
		if n.path != "" && !o.usedUnder(n.path) {
			if !blank(n.v) {
				out = append(out, n)
			}
			return
		}
		switch n.v.(type) {
		case yaml.MapSlice:
			asKeys := isStringMapPath(n.path)
			for _, e := range n.entries(asKeys) {
				walk(e.val)
			}
		case []any:
			for _, it := range n.items() {
				walk(it)
			}
		}
	}
	walk(o.at())
	return out
}

// usedUnder is true when some path below p was consumed.
func (o *object) usedUnder(p string) bool {
	for u := range o.used {
		if strings.HasPrefix(u, p+".") || strings.HasPrefix(u, p+"[") {
			return true
		}
	}
	return false
}

// isStringMapPath says whether a mapping's keys are data (labels,
// annotations, v1beta1 extra args) rather than field names.
func isStringMapPath(p string) bool {
	for _, suffix := range []string{"labels", "annotations", "kubeletExtraArgs", "extraArgs", "matchLabels"} {
		if strings.HasSuffix(p, suffix) {
			return true
		}
	}
	return false
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// pathOrder numbers every path of o in document order (pre-order).
func (o *object) pathOrder() map[string]int {
	out := map[string]int{}
	var walk func(n node)
	walk = func(n node) {
		out[n.path] = len(out)
		switch n.v.(type) {
		case yaml.MapSlice:
			for _, e := range n.entries(isStringMapPath(n.path)) {
				walk(e.val)
			}
		case []any:
			for _, it := range n.items() {
				walk(it)
			}
		}
	}
	walk(peek(o.root))
	return out
}

// peek is a node over v that reads without marking anything of an object
// used (its reads are not the conversion's).
func peek(v any) node { return node{o: &object{used: map[string]bool{}}, v: v} }
