package backupfile

import (
	"testing"

	"github.com/capn-dev/capn/schemas/keys"
)

// A backup carries cluster classes, their revisions and rollouts (desired)
// and rollout statuses (observed).
func TestRecordFleet(t *testing.T) {
	for _, tt := range []struct{ bucket, key, want string }{
		{BucketDesired, keys.Class("standard"), "ClusterClass"},
		{BucketDesired, keys.ClassRev("standard", 3), "ClusterClass"},
		{BucketDesired, keys.Rollout("r1"), "Rollout"},
		{BucketObserved, keys.Rollout("r1"), "RolloutStatus"},
	} {
		k, err := keys.Parse(tt.key)
		if err != nil {
			t.Fatal(err)
		}
		newT, ok := Record(tt.bucket, k)
		if !ok || newT == nil || string(newT().ProtoReflect().Descriptor().Name()) != tt.want {
			t.Errorf("Record(%s, %s): %v", tt.bucket, tt.key, ok)
		}
	}
	k, _ := keys.Parse(keys.Class("standard"))
	if _, ok := Record(BucketObserved, k); ok {
		t.Error("observed holds class records")
	}
}
