package plan

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

// vm builds a machine view for the scale-down tests.
func vm(name string, age time.Duration, phase capnv1.MachinePhase, opts ...func(*machine)) *machine {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &machine{
		name: name,
		m: &capnv1.Machine{
			Metadata: &capnv1.ObjectMeta{Name: name, CreationTimestamp: timestamppb.New(t0.Add(-age))},
			Spec:     &capnv1.MachineSpec{},
		},
		status: &capnv1.MachineStatus{Phase: phase.Wire()},
	}
	for _, o := range opts {
		o(m)
	}
	return m
}

func marked(m *machine) { m.m.Metadata.Annotations = map[string]string{AnnotationDeleteMachine: ""} }
func sick(m *machine) {
	m.status.Conditions = []*capnv1.Condition{{Type: ConditionNodeHealthy, Status: "False"}}
}
func outdated(m *machine) { m.outdated = true }

func names(ms []*machine) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.name)
	}
	return out
}

func TestPickForDeletion(t *testing.T) {
	tests := []struct {
		name  string
		ms    []*machine
		order string
		n     int
		want  []string
	}{
		{
			name:  "marked, then unhealthy, then not running, then by order",
			order: manifest.DeletionOrderOldest,
			n:     5,
			ms: []*machine{
				vm("old", 9*time.Hour, capnv1.MachineRunning),
				vm("young", time.Hour, capnv1.MachineRunning),
				vm("booting", 0, capnv1.MachineProvisioning),
				vm("sick", 2*time.Hour, capnv1.MachineRunning, sick),
				vm("marked", 0, capnv1.MachineRunning, marked),
			},
			want: []string{"marked", "sick", "booting", "old", "young"},
		},
		{
			name:  "outdated first within a tier",
			order: manifest.DeletionOrderOldest,
			n:     3,
			ms: []*machine{
				vm("a-new", 9*time.Hour, capnv1.MachineRunning),
				vm("b-old", time.Hour, capnv1.MachineRunning, outdated),
				vm("c-marked-new", 0, capnv1.MachineRunning, marked),
				vm("d-marked-old", 0, capnv1.MachineRunning, marked, outdated),
			},
			want: []string{"d-marked-old", "c-marked-new", "b-old"},
		},
		{
			name:  "newest",
			order: manifest.DeletionOrderNewest,
			n:     2,
			ms:    []*machine{vm("a", 3*time.Hour, capnv1.MachineRunning), vm("b", time.Hour, capnv1.MachineRunning), vm("c", 2*time.Hour, capnv1.MachineRunning)},
			want:  []string{"b", "c"},
		},
		{
			name:  "oldest, ties by name",
			order: manifest.DeletionOrderOldest,
			n:     2,
			ms:    []*machine{vm("b", time.Hour, capnv1.MachineRunning), vm("a", time.Hour, capnv1.MachineRunning), vm("c", 0, capnv1.MachineRunning)},
			want:  []string{"a", "b"},
		},
		{
			name:  "failed counts as unhealthy",
			order: manifest.DeletionOrderRandom,
			n:     1,
			ms:    []*machine{vm("a", 0, capnv1.MachineRunning), vm("b", 0, capnv1.MachineFailed), vm("c", 0, capnv1.MachineRunning)},
			want:  []string{"b"},
		},
		{
			name:  "more than there are",
			order: manifest.DeletionOrderRandom,
			n:     5,
			ms:    []*machine{vm("a", 0, capnv1.MachineRunning)},
			want:  []string{"a"},
		},
		{name: "none", n: 0, ms: []*machine{vm("a", 0, capnv1.MachineRunning)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := names(pickForDeletion(tt.ms, tt.n, tt.order))
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPickRandomIsDeterministic(t *testing.T) {
	var ms []*machine
	for _, n := range []string{"demo-md-0-abcde-0", "demo-md-0-abcde-1", "demo-md-0-abcde-2", "demo-md-0-abcde-3", "demo-md-0-abcde-4"} {
		ms = append(ms, vm(n, 0, capnv1.MachineRunning))
	}
	first := names(pickForDeletion(ms, 2, manifest.DeletionOrderRandom))
	slices.Reverse(ms)
	if again := names(pickForDeletion(ms, 2, manifest.DeletionOrderRandom)); !slices.Equal(first, again) {
		t.Errorf("input order changed the pick: %v vs %v", first, again)
	}
	// Pinned, so every planner version picks the same machines.
	if want := []string{"demo-md-0-abcde-2", "demo-md-0-abcde-3"}; !slices.Equal(first, want) {
		t.Errorf("Random picked %q, want %q", first, want)
	}
}
