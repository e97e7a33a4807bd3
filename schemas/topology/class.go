package topology

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

// KindClusterClass is the ClusterClass resource's kind.
const KindClusterClass = manifest.KindClusterClass

var variableNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,62}$`)

// ValidateClass reports every problem of a class at once (errors.Join of
// *manifest.FieldError with manifest paths): its name, the template (no
// pools, no topology of its own), the pool classes (unique DNS-label
// names, a template each) and every variable (name, type, default, enum,
// bounds, and each path against the ClusterSpec schema and the type).
func ValidateClass(c *capnv1.ClusterClass) error {
	var errs []error
	add := func(path string, value any, format string, args ...any) {
		errs = append(errs, &manifest.FieldError{Path: path, Value: value, Reason: fmt.Sprintf(format, args...)})
	}
	if v := c.GetApiVersion(); v != "" && v != manifest.APIVersion {
		add("apiVersion", v, "unsupported: must be %s", manifest.APIVersion)
	}
	if k := c.GetKind(); k != "" && k != KindClusterClass {
		add("kind", k, "unsupported: must be %s", KindClusterClass)
	}
	if n := c.GetMetadata().GetName(); !manifest.IsDNSLabel(n) {
		add("metadata.name", n, "required: a DNS label (lower-case letters, digits and '-', at most 63)")
	}
	sp := c.GetSpec()
	switch {
	case sp.GetTemplate() == nil:
		add("spec.template", nil, "required: the cluster spec every cluster of the class starts from")
	case len(sp.GetTemplate().GetWorkerPools()) > 0:
		add("spec.template.workerPools", nil, "must be empty: a class's pools are its poolClasses, and each cluster names its own (spec.topology.pools)")
	}
	if sp.GetTemplate().GetTopology() != nil {
		add("spec.template.topology", nil, "must be empty: a class is not a class cluster")
	}
	pcs := map[string]bool{}
	for i, pc := range sp.GetPoolClasses() {
		p := fmt.Sprintf("spec.poolClasses[%d]", i)
		switch {
		case !manifest.IsDNSLabel(pc.GetName()):
			add(p+".name", pc.GetName(), "required: a DNS label")
		case pcs[pc.GetName()]:
			add(p+".name", pc.GetName(), "duplicate pool class")
		}
		pcs[pc.GetName()] = true
		if pc.GetTemplate() == nil {
			add(p+".template", nil, "required: the worker pool the class's pools start from")
		} else if pc.GetTemplate().GetName() != "" {
			add(p+".template.name", pc.GetTemplate().GetName(), "must be empty: each cluster names its pools")
		}
	}
	vars := map[string]bool{}
	for i, v := range sp.GetVariables() {
		p := fmt.Sprintf("spec.variables[%d]", i)
		switch {
		case !variableNameRE.MatchString(v.GetName()):
			add(p+".name", v.GetName(), "required: a letter then letters, digits or '_' (at most 63)")
		case vars[v.GetName()]:
			add(p+".name", v.GetName(), "duplicate variable")
		}
		vars[v.GetName()] = true
		if !slices.Contains(Types, v.GetType()) {
			add(p+".type", v.GetType(), "must be one of %s", strings.Join(Types, ", "))
			continue // the rest depends on the type
		}
		if v.GetType() != TypeInteger && (v.Minimum != nil || v.Maximum != nil) {
			add(p, nil, "minimum and maximum bound an integer variable only")
		}
		if v.Minimum != nil && v.Maximum != nil && v.GetMinimum() > v.GetMaximum() {
			add(p+".maximum", v.GetMaximum(), "must be at least minimum (%d)", v.GetMinimum())
		}
		bare := &capnv1.ClassVariable{Type: v.GetType()}
		for j, e := range v.GetEnum() {
			if _, reason := parseValue(bare, e); reason != "" {
				add(fmt.Sprintf("%s.enum[%d]", p, j), e, "%s", reason)
			}
		}
		if v.GetRequired() && v.GetDefault() != "" {
			add(p+".default", v.GetDefault(), "a required variable takes no default")
		} else if v.GetDefault() != "" {
			if _, reason := parseValue(v, v.GetDefault()); reason != "" {
				add(p+".default", v.GetDefault(), "%s", reason)
			}
		}
		if len(v.GetPaths()) == 0 {
			add(p+".paths", nil, "required: at least one path the value is written to, e.g. /controlPlane/replicas")
		}
		for j, path := range v.GetPaths() {
			if err := CheckPath(path, v.GetType()); err != nil {
				add(fmt.Sprintf("%s.paths[%d]", p, j), path, "%v", err)
			}
		}
	}
	return errors.Join(errs...)
}
