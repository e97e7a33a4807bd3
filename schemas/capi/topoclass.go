package capi

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/schemas/topology"
)

// Options.Classes: the topology cluster is imported as a capn ClusterClass
// and a Cluster with spec.topology, rather than as one flat Cluster.
//
// What maps: the class's template is the flat import's spec without its
// pools (so its version and control plane replicas are the topology's);
// each machine deployment class a machine deployment of the topology uses
// is a pool class, its template made from the class alone; a variable
// (string, integer or boolean, with default, enum, bounds) maps when every
// JSON patch of the class that reads it writes a field capn has. Cluster
// API patches write templates, and the only such field with a capn
// counterpart is a machine label: spec.template.metadata.labels/<key> of
// every machine deployment class (a variable's path names pools, not pool
// classes), which is /workerPools/*/labels/<key>. Version and replicas are
// the topology's own in Cluster API (no patch sets them); they go to the
// class template and the topology pools.

// labelPatchPrefix is where a JSON patch writes a machine label.
const labelPatchPrefix = "/spec/template/metadata/labels/"

// classVar is a class variable being mapped.
type classVar struct {
	v     *capnv1.ClassVariable
	node  node
	why   string // why it does not map; "" when it does
	paths []string
}

// makeClass builds the capn ClusterClass and the topology Cluster from the
// flat import (c.out), dropping the notes of what now maps.
func (c *converter) makeClass(cl *object) (*capnv1.ClusterClass, error) {
	spec := c.class.at().field("spec")
	tmpl := proto.CloneOf(c.out.Spec)
	tmpl.WorkerPools = nil
	class := &capnv1.ClusterClass{
		ApiVersion: manifest.APIVersion, Kind: topology.KindClusterClass,
		Metadata: &capnv1.ObjectMeta{Name: c.className},
		Spec:     &capnv1.ClusterClassSpec{Template: tmpl},
	}
	topo := &capnv1.ClusterTopology{Class: c.className}

	// Pool classes, in the order the topology first uses them.
	entries := map[string]node{}
	for _, e := range spec.get("workers.machineDeployments").items() {
		n, _ := e.field("class").v.(string)
		entries[n] = e
	}
	for i, md := range cl.at().get("spec.topology.workers.machineDeployments").items() {
		name, _ := md.field("name").v.(string)
		cls, _ := md.field("class").v.(string)
		if !slices.ContainsFunc(class.Spec.PoolClasses, func(p *capnv1.PoolClass) bool { return p.Name == cls }) {
			p := &capnv1.WorkerPool{Provider: c.opts.Provider, Replicas: 1}
			if err := c.classPool(entries[cls], p, map[string]string{}); err != nil {
				return nil, err
			}
			if h := healthNode(entries[cls]); h.exists() { // the class's, as topologyHealth reads it
				if hp := c.healthPolicy(c.class, h); hp != nil {
					hp.MaxInFlight = c.maxInFlight(c.class, h)
					p.Health = hp
				}
			}
			class.Spec.PoolClasses = append(class.Spec.PoolClasses, &capnv1.PoolClass{Name: cls, Template: p})
		}
		tp := &capnv1.TopologyPool{Name: name, Class: cls}
		if r, ok := peek(md.field("replicas").v).integer(); ok {
			tp.Replicas = proto.Int32(int32(r))
		}
		topo.Pools = append(topo.Pools, tp)
		// The flat pool has the machine deployment's own settings on top
		// of the class's; a topology pool takes only name, class, replicas.
		flat := proto.CloneOf(c.pools[name].spec)
		flat.Name, flat.Replicas = "", 1
		if !proto.Equal(flat, poolClassOf(class, cls).Template) {
			at := fmt.Sprintf("spec.topology.workers.machineDeployments[%d]", i)
			c.notes = slices.DeleteFunc(c.notes, func(n Note) bool { // this note covers them
				return n.Object == cl.ref() && strings.HasPrefix(n.Path, at+".")
			})
			c.notes = append(c.notes, Note{Object: cl.ref(), Path: at,
				Reason: reasonTopologyPoolOwn(cls)})
		}
	}

	// Variables, and the patches that read them.
	vars := c.classVariables(spec)
	patchVars := map[string][]string{} // the patches that map, with the variables they read
	for i, p := range spec.field("patches").items() {
		if vs, ok := c.mapPatch(p, vars); ok {
			patchVars[fmt.Sprintf("spec.patches[%d]", i)] = vs
		}
	}
	// A patch is mapped when every variable it reads is: another patch
	// may have made one of them not map.
	mappedPatch := map[string]bool{}
	for at, vs := range patchVars {
		mappedPatch[at] = !slices.ContainsFunc(vs, func(v string) bool { return vars[v].why != "" })
	}
	mappedVar := map[string]bool{}
	for _, cv := range vars {
		if cv.why != "" || len(cv.paths) == 0 {
			continue
		}
		cv.v.Paths = cv.paths
		class.Spec.Variables = append(class.Spec.Variables, cv.v)
		mappedVar[cv.node.path] = true
	}
	// The cluster's values of the mapped variables.
	for _, v := range cl.at().get("spec.topology.variables").items() {
		name, _ := v.field("name").v.(string)
		if i := slices.IndexFunc(class.Spec.Variables, func(cv *capnv1.ClassVariable) bool { return cv.Name == name }); i >= 0 {
			if s, ok := scalarString(v.field("value").v); ok {
				if topo.Variables == nil {
					topo.Variables = map[string]string{}
				}
				topo.Variables[name] = s
				mappedVar[cl.ref()+" "+v.path] = true
			}
		}
	}
	c.notes = slices.DeleteFunc(c.notes, func(n Note) bool {
		switch n.Object {
		case c.class.ref():
			return mappedVar[n.Path] || mappedPatch[n.Path]
		case cl.ref():
			return mappedVar[cl.ref()+" "+n.Path]
		}
		return false
	})
	// Variables that map no further, with why.
	for _, cv := range vars {
		if cv.why != "" && cv.why != whyNoPatch {
			for i, n := range c.notes {
				if n.Object == c.class.ref() && n.Path == cv.node.path {
					c.notes[i].Reason = reasonClassVariable(cv.v.Name, cv.why)
				}
			}
		}
	}
	c.out.Spec = &capnv1.ClusterSpec{Topology: topo}
	return class, nil
}

