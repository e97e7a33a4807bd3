package plan

import "fmt"

// planControlPlane changes the control plane by at most one machine per plan
// and only when the rest of it is settled (KubeadmControlPlane's preflight):
//
//   - before initialization: one machine, first_control_plane=true, alone;
//     nothing more until it runs (a failed one is deleted and, once gone,
//     made again);
//   - then, while no control-plane machine is deleting and every one is
//     available: create up to replicas; roll outdated machines one at a
//     time — maxSurge 1 adds a new machine first and deletes an old one once
//     it runs, maxSurge 0 (3 or more replicas) deletes an old one first and
//     then adds; scale down one at a time, outdated machines first, then
//     oldest;
//   - a failed machine is deleted (one deletion at a time) and replaced;
//   - confined (the maintenance window is closed): no new replacement of
//     an outdated machine starts — a surge machine already made is
//     followed by the deletion of an outdated one, a deleted one is
//     refilled —, scaling goes on.
func (p *planner) planControlPlane() {
	cp := p.cp
	if cp.blocked != "" {
		return // its provider does not run: change nothing
	}
	active := cp.active()
	if !cp.anyDeleting() {
		for _, m := range active {
			if m.failed() {
				p.replaceFailed(m, "replace failed control-plane machine: "+m.why())
				return
			}
		}
	}
	if !p.initialized {
		if len(cp.machines) == 0 {
			p.create(cp, true, "initialize the control plane")
		}
		return
	}
	if cp.anyDeleting() {
		return // one change at a time: wait for the deletion to finish
	}
	for _, m := range active {
		if !m.available() {
			return // wait until every control-plane machine is available
		}
	}
	n, outdated := len(active), countOutdated(active)
	switch {
	case n < cp.replicas:
		p.create(cp, false, fmt.Sprintf("scale up the control plane: %d of %d machines", n, cp.replicas))
	case outdated > 0 && cp.confined && n == cp.replicas:
		// No new replacement while the window is closed (one in
		// progress, a surge machine or a missing one, completes above
		// and below).
	case outdated > 0 && cp.maxSurge > 0 && n < cp.replicas+cp.maxSurge:
		p.create(cp, false, fmt.Sprintf("roll out the control plane: add a new machine before removing one of %d outdated", outdated))
	case outdated > 0 || n > cp.replicas:
		reason := fmt.Sprintf("scale down the control plane: %d machines, %d wanted", n, cp.replicas)
		if outdated > 0 {
			reason = fmt.Sprintf("roll out the control plane: %d outdated machines", outdated)
		}
		for _, m := range pickForDeletion(active, 1, cp.order) {
			p.delete(m, reason)
		}
	}
}
