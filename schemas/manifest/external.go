package manifest

import (
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// validateExternal checks spec.controlPlane.external against the control
// plane's type: type external needs external.kubeconfig, the name of a
// registered kubeconfig, and replicas 1 (defaulted when left out: the
// external cluster's owner runs its API servers, and its record always
// counts the one endpoint capn checks, so any other number would show a
// control plane short of replicas for good); any other type refuses an
// external block (it would be silently ignored).
func validateExternal(cp *capnv1.ControlPlaneSpec, p path, errs *fieldErrors) {
	ext := cp.GetExternal()
	if cp.Implementation() != capnv1.ControlPlaneExternal {
		if ext != nil {
			errs.add(p.child("external"), nil, "only with type %s (type is %s): remove it, or set type: %s", capnv1.ControlPlaneExternal, cp.Implementation(), capnv1.ControlPlaneExternal)
		}
		return
	}
	if r := cp.Replicas; r != 1 {
		errs.add(p.child("replicas"), r, "must be 1 or left out with type %s: the external cluster's owner runs its API servers; capn checks the one endpoint of the registered kubeconfig", capnv1.ControlPlaneExternal)
	}
	kp := p.child("external").child("kubeconfig")
	switch name := ext.GetKubeconfig(); {
	case name == "":
		errs.add(kp, nil, "required with type %s: the name of the external cluster's kubeconfig, registered with `capn external-kubeconfig set NAME --kubeconfig FILE`", capnv1.ControlPlaneExternal)
	case !IsDNSLabel(name):
		errs.add(kp, name, dnsLabelRule)
	}
}
