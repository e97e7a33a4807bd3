package capi

import (
	"fmt"
	"strings"

	capnv1alpha1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// clusterSpec maps the Cluster's metadata and spec, and its control plane
// (KubeadmControlPlane, or the topology of a ClusterClass-based cluster).
func (c *converter) clusterSpec(cl *object) error {
	n := cl.at()
	md := c.out.Metadata
	md.Labels = n.get("metadata.labels").stringMap()
	ann := n.get("metadata.annotations")
	for _, e := range ann.entries(true) {
		if e.key == "kubectl.kubernetes.io/last-applied-configuration" {
			continue
		}
		if s, ok := e.val.str(); ok {
			if md.Annotations == nil {
				md.Annotations = map[string]string{}
			}
			md.Annotations[e.key] = s
		}
	}

	spec := n.field("spec")
	s := c.out.Spec
	if net := spec.field("clusterNetwork"); net.exists() {
		nw := &capnv1alpha1.NetworkSpec{}
		nw.PodCidrs, _ = net.get("pods.cidrBlocks").strings()
		nw.ServiceCidrs, _ = net.get("services.cidrBlocks").strings()
		nw.ServiceDomain, _ = net.field("serviceDomain").str()
		if len(nw.PodCidrs)+len(nw.ServiceCidrs) > 0 || nw.ServiceDomain != "" {
			s.Network = nw
		}
	}
	if p, ok := spec.field("paused").boolean(); ok {
		s.Paused = p
	}
	if ep := spec.field("controlPlaneEndpoint"); !ep.empty() {
		if host, _ := ep.field("host").v.(string); host == "" {
			ep.use() // {host: "", port: 0}: what the API server fills in
		}
	}

	if ref := spec.field("infrastructureRef"); ref.exists() {
		kind, name, infra := c.resolve(ref)
		c.infraProvider = providerOfKind(kind, infra, "spec.backend")
		if infra == nil {
			c.notes = append(c.notes, Note{Object: cl.ref(), Path: ref.path, Value: kind + "/" + name,
				Reason: "not in the input: its settings are not imported"})
		}
	}

	topo := spec.field("topology")
	ref := spec.field("controlPlaneRef")
	switch {
	case ref.exists():
		kind, name, kcp := c.resolve(ref)
		switch {
		case kind != "KubeadmControlPlane":
			return fmt.Errorf("%s: %s: control plane kind %s is not supported: capn imports KubeadmControlPlane", cl.ref(), ref.path, kind)
		case kcp == nil:
			return fmt.Errorf("%s: %s: KubeadmControlPlane/%s is not in the input: add it (capn needs its version and replicas)", cl.ref(), ref.path, name)
		}
		return c.controlPlane(kcp)
	case topo.exists():
		return c.topology(cl, topo)
	}
	var kcps []*object
	for _, o := range c.objs {
		if o.kind == "KubeadmControlPlane" {
			kcps = append(kcps, o)
		}
	}
	if len(kcps) == 1 {
		c.claimed[kcps[0]] = true
		return c.controlPlane(kcps[0])
	}
	return fmt.Errorf("%s: spec.controlPlaneRef: required: capn needs the cluster's KubeadmControlPlane", cl.ref())
}

// topology maps a ClusterClass-based cluster's spec.topology. The class's
// templates are not read: machines take Options.Provider.
func (c *converter) topology(cl *object, topo node) error {
	class := topo.field("classRef")
	if !class.exists() {
		class = topo.field("class")
	}
	className := scalarJSON(class.field("name").v)
	if className == "" {
		className = scalarJSON(class.v)
	}
	c.note(cl, class, "the ClusterClass "+className+" is not read: its templates, patches and variables are not imported")
	provider := c.opts.Provider
	if provider == "" {
		return fmt.Errorf("%w: %s uses ClusterClass %s, whose infrastructure capn import does not read: pass --provider NAME", ErrNeedProvider, cl.ref(), className)
	}
	if v, ok := topo.field("version").str(); ok {
		c.out.Spec.KubernetesVersion = normalizeVersion(v)
	}
	cp := &capnv1alpha1.ControlPlaneSpec{Provider: provider, Replicas: 1}
	if r, ok := topo.get("controlPlane.replicas").integer(); ok {
		cp.Replicas = int32(r)
	}
	c.out.Spec.ControlPlane = cp
	for _, md := range topo.get("workers.machineDeployments").items() {
		name, _ := md.field("name").str()
		p := &capnv1alpha1.WorkerPool{Name: name, Provider: provider, Replicas: 1}
		if r, ok := md.field("replicas").integer(); ok {
			p.Replicas = int32(r)
		}
		if fd, ok := md.field("failureDomain").str(); ok && fd != "" {
			p.Template = &capnv1alpha1.MachineTemplate{FailureDomain: fd}
		}
		if cls := md.field("class"); cls.exists() {
			c.note(cl, cls, "the pool takes no settings from its ClusterClass class")
		}
		c.pools[name] = &pool{spec: p}
		c.poolOrder = append(c.poolOrder, name)
	}
	return nil
}

// normalizeVersion adds the "v" Cluster API makes optional.
func normalizeVersion(v string) string {
	if v != "" && !strings.HasPrefix(v, "v") {
		return "v" + v
	}
	return v
}
