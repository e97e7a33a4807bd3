package manifest

import (
	"errors"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// ValidateUpdate checks c as Validate does and adds the rules of changing old
// into c, at apply time (both are compared after Default, so a field left out
// equals its default):
//
//   - the control plane's version: no downgrade, no change of major, no jump
//     of two or more minor versions (v1.32 → v1.34 must go through v1.33);
//   - a pool's version: no downgrade (a pool may skip minor versions: its
//     machines are replaced, not upgraded in place); never newer than the
//     control plane (Validate);
//   - a pool autoscaled before and after: its replicas are the
//     autoscaler's (autoscaling.go);
//   - immutable: metadata.name, the control plane's type (its
//     implementation: "machines" and empty are the same) and provider, a pool's
//     provider (pools are matched by name; remove the pool and add a new one
//     instead), the network's CIDRs and service domain.
//
// A nil old is a create: only Validate applies.
func (v Validator) ValidateUpdate(old, c *capnv1.Cluster) error {
	if old == nil || c == nil {
		return v.Validate(c)
	}
	var errs fieldErrors
	if err := v.Validate(c); err != nil {
		errs = append(errs, flatten(err)...)
	}
	o := proto.Clone(old).(*capnv1.Cluster)
	n := proto.Clone(c).(*capnv1.Cluster)
	Default(o)
	Default(n)
	updateRules(o, n, &errs)
	return errors.Join(errs...)
}

// updateRules adds the errors of changing o into n, both defaulted.
func updateRules(o, n *capnv1.Cluster, errs *fieldErrors) {
	if on, nn := o.GetMetadata().GetName(), n.GetMetadata().GetName(); on != "" && on != nn {
		errs.add("metadata.name", nn, "immutable (was %q): a cluster cannot be renamed", on)
	}
	os, ns := o.Spec, n.Spec
	if os == nil || ns == nil {
		return
	}
	sp := path("spec")
	validateUpgrade(os.KubernetesVersion, ns.KubernetesVersion, sp.child("kubernetesVersion"), true, errs)
	typeChanged := false
	if ocp, ncp := os.ControlPlane, ns.ControlPlane; ocp != nil && ncp != nil && ocp.Implementation() != ncp.Implementation() {
		typeChanged = true
		errs.add(sp.child("controlPlane").child("type"), nil, "is %s, cannot change to %s on a live cluster; create a new cluster", ocp.Implementation(), ncp.Implementation())
	}
	if ocp, ncp := os.ControlPlane, ns.ControlPlane; ocp != nil && ncp != nil && ocp.Provider != ncp.Provider && !typeChanged {
		errs.add(sp.child("controlPlane").child("provider"), ncp.Provider, "immutable (was %q): machines cannot move between providers; create a new cluster instead", ocp.Provider)
	}
	oldPools := map[string]*capnv1.WorkerPool{}
	for _, p := range os.WorkerPools {
		if p != nil {
			oldPools[p.Name] = p
		}
	}
	for i, np := range ns.WorkerPools {
		op := oldPools[np.GetName()]
		if op == nil {
			continue
		}
		pp := sp.child("workerPools").index(i)
		if op.Provider != np.Provider {
			errs.add(pp.child("provider"), np.Provider, "immutable (was %q): to move pool %s to another provider, add a new pool and remove this one", op.Provider, np.Name)
		}
		validateUpgrade(op.Version, np.Version, pp.child("version"), false, errs)
		autoscalingUpdate(op, np, pp, errs)
	}
	if on, nn := os.Network, ns.Network; on != nil && nn != nil {
		np := sp.child("network")
		if !slices.Equal(on.PodCidrs, nn.PodCidrs) {
			errs.add(np.child("podCidrs"), strings.Join(nn.PodCidrs, ","), "immutable (was %q): a running cluster's pod network cannot change", strings.Join(on.PodCidrs, ","))
		}
		if !slices.Equal(on.ServiceCidrs, nn.ServiceCidrs) {
			errs.add(np.child("serviceCidrs"), strings.Join(nn.ServiceCidrs, ","), "immutable (was %q): a running cluster's service network cannot change", strings.Join(on.ServiceCidrs, ","))
		}
		if on.ServiceDomain != nn.ServiceDomain {
			errs.add(np.child("serviceDomain"), nn.ServiceDomain, "immutable (was %q)", on.ServiceDomain)
		}
	}
}

// validateUpgrade checks a version change; unparsable versions are left to
// Validate. The control plane (oneMinor) may move one minor version at a time.
func validateUpgrade(from, to string, p path, oneMinor bool, errs *fieldErrors) {
	ov, err1 := ParseVersion(from)
	nv, err2 := ParseVersion(to)
	if err1 != nil || err2 != nil {
		return
	}
	switch {
	case nv.Major != ov.Major:
		errs.add(p, to, "changes the major version (was %s): not supported", ov)
	case nv.Compare(ov) < 0:
		errs.add(p, to, "downgrade from %s: not supported; Kubernetes can only be upgraded", ov)
	case oneMinor && nv.MinorsAfter(ov) >= 2:
		errs.add(p, to, "skips a minor version (was %s): upgrade to v%d.%d.x first; the control plane upgrades one minor version at a time", ov, ov.Major, ov.Minor+1)
	}
}
