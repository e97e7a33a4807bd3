package capi

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

// GroupAddons is the API group of ClusterResourceSet.
const GroupAddons = "addons.cluster.x-k8s.io"

// ClusterResourceSets become AddonSets (Cluster API's add-ons, done the
// capn way):
//
//	metadata.name, labels        → metadata.name (a DNS label), labels
//	spec.clusterSelector         → spec.clusterSelector (matchLabels, matchExpressions)
//	spec.strategy                → spec.mode (ApplyOnce, the default, or Reconcile)
//	spec.resources[] ConfigMap   → one inline manifest per data key, in key order (the
//	                               ConfigMap must be in the input; its data is the YAML)
//	spec.resources[] Secret      → a manifest naming the add-on secret of that name
//	                               (secret: NAME), whose content capn addon-secret set
//	                               stores sealed: the import never prints credentials
//
// A ClusterResourceSetBinding is not imported: the addon-manager records
// which sets are applied to which cluster itself.

// addonSets converts every ClusterResourceSet of the input.
func (c *converter) addonSets() {
	for _, o := range c.objs {
		if o.kind != "ClusterResourceSet" || o.group() != GroupAddons {
			continue
		}
		c.claimed[o] = true
		c.sets = append(c.sets, c.addonSet(o))
	}
}

var notLabelChars = regexp.MustCompile(`[^a-z0-9-]+`)

// dnsLabel turns a name into a DNS-1123 label: lower case, other
// characters as '-', at most 63 characters.
func dnsLabel(s string) string {
	s = strings.Trim(notLabelChars.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(s) > 63 {
		s = strings.TrimRight(s[:63], "-")
	}
	return s
}

func (c *converter) addonSet(o *object) *capnv1.AddonSet {
	n := o.at()
	name := dnsLabel(o.name)
	if name != o.name {
		c.notes = append(c.notes, Note{Object: o.ref(), Path: "metadata.name", Value: fmt.Sprintf("%q", o.name),
			Reason: "capn names add-on sets with a DNS-1123 label: imported as " + name})
	}
	n.get("metadata.namespace").use() // capn has no namespaces: the objects say theirs
	s := &capnv1.AddonSet{ApiVersion: manifest.APIVersion, Kind: manifest.KindAddonSet,
		Metadata: &capnv1.ObjectMeta{Name: name, Labels: n.get("metadata.labels").stringMap()},
		Spec:     &capnv1.AddonSetSpec{}}
	spec := n.field("spec")
	sel := &capnv1.LabelSelector{MatchLabels: spec.get("clusterSelector.matchLabels").stringMap()}
	for _, e := range spec.get("clusterSelector.matchExpressions").items() {
		key, _ := e.field("key").str()
		op, _ := e.field("operator").str()
		vals, _ := e.field("values").strings()
		sel.MatchExpressions = append(sel.MatchExpressions, &capnv1.LabelSelectorRequirement{Key: key, Operator: op, Values: vals})
	}
	if len(sel.GetMatchLabels()) > 0 || len(sel.GetMatchExpressions()) > 0 {
		s.Spec.ClusterSelector = sel
	} else {
		c.notes = append(c.notes, Note{Object: o.ref(), Path: "spec.clusterSelector",
			Reason: "empty: Cluster API applies such a set to no cluster, capn to every cluster (a default add-on); give it a selector"})
	}
	if c.out != nil && !manifest.SelectorMatches(sel, c.out.GetMetadata().GetLabels()) {
		c.notes = append(c.notes, Note{Object: o.ref(), Path: "spec.clusterSelector",
			Reason: "does not select cluster " + c.name + ": its labels do not match (imported as it is)"})
	}
	switch st, _ := spec.field("strategy").str(); st {
	case "", manifest.AddonApplyOnce:
		s.Spec.Mode = manifest.AddonApplyOnce
	case manifest.AddonReconcile:
		s.Spec.Mode = manifest.AddonReconcile
	default:
		c.notes = append(c.notes, Note{Object: o.ref(), Path: "spec.strategy", Value: fmt.Sprintf("%q", st),
			Reason: "capn knows ApplyOnce and Reconcile: imported as ApplyOnce"})
		s.Spec.Mode = manifest.AddonApplyOnce
	}
	for i, r := range spec.field("resources").items() {
		kind, _ := r.field("kind").str()
		rname, _ := r.field("name").str()
		res := c.find(kind, rname)
		switch kind {
		case "ConfigMap":
			if res == nil {
				c.noteRef(o, node{path: fmt.Sprintf("spec.resources[%d]", i)}, kind, rname,
					reasonMissing("ConfigMap "+rname+": put it in the input (its data keys are the manifests)"))
				continue
			}
			c.claimed[res] = true
			rn := res.at()
			rn.get("metadata.namespace").use()
			// Cluster API applies a resource's data keys in sorted order.
			data := rn.field("data")
			entries := data.entries(false)
			slices.SortStableFunc(entries, func(a, b entry) int { return strings.Compare(a.key, b.key) })
			for _, e := range entries {
				y, ok := e.val.str()
				if !ok {
					continue
				}
				s.Spec.Manifests = append(s.Spec.Manifests, &capnv1.AddonManifest{Name: dnsLabel(rname + "-" + e.key), Yaml: y})
			}
			if bd := rn.field("binaryData"); bd.exists() {
				c.note(res, bd, "capn applies YAML from data: binaryData is not imported")
			}
		case "Secret":
			secret := dnsLabel(rname)
			s.Spec.Manifests = append(s.Spec.Manifests, &capnv1.AddonManifest{Name: dnsLabel(rname), Secret: secret})
			how := "its content is not printed: store the decoded value of each data key with capn addon-secret set " + secret + " -f FILE"
			if res == nil {
				c.noteRef(o, node{path: fmt.Sprintf("spec.resources[%d]", i)}, kind, rname, "a Secret: imported as a reference to the add-on secret "+secret+"; "+how)
				continue
			}
			c.claimed[res] = true
			c.noteObject(res, "imported as the add-on secret "+secret+" that AddonSet "+name+" names; "+how)
		default:
			c.noteRef(o, node{path: fmt.Sprintf("spec.resources[%d]", i)}, kind, rname, "a ClusterResourceSet applies ConfigMaps and Secrets only")
		}
	}
	return s
}

// validateSets defaults and validates a copy of each set, its problems
// prefixed with the set.
func validateSets(sets []*capnv1.AddonSet) error {
	var errs []error
	for _, s := range sets {
		d := proto.CloneOf(s)
		manifest.DefaultAddonSet(d)
		err := manifest.ValidateAddonSet(d)
		if err == nil {
			continue
		}
		for _, e := range unjoin(err) {
			var fe *manifest.FieldError
			if errors.As(e, &fe) {
				errs = append(errs, &manifest.FieldError{Path: "AddonSet/" + s.GetMetadata().GetName() + " " + fe.Path, Value: fe.Value, Reason: fe.Reason})
				continue
			}
			errs = append(errs, fmt.Errorf("AddonSet/%s: %w", s.GetMetadata().GetName(), e))
		}
	}
	return errors.Join(errs...)
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// hasCRS says whether the input holds a ClusterResourceSet.
func hasCRS(objs []*object) bool {
	return slices.ContainsFunc(objs, func(o *object) bool { return o.kind == "ClusterResourceSet" && o.group() == GroupAddons })
}
