package topology

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

// Variable types.
const (
	TypeString  = "string"
	TypeInteger = "integer"
	TypeBoolean = "boolean"
)

// Types are the variable types, in the order errors list them.
var Types = []string{TypeString, TypeInteger, TypeBoolean}

// Hash is the hex sha256 of a class spec's deterministic encoding: equal
// specs hash equal, so an apply that changes nothing makes no revision.
func Hash(spec *capnv1.ClusterClassSpec) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(spec)
	if err != nil {
		// A message of this package's own types always marshals.
		panic(fmt.Sprintf("topology: marshal class spec: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Render is the spec of a cluster of class at the revision the class
// holds, with the cluster's topology t: the class template, the pools t
// names from the class's pool classes (replicas overridden where t sets
// them), then every variable written to its paths. t is copied into the
// result's topology. Every bad variable and pool is reported at once
// (errors.Join of *manifest.FieldError with paths under
// spec.topology); the result is then nil.
//
// The rendered spec is not defaulted or validated as a cluster: the caller
// copies the cluster-owned fields (paused, hibernated) and checks it as
// any cluster.
func Render(class *capnv1.ClusterClass, t *capnv1.ClusterTopology) (*capnv1.ClusterSpec, error) {
	var errs []error
	add := func(path string, value any, format string, args ...any) {
		errs = append(errs, &manifest.FieldError{Path: path, Value: value, Reason: fmt.Sprintf(format, args...)})
	}
	cs := class.GetSpec()
	spec := proto.CloneOf(cs.GetTemplate())
	if spec == nil {
		spec = &capnv1.ClusterSpec{}
	}
	spec.WorkerPools = nil
	spec.Topology = proto.CloneOf(t)
	where := fmt.Sprintf("class %s revision %d", class.GetMetadata().GetName(), class.GetStatus().GetRevision())

	seen := map[string]bool{}
	for i, p := range t.GetPools() {
		pp := fmt.Sprintf("spec.topology.pools[%d]", i)
		if seen[p.GetName()] {
			add(pp+".name", p.GetName(), "duplicate pool name")
			continue
		}
		seen[p.GetName()] = true
		pc := poolClass(cs, p.GetClass())
		if pc == nil {
			add(pp+".class", p.GetClass(), "not a pool class of %s; allowed: %s", where, orNone(poolClassNames(cs)))
			continue
		}
		wp := proto.CloneOf(pc.GetTemplate())
		if wp == nil {
			wp = &capnv1.WorkerPool{}
		}
		wp.Name = p.GetName()
		wp.PoolClass = pc.GetName()
		if p.Replicas != nil {
			wp.Replicas = p.GetReplicas()
		}
		spec.WorkerPools = append(spec.WorkerPools, wp)
	}

	known := map[string]bool{}
	for _, v := range cs.GetVariables() {
		known[v.GetName()] = true
	}
	for _, name := range sortedKeys(t.GetVariables()) {
		if !known[name] {
			add("spec.topology.variables["+name+"]", nil, "unknown variable of %s; it has: %s", where, orNone(variableNames(cs)))
		}
	}
	for _, v := range cs.GetVariables() {
		vp := "spec.topology.variables[" + v.GetName() + "]"
		raw, set := t.GetVariables()[v.GetName()]
		switch {
		case !set && v.GetRequired():
			add(vp, nil, "required by %s (%s)", where, describeVariable(v))
			continue
		case !set && v.GetDefault() == "":
			continue
		case !set:
			raw = v.GetDefault()
		}
		val, reason := parseValue(v, raw)
		if reason != "" {
			add(vp, raw, "%s", reason)
			continue
		}
		for _, path := range v.GetPaths() {
			if err := apply(spec, path, val); err != nil {
				add(vp, raw, "cannot be written to %s: %v", path, err)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return spec, nil
}

// value is a parsed variable value.
type value struct {
	typ string
	s   string
	i   int64
	b   bool
}

// parseValue reads raw as v's type and checks it against v's enum and
// bounds; reason is why it is refused ("" when it is not).
func parseValue(v *capnv1.ClassVariable, raw string) (value, string) {
	out := value{typ: v.GetType(), s: raw}
	switch v.GetType() {
	case TypeInteger:
		i, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return out, "must be an integer"
		}
		out.i = i
		if v.Minimum != nil && i < v.GetMinimum() {
			return out, fmt.Sprintf("must be at least %d", v.GetMinimum())
		}
		if v.Maximum != nil && i > v.GetMaximum() {
			return out, fmt.Sprintf("must be at most %d", v.GetMaximum())
		}
	case TypeBoolean:
		switch raw {
		case "true":
			out.b = true
		case "false":
		default:
			return out, "must be true or false"
		}
	case TypeString:
	default:
		return out, fmt.Sprintf("the class variable has type %q; allowed: %s", v.GetType(), strings.Join(Types, ", "))
	}
	if len(v.GetEnum()) > 0 && !slices.Contains(v.GetEnum(), raw) {
		return out, "must be one of " + strings.Join(v.GetEnum(), ", ")
	}
	return out, ""
}

func describeVariable(v *capnv1.ClassVariable) string {
	s := v.GetType()
	if len(v.GetEnum()) > 0 {
		s += ", one of " + strings.Join(v.GetEnum(), ", ")
	}
	if d := v.GetDescription(); d != "" {
		s += ": " + d
	}
	return s
}

func poolClass(cs *capnv1.ClusterClassSpec, name string) *capnv1.PoolClass {
	for _, pc := range cs.GetPoolClasses() {
		if pc.GetName() == name {
			return pc
		}
	}
	return nil
}

func poolClassNames(cs *capnv1.ClusterClassSpec) []string {
	var out []string
	for _, pc := range cs.GetPoolClasses() {
		out = append(out, pc.GetName())
	}
	return out
}

func variableNames(cs *capnv1.ClusterClassSpec) []string {
	var out []string
	for _, v := range cs.GetVariables() {
		out = append(out, v.GetName())
	}
	return out
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ClusterOwned are the spec fields a class cluster sets itself beside its
// topology; the class renders the rest. paused and hibernated are the
// cluster's alone; maintenance (windows, auto-patch) and hibernation
// (schedules) are the cluster's when it sets them, else the class
// template's.
var ClusterOwned = []string{"topology", "paused", "hibernated", "maintenance", "hibernation"}

// KeepClusterOwned copies the fields a class cluster owns from its own
// spec (own) into a freshly rendered spec, so a re-render (an apply, a
// rollout's move) never drops them.
func KeepClusterOwned(rendered, own *capnv1.ClusterSpec) {
	rendered.Paused, rendered.Hibernated = own.GetPaused(), own.GetHibernated()
	if own.GetMaintenance() != nil {
		rendered.Maintenance = proto.CloneOf(own.GetMaintenance())
	}
	if own.GetHibernation() != nil {
		rendered.Hibernation = proto.CloneOf(own.GetHibernation())
	}
}
