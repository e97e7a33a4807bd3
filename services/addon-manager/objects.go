package addonmanager

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

// content is a set's objects as they are now, in the order they are
// applied, and their hash (what a Reconcile set is applied again on).
type content struct {
	objects []manifest.AddonObject
	hash    string
}

// secretReader reads an add-on secret's YAML: false when there is none.
type secretReader func(name string) (yaml string, ok bool, err error)

// contentOf reads set s's manifests — inline, or from their add-on
// secrets — into its objects. An error (a secret missing or not opening,
// YAML that no longer parses) says which manifest.
func contentOf(s *capnv1.AddonSet, secret secretReader) (content, error) {
	h := sha256.New()
	var objs []manifest.AddonObject
	for i, m := range s.GetSpec().GetManifests() {
		src, from := m.GetYaml(), "yaml"
		if name := m.GetSecret(); name != "" {
			y, ok, err := secret(name)
			switch {
			case err != nil:
				return content{}, fmt.Errorf("manifest %s: add-on secret %s: %w", manifestName(m, i), name, err)
			case !ok:
				return content{}, fmt.Errorf("manifest %s: add-on secret %s does not exist (capn addon-secret set %s -f FILE)", manifestName(m, i), name, name)
			}
			src, from = y, "secret "+name
		}
		o, err := manifest.ParseAddonObjects(src)
		if err != nil {
			return content{}, fmt.Errorf("manifest %s (%s): %w", manifestName(m, i), from, err)
		}
		fmt.Fprintf(h, "%d:%s:%d:%s\n", i, manifestName(m, i), len(src), src)
		objs = append(objs, applyOrder(o)...)
	}
	return content{objects: objs, hash: hex.EncodeToString(h.Sum(nil))[:16]}, nil
}

func manifestName(m *capnv1.AddonManifest, i int) string {
	if m.GetName() != "" {
		return m.GetName()
	}
	return fmt.Sprintf("manifest-%d", i)
}

// applyOrder puts a manifest's Namespaces first, then its
// CustomResourceDefinitions, then the rest as written: what the others
// need exists before them (kubectl and Helm order them so too).
func applyOrder(objs []manifest.AddonObject) []manifest.AddonObject {
	rank := func(o manifest.AddonObject) int {
		switch {
		case o.Kind == "Namespace" && o.APIVersion == "v1":
			return 0
		case o.Kind == "CustomResourceDefinition":
			return 1
		}
		return 2
	}
	out := slices.Clone(objs)
	slices.SortStableFunc(out, func(a, b manifest.AddonObject) int { return rank(a) - rank(b) })
	return out
}

// refs are the objects as a record lists them.
func refs(objs []manifest.AddonObject) []*capnv1.AddonObject {
	out := make([]*capnv1.AddonObject, len(objs))
	for i, o := range objs {
		out[i] = &capnv1.AddonObject{ApiVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name}
	}
	return out
}

// refKey identifies an object across versions of a set.
func refKey(o *capnv1.AddonObject) string {
	return o.GetApiVersion() + "|" + o.GetKind() + "|" + o.GetNamespace() + "|" + o.GetName()
}

// pruned are the objects of old that now are not in objs, in reverse
// order (dependents before what they need).
func pruned(old []*capnv1.AddonObject, objs []*capnv1.AddonObject) []*capnv1.AddonObject {
	keep := map[string]bool{}
	for _, o := range objs {
		keep[refKey(o)] = true
	}
	var out []*capnv1.AddonObject
	for i := len(old) - 1; i >= 0; i-- {
		if !keep[refKey(old[i])] {
			out = append(out, old[i])
		}
	}
	return out
}

func refString(o *capnv1.AddonObject) string {
	if o.GetNamespace() != "" {
		return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
	}
	return o.GetKind() + "/" + o.GetName()
}
