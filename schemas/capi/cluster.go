package capi

import (
	"fmt"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
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
		nw := &capnv1.NetworkSpec{}
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
		if infra != nil {
			c.defineFailureDomains(infra)
		} else {
			c.noteRef(cl, ref, kind, name, reasonMissing(missingInfra))
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

// normalizeVersion adds the "v" Cluster API makes optional.
func normalizeVersion(v string) string {
	if v != "" && !strings.HasPrefix(v, "v") {
		return "v" + v
	}
	return v
}
