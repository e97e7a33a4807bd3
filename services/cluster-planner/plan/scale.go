package plan

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/capn-dev/capn/schemas/manifest"
)

// Scale-down order (Cluster API's MachineSet deletion priority, with
// KubeadmControlPlane's preference for outdated machines):
//
//  1. machines already deleting — not picked again: they already count
//     toward the scale-down, since only machines not deleting are counted;
//  2. machines annotated capn.dev/delete-machine;
//  3. unhealthy machines, and machines whose node never came up (not
//     Running): they serve nothing yet;
//  4. within each of those, outdated machines before up-to-date ones;
//  5. then the pool's deletion order: Random (a stable hash of the name, so
//     every planner picks the same), Oldest or Newest by creation time.
//
// Ties are broken by name, so the pick is deterministic.

// pickForDeletion returns the n machines of ms to delete first.
func pickForDeletion(ms []*machine, n int, order string) []*machine {
	if n <= 0 {
		return nil
	}
	sorted := slices.Clone(ms)
	slices.SortStableFunc(sorted, func(a, b *machine) int {
		if d := deletionTier(a) - deletionTier(b); d != 0 {
			return d
		}
		if a.outdated != b.outdated {
			if a.outdated {
				return -1
			}
			return 1
		}
		if d := compareOrder(a, b, order); d != 0 {
			return d
		}
		return strings.Compare(a.name, b.name)
	})
	return sorted[:min(n, len(sorted))]
}

func deletionTier(m *machine) int {
	switch {
	case m.deleting:
		return 0
	case m.marked():
		return 1
	case m.unhealthy() || !m.running():
		return 2
	}
	return 3
}

func compareOrder(a, b *machine, order string) int {
	ta := a.m.GetMetadata().GetCreationTimestamp().AsTime()
	tb := b.m.GetMetadata().GetCreationTimestamp().AsTime()
	switch order {
	case manifest.DeletionOrderOldest:
		return ta.Compare(tb)
	case manifest.DeletionOrderNewest:
		return tb.Compare(ta)
	default: // Random: deterministic by a hash of the name
		ha, hb := nameHash(a.name), nameHash(b.name)
		switch {
		case ha < hb:
			return -1
		case ha > hb:
			return 1
		}
		return 0
	}
}

func nameHash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// scaleDown deletes active machines beyond the pool's replicas, at once, as
// Cluster API does: a smaller pool is what the user asked for, so
// availability does not hold it back.
func (p *planner) scaleDown(pl *pool) {
	active := pl.active()
	excess := len(active) - pl.replicas
	for _, m := range pickForDeletion(active, excess, pl.order) {
		p.delete(m, fmt.Sprintf("scale down: %d machines, %d wanted", len(active), pl.replicas))
	}
}

// scaleUp creates up-to-date machines until want of them exist, never
// letting the pool's machine records (deleting ones included) exceed limit.
func (p *planner) scaleUp(pl *pool, want, limit int, reason string) {
	current := 0
	for _, m := range pl.active() {
		if !m.outdated {
			current++
		}
	}
	n := min(want-current, limit-len(pl.machines))
	if n > p.room() {
		n, p.truncated = p.room(), true // the rest in the next plans
	}
	for range max(0, n) {
		p.create(pl, false, reason)
	}
}
