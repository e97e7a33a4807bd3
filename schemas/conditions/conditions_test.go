package conditions_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
)

func TestSet(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Minute)
	tests := []struct {
		name     string
		list     []*capnv1.Condition
		set      *capnv1.Condition
		wantLen  int
		wantTime time.Time
	}{
		{"absent: appended, stamped now", nil, conditions.New("Ready", capnv1.ConditionFalse, "Booting", ""), 1, t1},
		{"same status: keeps its transition", []*capnv1.Condition{{Type: "Other"}, {Type: "Ready", Status: "False", Reason: "A", LastTransitionTime: timestamppb.New(t0)}},
			conditions.New("Ready", capnv1.ConditionFalse, "B", "msg"), 2, t0},
		{"status changed: stamped now", []*capnv1.Condition{{Type: "Ready", Status: "False", LastTransitionTime: timestamppb.New(t0)}},
			conditions.New("Ready", capnv1.ConditionTrue, "Running", ""), 1, t1},
		{"same status without a time: stamped now", []*capnv1.Condition{{Type: "Ready", Status: "True"}},
			conditions.New("Ready", capnv1.ConditionTrue, "Running", ""), 1, t1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list := tt.list
			conditions.Set(&list, tt.set, t1)
			got := conditions.Get(list, "Ready")
			if len(list) != tt.wantLen || got != tt.set {
				t.Fatalf("list %v: want %d conditions with the one set", list, tt.wantLen)
			}
			if !got.GetLastTransitionTime().AsTime().Equal(tt.wantTime) {
				t.Errorf("transition %v, want %v", got.GetLastTransitionTime().AsTime(), tt.wantTime)
			}
		})
	}
}

func TestGetIsTrueDelete(t *testing.T) {
	list := []*capnv1.Condition{{Type: "Ready", Status: "True"}, {Type: "Paused", Status: "False"}}
	if !conditions.IsTrue(list, "Ready") || conditions.IsTrue(list, "Paused") || conditions.IsTrue(list, "Absent") {
		t.Error("IsTrue: want only Ready")
	}
	if !conditions.Has(list, "Paused", capnv1.ConditionFalse) || conditions.Has(list, "Absent", capnv1.ConditionFalse) {
		t.Error("Has: want Paused False only")
	}
	if conditions.Get(list, "Absent") != nil {
		t.Error("Get of an absent type: want nil")
	}
	if !conditions.Delete(&list, "Ready") || conditions.Delete(&list, "Ready") || len(list) != 1 {
		t.Errorf("Delete: %v", list)
	}
}
