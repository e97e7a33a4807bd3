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

// Every kind of key is a record of some bucket: a key a backup finds with
// no record type makes Check refuse the whole backup (observed
// autoscaler.* had none, so a deployment running the autoscaler-provider
// could not be backed up).
func TestEveryKindHasARecord(t *testing.T) {
	for _, kind := range keys.Kinds() {
		k := keys.Key{Kind: kind, Provider: "p", Cluster: "c", Name: "n"}
		found := false
		for _, b := range []string{BucketDesired, BucketObserved, BucketSecrets} {
			if _, ok := Record(b, k); ok {
				found = true
			}
		}
		if !found {
			t.Errorf("keys of kind %s have no record in any bucket", kind)
		}
	}
}
