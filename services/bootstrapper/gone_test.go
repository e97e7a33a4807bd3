package bootstrapper_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// The sealed data of a machine that is not desired goes, however it came
// to be so: the machine deleted after its data was made, or data made by
// command for a machine already gone — also once the cluster's stored
// data was last found clean, which the join-token pass remembers to skip
// listing it.
func TestDataOfGoneMachinesPurged(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	e.start(ring)
	e.applyCluster("c1", nil)
	e.reportEndpoint("c1")
	got := e.collect("c1")
	secrets := e.kv(events.BucketSecrets)
	purged := func(m string) bool {
		_, err := secrets.Get(context.Background(), "bootstrap.c1."+m)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	}
	spec := &capnv1.BootstrapSpec{}
	e.generate(got, "c1", "w-0", "worker", false, spec)
	e.generate(got, "c1", "w-1", "worker", false, spec)

	// Deleted after its data was made.
	if err := e.kv(events.BucketDesired).Delete(context.Background(), "machine.c1.w-1"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, "w-1's data purged", func() bool { return purged("w-1") })

	// Data asked for by command for a machine that is not desired (the
	// machine-manager's ask for one deleted meanwhile).
	cmd := &capnv1.GenerateBootstrap{Cluster: "c1", Machine: "w-late", Role: "worker", Version: "v1.34.2", Bootstrap: spec}
	if _, err := e.pub.Publish(context.Background(), events.CommandSubject("bootstrap", "generate", "c1", "w-late"), events.TypeGenerateBootstrap, "gen-late", cmd); err != nil {
		t.Fatal(err)
	}
	if m := next(t, got); m.Event.Type() != events.TypeBootstrapReady {
		t.Fatalf("got %s: %s", m.Event.Type(), m.Event.Data())
	}
	natstest.WaitFor(t, 10*time.Second, "w-late's data purged", func() bool { return purged("w-late") })
	if purged("w-0") {
		t.Fatal("the data of a desired machine was purged")
	}
}
