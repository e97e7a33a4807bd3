// Package nodecapacity names the machine template parameters that say what
// a kube-local Node offers — cpu, memory, pods — and their defaults. Two
// parts read them and must agree: the process provider, whose capn-node
// registers the machine's Node with that capacity (kwok keeps it), and the
// autoscaler-provider, whose template Node (NodeGroupTemplateNodeInfo)
// tells the cluster autoscaler what a new machine of the pool would offer,
// so that it can scale a pool up from zero. The defaults are what kwok
// gives a Node that registers none (its node-initialize stage): a Node
// without parameters reports the same either way.
package nodecapacity

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Template parameters (MachineTemplate.parameters) and the Node resource
// each sets, in capacity and allocatable.
const (
	ParamCPU    = "cpu"
	ParamMemory = "memory"
	ParamPods   = "pods"
)

// Defaults: kwok's, for a Node that registers no capacity.
const (
	DefaultCPU    = "1k"
	DefaultMemory = "1Ti"
	DefaultPods   = "1M"
)

// Capacity is a Node's capacity: resource name (cpu, memory, pods) to
// quantity, canonical (resource.Quantity.String).
type Capacity map[string]string

// FromParameters is the capacity the template parameters give (defaults
// for those left out). An error names every parameter that is not a
// quantity (a positive one: "2", "500m", "8Gi", "110").
func FromParameters(params map[string]string) (Capacity, error) {
	c := Capacity{}
	var errs []error
	for _, p := range []struct{ name, def string }{{ParamCPU, DefaultCPU}, {ParamMemory, DefaultMemory}, {ParamPods, DefaultPods}} {
		v, ok := params[p.name]
		if !ok {
			v = p.def
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(v))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("template parameter %s: %q is not a quantity (e.g. %s)", p.name, v, example(p.name)))
			continue
		case q.Sign() <= 0:
			errs = append(errs, fmt.Errorf("template parameter %s: %q must be more than 0", p.name, v))
			continue
		case p.name == ParamPods && q.MilliValue()%1000 != 0:
			errs = append(errs, fmt.Errorf("template parameter %s: %q must be a whole number", p.name, v))
			continue
		}
		c[p.name] = q.String()
	}
	return c, errors.Join(errs...)
}

func example(name string) string {
	switch name {
	case ParamCPU:
		return `"2" or "500m"`
	case ParamMemory:
		return `"8Gi"`
	}
	return `"110"`
}

// String is the capacity as capn-node's --node-capacity takes it:
// cpu=2,memory=8Gi,pods=110 (sorted).
func (c Capacity) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		parts = append(parts, k+"="+c[k])
	}
	return strings.Join(parts, ",")
}

// Parse reads String's form back, each value checked as in FromParameters.
func Parse(s string) (Capacity, error) {
	params := map[string]string{}
	for kv := range strings.SplitSeq(s, ",") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("node capacity %q: want name=quantity pairs such as cpu=2,memory=8Gi,pods=110", s)
		case k != ParamCPU && k != ParamMemory && k != ParamPods:
			return nil, fmt.Errorf("node capacity %q: unknown resource %q (cpu, memory or pods)", s, k)
		}
		params[k] = v
	}
	return FromParameters(params)
}
