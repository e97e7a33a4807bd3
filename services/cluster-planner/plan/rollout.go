package plan

import (
	"fmt"

	"github.com/capn-dev/capn/schemas/manifest"
)

// planPool plans one worker pool: replace failed machines, then scale or
// roll it by its strategy. While the pool is held (control plane not yet
// initialized or still rolling) it only deletes: failed machines and
// machines beyond its replicas.
func (p *planner) planPool(pl *pool) {
	for _, m := range pl.active() {
		if m.failed() {
			p.replaceFailed(m, "replace failed machine: "+m.why())
		}
	}
	if pl.hold != "" {
		p.scaleDown(pl)
		return
	}
	if pl.strategy == manifest.StrategyOnDelete {
		p.onDelete(pl)
		return
	}
	p.rollingUpdate(pl)
}

// onDelete never replaces a machine on its own: outdated machines stay until
// someone deletes them. The pool is brought to its replicas with machines of
// the current template; on scale-down outdated machines go first.
func (p *planner) onDelete(pl *pool) {
	p.scaleDown(pl)
	p.scaleUp(pl, pl.replicas-countOutdated(pl.active()), len(pl.machines)+pl.replicas-len(pl.active()), "scale up")
}

// rollingUpdate is Cluster API's MachineDeployment rolling update, counted
// in machines:
//
//   - never more than replicas+maxSurge machine records (deleting ones
//     included) after a create;
//   - never fewer than replicas-maxUnavailable available machines after a
//     delete of an available machine;
//   - new machines first, within the surge; then old machines that are not
//     available (bounded as Cluster API bounds its cleanup); then old
//     available machines while availability allows.
func (p *planner) rollingUpdate(pl *pool) {
	active := pl.active()
	old := countOutdated(active)
	if old == 0 {
		if len(active) > pl.replicas {
			p.scaleDown(pl)
			return
		}
		p.scaleUp(pl, pl.replicas, pl.replicas+pl.maxSurge, "scale up")
		return
	}

	// A rollout. Too many new machines (replicas went down): drop the excess.
	var newMs, oldMs []*machine
	for _, m := range active {
		if m.outdated {
			oldMs = append(oldMs, m)
		} else {
			newMs = append(newMs, m)
		}
	}
	if excess := len(newMs) - pl.replicas; excess > 0 {
		for _, m := range pickForDeletion(newMs, excess, pl.order) {
			p.delete(m, fmt.Sprintf("scale down: %d up-to-date machines, %d wanted", len(newMs), pl.replicas))
		}
	}
	if pl.confined {
		// The window is closed: no surge; only machines missing from
		// replicas are made (a scale-up, or refilling an old machine
		// deleted before the window closed).
		p.scaleUp(pl, pl.replicas-len(oldMs), pl.replicas+pl.maxSurge, "scale up")
	} else {
		p.scaleUp(pl, pl.replicas, pl.replicas+pl.maxSurge, "rollout: surge a machine of the new template")
	}

	minAvailable := max(0, pl.replicas-pl.maxUnav)
	active = pl.active()
	newUnavailable, available := 0, 0
	for _, m := range active {
		if m.available() {
			available++
		} else if !m.outdated {
			newUnavailable++
		}
	}
	// Old machines that are not available first, but only as many as Cluster
	// API's cleanup allows: a pool whose machines are all briefly down must
	// not lose them all to a rollout.
	budget := len(active) - minAvailable - newUnavailable
	// spare (below) and excess bound the old available machines deleted.
	excess := len(active)
	if pl.confined {
		// The window is closed: old machines go only as far as the pool
		// is above replicas (a surge machine made before it closed, a
		// scale-down); the others wait for the window.
		excess = len(active) - pl.replicas
		budget = min(budget, excess)
	}
	for _, m := range pickForDeletion(oldMs, len(oldMs), pl.order) {
		if budget <= 0 {
			break
		}
		if !m.deleting && !m.available() {
			p.delete(m, "rollout: replace outdated machine ("+m.why()+")")
			budget--
			excess--
		}
	}
	// Then old available machines while enough stay available.
	spare := min(available-minAvailable, excess)
	for _, m := range pickForDeletion(oldMs, len(oldMs), pl.order) {
		if spare <= 0 {
			break
		}
		if !m.deleting && m.available() {
			p.delete(m, fmt.Sprintf("rollout: replace outdated machine (%d available, at least %d kept)", available, minAvailable))
			spare--
		}
	}
}

func countOutdated(ms []*machine) int {
	n := 0
	for _, m := range ms {
		if m.outdated {
			n++
		}
	}
	return n
}
