package manifest

import (
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// A pool with spec.workerPools[i].autoscaling hands its size to the
// cluster autoscaler (docs/autoscaling.md): capn's autoscaler-provider
// writes its replicas, between min and max, and users do not.
//
//   - Validate: 0 <= min <= max <= the pool bound; replicas, when given
//     (not 0), within min..max.
//   - KeepAutoscaledReplicas, at apply: replicas left out (0), or the value
//     already stored, become the stored value (min for a new pool), moved
//     into min..max when the bounds changed.
//   - ValidateUpdate: a pool autoscaled before and after keeps the stored
//     replicas (moved into the new bounds): an apply or capn scale that
//     changes them is refused, as Cluster API's users know from a
//     MachineDeployment whose replicas the autoscaler owns.

// validateAutoscaling checks a pool's autoscaling bounds and its replicas
// against them.
func (v Validator) validateAutoscaling(pool *capnv1.WorkerPool, p path, errs *fieldErrors) {
	a := pool.GetAutoscaling()
	if a == nil {
		return
	}
	ap := p.child("autoscaling")
	ok := true
	if a.Min < 0 {
		errs.add(ap.child("min"), a.Min, "must be 0 or more")
		ok = false
	}
	switch {
	case a.Max < 0:
		errs.add(ap.child("max"), a.Max, "must be 0 or more")
		ok = false
	case int64(a.Max) > v.maxPool():
		errs.add(ap.child("max"), a.Max, "must be at most %d per pool (the gateway's and cluster-planner's --max-pool-replicas)", v.maxPool())
		ok = false
	case a.Max < a.Min:
		errs.add(ap.child("max"), a.Max, "must be at least autoscaling.min (%d)", a.Min)
		ok = false
	}
	if ok && pool.Replicas != 0 && (pool.Replicas < a.Min || pool.Replicas > a.Max) {
		errs.add(p.child("replicas"), pool.Replicas, "must be within autoscaling.min..max (%d..%d), or left out: the cluster autoscaler sizes the pool", a.Min, a.Max)
	}
}

// clampReplicas is n moved into a's bounds.
func clampReplicas(n int32, a *capnv1.Autoscaling) int32 {
	return min(max(n, a.GetMin()), a.GetMax())
}

// autoscalingOK is a's bounds when they are valid.
func autoscalingOK(a *capnv1.Autoscaling) bool {
	return a != nil && a.Min >= 0 && a.Max >= a.Min
}

// KeepAutoscaledReplicas sets the replicas of c's autoscaled pools that
// the user did not set — left out (0), or the value old stores for an
// autoscaled pool — to what old stores (min for a pool old does not have),
// moved into the pool's bounds; c is the cluster an apply would store over
// old (nil on create). It reports whether it changed c (which must then be
// validated again). Replicas 0 is "left out": an autoscaled pool at 0 is
// kept at its size by an apply that says replicas: 0; min 0 lets the
// autoscaler take it there.
func KeepAutoscaledReplicas(old, c *capnv1.Cluster) bool {
	stored := map[string]*capnv1.WorkerPool{}
	for _, p := range old.GetSpec().GetWorkerPools() {
		if p != nil {
			stored[p.Name] = p
		}
	}
	changed := false
	for _, p := range c.GetSpec().GetWorkerPools() {
		a := p.GetAutoscaling()
		if p == nil || !autoscalingOK(a) {
			continue
		}
		op := stored[p.Name]
		var base int32
		switch {
		case p.Replicas == 0 && op != nil:
			base = op.Replicas
		case p.Replicas == 0:
			base = a.Min
		case op != nil && op.Autoscaling != nil && p.Replicas == op.Replicas:
			base = op.Replicas
		default:
			continue // set by the user: Validate and ValidateUpdate judge it
		}
		if n := clampReplicas(base, a); n != p.Replicas {
			p.Replicas, changed = n, true
		}
	}
	return changed
}

// autoscalingUpdate refuses a change of the replicas of a pool autoscaled
// in o and n (both defaulted): they are the autoscaler's, moved into the
// new bounds only.
func autoscalingUpdate(op, np *capnv1.WorkerPool, p path, errs *fieldErrors) {
	if op.GetAutoscaling() == nil || !autoscalingOK(np.GetAutoscaling()) {
		return
	}
	want := clampReplicas(op.Replicas, np.Autoscaling)
	if np.Replicas != want {
		errs.add(p.child("replicas"), np.Replicas,
			"pool %s is autoscaled (autoscaling.min..max %d..%d): its replicas (%d) belong to the cluster autoscaler; leave replicas out, change min or max, or remove autoscaling to size the pool yourself",
			np.Name, np.Autoscaling.Min, np.Autoscaling.Max, want)
	}
}
