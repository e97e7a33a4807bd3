package autoscalerprovider

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// apply is a deletion applied to the pool, as the I/O does it.
func apply(ms []poolMachine, replicas int32, d deletion) ([]poolMachine, int32) {
	out := slices.Clone(ms)
	for i, m := range out {
		if slices.Contains(d.mark, m.name) {
			out[i].mark, out[i].marked = markValue, true
		}
		if slices.Contains(d.unmark, m.name) {
			out[i].mark, out[i].marked = "", false
		}
	}
	return out, replicas - d.lower
}

// TestPropDeletionLeavesExactlyTheMarkedBeyondReplicas: whatever marks of
// earlier DeleteNodes are there (accounted for, or left by a crash before
// the lowering), after a DeleteNodes the pool has as many marked machines
// as machines beyond its replicas — so the planner, which deletes marked
// machines first, deletes exactly the marked ones — every named machine is
// among them, only our own unnamed marks are taken off, and the same call
// again changes nothing.
func TestPropDeletionLeavesExactlyTheMarkedBeyondReplicas(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 10).Draw(t, "machines")
		var ms []poolMachine
		for i := range n {
			m := poolMachine{name: fmt.Sprintf("m%d", i)}
			if rapid.IntRange(0, 3).Draw(t, fmt.Sprintf("marked%d", i)) == 0 {
				m.mark, m.marked = markValue, true
			}
			ms = append(ms, m)
		}
		var ours int32
		for _, m := range ms {
			if m.marked {
				ours++
			}
		}
		// Machines beyond replicas: at most our marks (each accounted for
		// by an earlier lowering; fewer after a crash).
		excess := int32(rapid.IntRange(0, int(ours)).Draw(t, "accounted"))
		replicas := int32(n) - excess
		minSize := int32(rapid.IntRange(0, int(replicas)).Draw(t, "min"))
		names := make([]string, n)
		for i, m := range ms {
			names[i] = m.name
		}
		targets := rapid.SliceOfNDistinct(rapid.SampledFrom(names), 0, n, rapid.ID[string]).Draw(t, "targets")

		d, err := planDeletion("md-0", replicas, minSize, ms, targets)
		if err != nil {
			// Refused only below min.
			if minSize == 0 {
				t.Fatalf("refused with min 0: %v", err)
			}
			return
		}
		after, r := apply(ms, replicas, d)
		marked := 0
		for _, m := range after {
			if m.marked {
				marked++
			}
		}
		if int32(marked) != int32(n)-r {
			t.Fatalf("%v: %d marked, %d machines beyond replicas %d", d, marked, int32(n)-r, r)
		}
		for _, name := range targets {
			if i := slices.IndexFunc(after, func(m poolMachine) bool { return m.name == name }); !after[i].marked {
				t.Fatalf("%v: named machine %s is not marked", d, name)
			}
		}
		for _, name := range d.unmark {
			if slices.Contains(targets, name) {
				t.Fatalf("%v: took the mark off named machine %s", d, name)
			}
		}
		if r < minSize {
			t.Fatalf("replicas %d below min %d", r, minSize)
		}
		again, err := planDeletion("md-0", r, minSize, after, targets)
		if err != nil || again.lower != 0 || len(again.mark) != 0 || len(again.unmark) != 0 {
			t.Fatalf("the same call again: %v, %v; want nothing", again, err)
		}
	})
}

func TestPlanDeletionRefusals(t *testing.T) {
	ms := []poolMachine{{name: "a"}, {name: "b", mark: "alice", marked: true}, {name: "c"}}
	if _, err := planDeletion("md-0", 3, 0, ms, []string{"a"}); err == nil {
		t.Error("a user's mark was ignored")
	}
	if _, err := planDeletion("md-0", 4, 0, []poolMachine{{name: "a"}}, []string{"a"}); err == nil {
		t.Error("a pool still scaling up was scaled down")
	}
	if _, err := planDeletion("md-0", 2, 2, []poolMachine{{name: "a"}, {name: "b"}}, []string{"a"}); err == nil {
		t.Error("a deletion below min was planned")
	}
}