func poolClassOf(cc *capnv1.ClusterClass, name string) *capnv1.PoolClass {
	for _, p := range cc.Spec.PoolClasses {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// classVariables reads the class's variables (v1beta1 and v1beta2 have
// the same shape), each with why it cannot map when it cannot.
func (c *converter) classVariables(spec node) map[string]*classVar {
	out := map[string]*classVar{}
	for _, n := range spec.field("variables").items() {
		name, _ := n.field("name").v.(string)
		s := n.get("schema.openAPIV3Schema")
		cv := &classVar{node: n, v: &capnv1.ClassVariable{Name: name}, why: whyNoPatch}
		out[name] = cv
		cv.v.Required, _ = n.field("required").v.(bool)
		cv.v.Description, _ = s.field("description").v.(string)
		typ, _ := s.field("type").v.(string)
		switch typ {
		case "string", "integer", "boolean":
			cv.v.Type = typ
		default:
			cv.why = whyVariableType(typ)
			continue
		}
		if d := s.field("default"); d.exists() && !cv.v.Required {
			cv.v.Default, _ = scalarString(d.v)
		}
		for _, e := range s.field("enum").items() {
			if es, ok := scalarString(e.v); ok {
				cv.v.Enum = append(cv.v.Enum, es)
			}
		}
		if m, ok := peek(s.field("minimum").v).integer(); ok {
			cv.v.Minimum = proto.Int64(m)
		}
		if m, ok := peek(s.field("maximum").v).integer(); ok {
			cv.v.Maximum = proto.Int64(m)
		}
	}
	return out
}

// mapPatch turns patch p into variable paths when every JSON patch of it
// is an add or replace of a machine label of every machine deployment
// class, from a variable; it says whether it did. A patch that does not
// map makes the variables it reads not map either. It returns the
// variables the patch reads.
func (c *converter) mapPatch(p node, vars map[string]*classVar) ([]string, bool) {
	var all []string
	for _, e := range c.class.at().get("spec.workers.machineDeployments").items() {
		n, _ := e.field("class").v.(string)
		all = append(all, n)
	}
	type write struct{ v, path string }
	var writes []write
	ok := !p.field("external").exists() && !p.field("enabledIf").exists() && len(p.field("definitions").items()) > 0
	var read []string
	for _, d := range p.field("definitions").items() {
		names, _ := d.get("selector.matchResources.machineDeploymentClass.names").strings()
		slices.Sort(names)
		want := slices.Sorted(slices.Values(all))
		if !slices.Equal(names, want) || len(all) == 0 {
			ok = false
		}
		for _, jp := range d.field("jsonPatches").items() {
			op, _ := jp.field("op").v.(string)
			path, _ := jp.field("path").v.(string)
			v, _ := jp.get("valueFrom.variable").v.(string)
			if v != "" {
				read = append(read, v)
			}
			key, isLabel := strings.CutPrefix(path, labelPatchPrefix)
			key = strings.ReplaceAll(strings.ReplaceAll(key, "~1", "/"), "~0", "~")
			cv := vars[v]
			if (op != "add" && op != "replace") || !isLabel || key == "" || strings.Contains(key, "/") || cv == nil || cv.v.Type != "string" {
				ok = false
				continue
			}
			writes = append(writes, write{v, "/workerPools/*/labels/" + key})
		}
	}
	if !ok {
		for _, v := range read {
			if cv := vars[v]; cv != nil {
				cv.why, cv.paths = whyVariablePatch, nil
			}
		}
		return nil, false
	}
	for _, w := range writes {
		cv := vars[w.v]
		if cv.why == whyNoPatch {
			cv.why = ""
		}
		if cv.why == "" && !slices.Contains(cv.paths, w.path) {
			cv.paths = append(cv.paths, w.path)
		}
	}
	return read, true
}

// scalarString is a YAML scalar as a capn variable value.
func scalarString(v any) (string, bool) {
	switch v.(type) {
	case string, int, int64, uint64, float64, bool:
		return scalarJSON(v), true
	}
	return "", false
}

// validateClass checks the class and the cluster it renders, paths
// prefixed with the object ("ClusterClass/<name> ").
func validateClass(class *capnv1.ClusterClass, cl *capnv1.Cluster) error {
	var errs []error
	prefix := func(obj string, err error) {
		for _, e := range unjoin(err) {
			if fe, ok := e.(*manifest.FieldError); ok {
				errs = append(errs, &manifest.FieldError{Path: obj + " " + fe.Path, Value: fe.Value, Reason: fe.Reason})
				continue
			}
			errs = append(errs, fmt.Errorf("%s: %w", obj, e))
		}
	}
	if err := topology.ValidateClass(class); err != nil {
		prefix("ClusterClass/"+class.GetMetadata().GetName(), err)
	}
	spec, err := topology.Render(class, cl.GetSpec().GetTopology())
	if err != nil {
		prefix("Cluster/"+cl.GetMetadata().GetName(), err)
	} else {
		d := proto.CloneOf(cl)
		d.Spec = spec
		manifest.Default(d)
		if err := manifest.Validate(d); err != nil {
			prefix("Cluster/"+cl.GetMetadata().GetName(), err)
		}
	}
	return errors.Join(errs...)
}
