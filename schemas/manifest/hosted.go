package manifest

import (
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// HostedReplicas are the control-plane sizes a hosted control plane runs:
// one etcd member and API server, or three of each. Five and seven
// members are refused: the hosted processes share the management host,
// where more members add load and no failure domain.
var HostedReplicas = []int32{1, 3}

// validateHosted checks what type hosted asks of spec.controlPlane:
// replicas 1 or 3, and spec.controlPlane.hosted only with type hosted.
func validateHosted(cp *capnv1.ControlPlaneSpec, p path, errs *fieldErrors) {
	hosted := cp.Implementation() == capnv1.ControlPlaneHosted
	if cp.Hosted != nil && !hosted {
		errs.add(p.child("hosted"), nil, "only with type %s (type is %s): remove hosted or set type: %s", capnv1.ControlPlaneHosted, cp.Implementation(), capnv1.ControlPlaneHosted)
	}
	if !hosted {
		return
	}
	if r := cp.Replicas; r != 1 && r != 3 {
		errs.add(p.child("replicas"), r, "a hosted control plane runs 1 or 3 replicas (etcd members and API servers on the management host); 5 and 7 add load there and no failure domain")
	}
}
