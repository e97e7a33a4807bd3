package bootstrapper

import (
	"context"
	"testing"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// store creates a missing record without reading it again; when that
// create loses (another replica stored data first), the stored data for
// the same input is answered and kept, and data for another input
// replaces it with the machine's login secret kept — both with a
// compare-and-set.
func TestStoreData(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx := context.Background()
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.BucketSecrets)
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{boots: store.NewBucket(kv, store.New[capnv1.BootstrapData]())}
	const key = "bootstrap.c1.m1"

	first := &capnv1.BootstrapData{InputHash: "h1", Data: []byte("one"), MachineSecret: "s1"}
	if got, err := s.store(ctx, key, "h1", first, true); err != nil || string(got.GetData()) != "one" {
		t.Fatalf("create: %v, %v", got, err)
	}
	// Another replica's data for the same input was stored first: it is
	// the answer, unchanged.
	same := &capnv1.BootstrapData{InputHash: "h1", Data: []byte("two"), MachineSecret: "s2"}
	if got, err := s.store(ctx, key, "h1", same, true); err != nil || string(got.GetData()) != "one" {
		t.Fatalf("lost create, same input: %v, %v; want the stored data", got, err)
	}
	// New input: new data, the running machine's secret kept.
	next := &capnv1.BootstrapData{InputHash: "h2", Data: []byte("three"), MachineSecret: "s3"}
	if got, err := s.store(ctx, key, "h2", next, true); err != nil || string(got.GetData()) != "three" || got.GetMachineSecret() != "s1" {
		t.Fatalf("lost create, new input: %v, %v; want the new data with secret s1", got, err)
	}
	stored, _, err := s.boots.Get(ctx, key)
	if err != nil || string(stored.GetData()) != "three" || stored.GetMachineSecret() != "s1" {
		t.Fatalf("stored %v, %v", stored, err)
	}
}
