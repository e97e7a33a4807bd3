package remediator

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// A node record's change wakes the remediator only when its verdict
// changes: a heartbeat refreshed or a condition noted is not one.
func TestVerdictsWakeOnlyOnAVerdictChange(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	kd := []*capnv1.Condition{{Type: "KernelDeadlock", Status: "False", Reason: "DockerHung"}}
	rec := func(healthy bool, since time.Duration, reasons []*capnv1.Condition, beat time.Duration) *capnv1.NodeHealth {
		h := &capnv1.NodeHealth{Cluster: "c", Machine: "m", Healthy: healthy, UnhealthyReasons: reasons,
			LastHeartbeat: timestamppb.New(t0.Add(beat)), Updated: timestamppb.New(t0.Add(beat))}
		if !healthy {
			h.UnhealthySince = timestamppb.New(t0.Add(since))
		}
		return h
	}
	put := func(h *capnv1.NodeHealth) []byte {
		b, err := store.Encode(h)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	v := newVerdicts()
	steps := []struct {
		name  string
		value []byte // nil: the record is gone
		wake  bool
	}{
		{"first sight", put(rec(true, 0, nil, 0)), true},
		{"heartbeat refreshed", put(rec(true, 0, nil, 5*time.Minute)), false},
		{"unhealthy", put(rec(false, 6*time.Minute, kd, 6*time.Minute)), true},
		{"same episode, a problem noted", put(rec(false, 6*time.Minute, kd, 7*time.Minute)), false},
		{"another reason", put(rec(false, 6*time.Minute, append(kd, &capnv1.Condition{Type: "Ready"}), 7*time.Minute)), true},
		{"a new episode", put(rec(false, 8*time.Minute, kd, 8*time.Minute)), true},
		{"healthy again", put(rec(true, 0, nil, 9*time.Minute)), true},
		{"deleted", nil, true},
		{"deleted again (a compacted burst)", nil, false},
		{"back", put(rec(true, 0, nil, 10*time.Minute)), true},
	}
	for _, s := range steps {
		if got := v.changed("node.c.m", s.value, s.value != nil); got != s.wake {
			t.Errorf("%s: wake %v, want %v", s.name, got, s.wake)
		}
	}
}
