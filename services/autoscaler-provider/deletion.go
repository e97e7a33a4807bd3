package autoscalerprovider

import (
	"fmt"
	"slices"
	"strings"

	"github.com/capn-dev/capn/schemas/annotations"
)

// markAnnotation marks a machine the autoscaler named in a DeleteNodes;
// markValue says the autoscaler-provider set it (a user's mark has another
// value).
const (
	markAnnotation = annotations.DeleteMachine
	markValue      = "cluster-autoscaler"
)

// poolMachine is what planDeletion knows of one active (not deleting)
// machine of the pool: its name and its delete-machine mark, if any.
type poolMachine struct {
	name   string
	mark   string
	marked bool
}

// deletion is what a DeleteNodes does: mark these machines, take the mark
// off those, and lower the pool's replicas by lower.
type deletion struct {
	mark, unmark []string
	lower        int32
}

// planDeletion decides a DeleteNodes of the machines named targets (each
// an active machine of the pool) in a pool of replicas (bounded below by
// min) whose active machines are ms. Its invariant is the planner's rule
// for a scale-down — active machines beyond replicas are deleted, marked
// ones first (services/cluster-planner/plan) — turned around: after the
// deletion, the pool's marked machines are exactly as many as it has
// active machines beyond its replicas, so the planner deletes every marked
// machine, every target among them, and no other machine.
//
// Marks of ours already there are machines of earlier DeleteNodes: each
// was accounted for by lowering replicas, except after a crash between the
// mark and the lowering — then there are more marks than machines beyond
// replicas, and the extra ones are accounted for now (a target first, else
// its mark is taken off). A pool still scaling up (fewer active machines
// than replicas), or with machines marked by someone else (the planner
// would take theirs as soon as ours), is refused: the autoscaler tries
// again later.
func planDeletion(pool string, replicas, minSize int32, ms []poolMachine, targets []string) (deletion, error) {
	active := int32(len(ms))
	if excess := active - replicas; excess < 0 {
		return deletion{}, unavailable("pool %s is still scaling up (%d of %d machines made); try again once they are", pool, active, replicas)
	}
	var others []string
	for _, m := range ms {
		if m.marked && m.mark != markValue {
			others = append(others, m.name+" ("+m.mark+")")
		}
	}
	if len(others) > 0 {
		return deletion{}, failedPrecondition("pool %s has machines marked %s by someone else: %s; the planner deletes those first, so the autoscaler's choice would not be honoured: remove the annotation",
			pool, markAnnotation, strings.Join(others, ", "))
	}
	var ours, oursTargeted, fresh []string
	for _, m := range ms {
		mine := m.marked && m.mark == markValue
		named := slices.Contains(targets, m.name)
		switch {
		case mine && named:
			oursTargeted = append(oursTargeted, m.name)
			ours = append(ours, m.name)
		case mine:
			ours = append(ours, m.name)
		case named:
			fresh = append(fresh, m.name)
		}
	}
	unaccounted := int32(len(ours)) - (active - replicas)
	unaccounted = max(unaccounted, 0)
	reaccount := min(unaccounted, int32(len(oursTargeted)))
	d := deletion{mark: fresh, lower: int32(len(fresh)) + reaccount}
	for _, name := range ours {
		if int32(len(d.unmark)) == unaccounted-reaccount {
			break
		}
		if !slices.Contains(oursTargeted, name) {
			d.unmark = append(d.unmark, name)
		}
	}
	if replicas-d.lower < minSize {
		return deletion{}, failedPrecondition("deleting %d machines of pool %s would leave %d, below its autoscaling.min %d", d.lower, pool, replicas-d.lower, minSize)
	}
	return d, nil
}

// describe is the deletion in a few words, for logs.
func (d deletion) String() string {
	return fmt.Sprintf("mark %v, unmark %v, lower replicas by %d", d.mark, d.unmark, d.lower)
}
