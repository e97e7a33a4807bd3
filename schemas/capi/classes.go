package capi

import (
	"fmt"
	"slices"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// topology maps a ClusterClass-based cluster's spec.topology (v1beta1 and
// v1beta2). When the input holds the ClusterClass, its templates give the
// provider, the bootstrap settings and the health checks, as they would
// in Cluster API; its variables and patches are reported, by name (capn
// cannot evaluate patches). Without the class, machines take
// Options.Provider and nothing of the class is imported.
func (c *converter) topology(cl *object, topo node) error {
	ref := topo.field("classRef") // v1beta2: {name, namespace}
	nameNode := ref.field("name")
	if !ref.exists() {
		ref = topo.field("class") // v1beta1: the name
		nameNode = ref
	}
	c.className, _ = nameNode.v.(string)
	if cc := c.find("ClusterClass", c.className); cc != nil && cc.group() == GroupCore {
		c.class, c.claimed[cc] = cc, true
		ref.use()
	} else {
		if c.opts.Classes {
			return fmt.Errorf("%s: %s: ClusterClass %q is not in the input: importing classes needs the Cluster API ClusterClass the topology names (and its templates) in the same input", cl.ref(), ref.path, c.className)
		}
		if c.opts.Provider == "" {
			return fmt.Errorf("%w: %s uses ClusterClass %s, which is not in the input: add it, or pass --provider NAME", ErrNeedProvider, cl.ref(), c.className)
		}
		c.note(cl, ref, reasonClassMissing(c.className))
	}
	var class node // the ClusterClass's spec, missing without one
	if c.class != nil {
		class = c.class.at().field("spec")
		c.classInfrastructure(class.field("infrastructure"))
	}

	if v, ok := topo.field("version").str(); ok {
		c.out.Spec.KubernetesVersion = normalizeVersion(v)
	}
	cp := &capnv1.ControlPlaneSpec{Provider: c.opts.Provider, Replicas: 1}
	tcp := topo.field("controlPlane")
	if r, ok := tcp.field("replicas").integer(); ok {
		cp.Replicas = int32(r)
	}
	if c.class != nil {
		if err := c.classControlPlane(class.field("controlPlane"), cp); err != nil {
			return err
		}
	}
	c.out.Spec.ControlPlane = cp
	c.topologyHealth(cl, tcp, class.field("controlPlane"), "", &c.out.Spec.Health)
	c.noteVariables(cl, topo.field("variables"))
	c.noteVariables(cl, tcp.get("variables.overrides"))

	for _, md := range topo.get("workers.machineDeployments").items() {
		if err := c.topologyPool(cl, md, class); err != nil {
			return err
		}
	}
	if mp := topo.get("workers.machinePools"); !mp.empty() {
		c.note(cl, mp, reasonMachinePools)
	}
	if c.class != nil {
		c.classLeftovers(class)
	}
	return nil
}

// topologyPool maps one of the topology's machineDeployments to a pool,
// with the settings of its class.
func (c *converter) topologyPool(cl *object, md, class node) error {
	name, _ := md.field("name").str()
	p := &capnv1.WorkerPool{Name: name, Provider: c.opts.Provider, Replicas: 1}
	if r, ok := md.field("replicas").integer(); ok {
		p.Replicas = int32(r)
	}
	// Cluster API labels a topology's machines with the topology's name
	// for the pool, which MachineHealthChecks select.
	labels := map[string]string{"topology." + capiLabelDomain + "deployment-name": name}
	cls := md.field("class")
	clsName, _ := cls.v.(string)
	var entry node // the class's machine deployment class
	if c.class == nil {
		c.note(cl, cls, reasonClassMissing(c.className))
	} else {
		var names []string
		for _, e := range class.get("workers.machineDeployments").items() {
			n, _ := e.field("class").v.(string)
			names = append(names, n)
			if n == clsName {
				entry = e
			}
		}
		if !entry.exists() {
			return fmt.Errorf("%s: %s: %q is not a machine deployment class of ClusterClass %s (it has %s)",
				cl.ref(), cls.path, clsName, c.className, strings.Join(names, ", "))
		}
		cls.use()
		c.usedClasses[clsName] = true
		if err := c.classPool(entry, p, labels); err != nil {
			return err
		}
	}
	c.poolLabels(md.get("metadata.labels"), p, labels)
	c.failureDomain(cl, md.field("failureDomain"), p)
	c.rollout(cl, md, p)
	c.topologyHealth(cl, md, entry, name, &p.Health)
	c.noteVariables(cl, md.get("variables.overrides"))
	c.pools[name] = &pool{spec: p, labels: labels}
	c.poolOrder = append(c.poolOrder, name)
	return nil
}

// classInfrastructure reads the class's infrastructure cluster template:
// the provider of machines whose template is missing, and the failure
// domains it defines.
func (c *converter) classInfrastructure(infra node) {
	ref := classRef(infra)
	if !ref.exists() {
		return
	}
	kind, name, tmpl := c.resolve(ref)
	c.infraProvider = providerOfKind(kind, tmpl, "spec.template.spec.backend")
	if tmpl == nil {
		c.noteRef(c.class, ref, kind, name, reasonMissing(missingInfra))
		return
	}
	c.defineFailureDomains(tmpl)
}

// classControlPlane maps the class's control plane: the provider from its
// machine infrastructure template, the bootstrap and rollout from its
// KubeadmControlPlaneTemplate.
func (c *converter) classControlPlane(spec node, cp *capnv1.ControlPlaneSpec) error {
	t, err := c.machineTemplate(c.class, classRef(spec.field("machineInfrastructure")))
	if err != nil {
		return err
	}
	cp.Provider, cp.Template = t.provider, t.template
	ref := classRef(spec)
	kind, name, kcpt := c.resolve(ref)
	switch {
	case !ref.exists():
		return fmt.Errorf("%s: %s: required: capn needs the class's KubeadmControlPlaneTemplate", c.class.ref(), ref.path)
	case kind != "KubeadmControlPlaneTemplate":
		return fmt.Errorf("%s: %s: control plane kind %s is not supported: capn imports KubeadmControlPlaneTemplate", c.class.ref(), ref.path, kind)
	case kcpt == nil:
		c.noteRef(c.class, ref, kind, name, reasonMissing(missingCPBootstrap))
		return nil
	}
	c.controlPlaneSettings(kcpt, kcpt.at().get("spec.template.spec"), cp)
	return nil
}

// classPool maps a machine deployment class onto p: provider and
// parameters, bootstrap, labels, failure domain and rollout.
func (c *converter) classPool(entry node, p *capnv1.WorkerPool, labels map[string]string) error {
	entry.field("class").use()
	boot, infra, meta := workerSlots(entry)
	t, err := c.machineTemplate(c.class, infra)
	if err != nil {
		return err
	}
	p.Provider, p.Template = t.provider, t.template
	c.bootstrapTemplate(c.class, boot, p)
	c.poolLabels(meta.field("labels"), p, labels)
	c.failureDomain(c.class, entry.field("failureDomain"), p)
	c.rollout(c.class, entry, p)
	return nil
}

// topologyHealth gives a topology's control plane (target "") or pool the
// health check of its own (healthCheck in v1beta2, machineHealthCheck in
// v1beta1), which replaces the class's, or else the class's.
func (c *converter) topologyHealth(cl *object, own, class node, target string, dst **capnv1.HealthPolicy) {
	own, class = healthNode(own), healthNode(class)
	enabled := own.field("enabled")
	if !enabled.exists() {
		enabled = own.field("enable")
	}
	if on, ok := enabled.boolean(); ok && !on {
		if class.exists() {
			c.note(c.class, class, reasonHealthOverridden(cl, own.path, true))
		}
		return
	}
	src, from := cl, own
	hp := c.healthPolicy(cl, own)
	switch {
	case hp != nil && class.exists():
		c.note(c.class, class, reasonHealthOverridden(cl, own.path, false))
	case hp == nil && class.exists():
		src, from = c.class, class
		hp = c.healthPolicy(c.class, class)
	}
	if hp == nil {
		return
	}
	hp.MaxInFlight = c.maxInFlight(src, from)
	c.healthFrom[target] = src.ref()
	*dst = hp
}

// healthNode is an entry's health check: healthCheck (v1beta2) or
// machineHealthCheck (v1beta1).
func healthNode(n node) node {
	if h := n.field("healthCheck"); h.exists() {
		return h
	}
	return n.field("machineHealthCheck")
}

// classLeftovers reports what of the class no part of the cluster read:
// each variable and patch by name, the machine deployment classes no pool
// uses, and the machine pool classes.
func (c *converter) classLeftovers(class node) {
	c.noteVariables(c.class, class.field("variables"))
	for _, p := range class.field("patches").items() {
		name, _ := p.field("name").v.(string)
		var targets []string
		for _, d := range p.field("definitions").items() {
			if k, _ := d.get("selector.kind").v.(string); k != "" && !slices.Contains(targets, k) {
				targets = append(targets, k)
			}
		}
		if p.field("external").exists() {
			targets = append(targets, "whatever its external extension returns")
		}
		if len(targets) == 0 {
			targets = append(targets, "its definitions")
		}
		c.note(c.class, p, reasonPatch(name, strings.Join(targets, ", ")))
	}
	for _, e := range class.get("workers.machineDeployments").items() {
		if n, _ := e.field("class").v.(string); !c.usedClasses[n] {
			c.note(c.class, e, c.reasonUnusedClass())
		}
	}
	if mp := class.get("workers.machinePools"); !mp.empty() {
		c.note(c.class, mp, reasonMachinePools)
	}
}

// noteVariables reports each variable of a list ({name, value} in a
// topology, {name, schema} in a class) by its name.
func (c *converter) noteVariables(o *object, list node) {
	for _, v := range list.items() {
		name, _ := v.field("name").v.(string)
		c.note(o, v, reasonVariable(name))
	}
}

// classRef is the reference of a ClusterClass slot: templateRef in
// v1beta2, ref in v1beta1.
func classRef(n node) node {
	if r := n.field("ref"); r.exists() {
		return r
	}
	return n.field("templateRef")
}

// workerSlots are a worker class's bootstrap and infrastructure
// references and its machines' metadata: at the class in v1beta2, under
// template in v1beta1.
func workerSlots(w node) (boot, infra, meta node) {
	t := w
	if !w.field("bootstrap").exists() && w.field("template").exists() {
		t = w.field("template")
	}
	return classRef(t.field("bootstrap")), classRef(t.field("infrastructure")), t.field("metadata")
}

// classSlot is one template a ClusterClass references.
type classSlot struct {
	kind, name string
	what       string // what of the class uses it
	class      string // the worker class, for workers
	pool       bool   // a machine pool class
}

// slotsOf lists the templates a ClusterClass references, read without
// consuming anything.
func slotsOf(cc *object) []classSlot {
	spec := peek(cc.root).field("spec")
	slot := func(ref node, s classSlot) classSlot {
		s.kind, _ = ref.field("kind").v.(string)
		s.name, _ = ref.field("name").v.(string)
		return s
	}
	out := []classSlot{
		slot(classRef(spec.field("infrastructure")), classSlot{what: "the cluster's infrastructure"}),
		slot(classRef(spec.field("controlPlane")), classSlot{what: "the control plane"}),
		slot(classRef(spec.get("controlPlane.machineInfrastructure")), classSlot{what: "the control plane's machines"}),
	}
	for _, w := range []struct {
		list string
		what string
		pool bool
	}{{"workers.machineDeployments", "machine deployment class ", false}, {"workers.machinePools", "machine pool class ", true}} {
		for _, e := range spec.get(w.list).items() {
			name, _ := e.field("class").v.(string)
			boot, infra, _ := workerSlots(e)
			for _, ref := range []node{boot, infra} {
				out = append(out, slot(ref, classSlot{what: w.what + name, class: name, pool: w.pool}))
			}
		}
	}
	return out
}

// classUse says which ClusterClass of the input uses o, and why that use
// is not imported; "" when none does.
func (c *converter) classUse(o *object) string {
	for _, cc := range c.objs {
		if cc.kind != "ClusterClass" || cc.group() != GroupCore {
			continue
		}
		for _, s := range slotsOf(cc) {
			if s.kind == o.kind && s.name == o.name {
				return c.reasonSlot(cc, s)
			}
		}
	}
	return ""
}
