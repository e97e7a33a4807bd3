package clusterplanner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

// The applier that ships passes the conformance test the harness of the
// property tests passes, against a real nats-server.
func TestKVApplierConforms(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx := context.Background()
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	desiredKV, err := js.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	plantest.TestApplier(t, func(t *testing.T, c *capnv1.Cluster) plantest.ApplierWorld {
		s := New(Config{})
		s.machines = store.NewBucket(desiredKV, store.New[capnv1.Machine]())
		prefix := keys.MachinesOf(c.GetMetadata().GetName())
		return plantest.ApplierWorld{
			Next: func(now time.Time) plan.Applier {
				es, err := s.machines.List(ctx, prefix)
				if err != nil {
					t.Fatal(err)
				}
				revs := map[string]uint64{}
				for _, e := range es {
					revs[strings.TrimPrefix(e.Key, prefix)] = e.Revision
				}
				ap := s.applier(c, revs)
				ap.now = func() time.Time { return now }
				return ap
			},
			Machine: func(name string) *capnv1.Machine {
				m, _, err := s.machines.Get(ctx, prefix+name)
				if errors.Is(err, store.ErrNotFound) {
					return nil
				}
				if err != nil {
					t.Fatal(err)
				}
				return m
			},
			Annotate: func(name, key, value string) {
				_, _, err := s.machines.Mutate(ctx, prefix+name, func(cur *capnv1.Machine, exists bool) (*capnv1.Machine, error) {
					if cur.Metadata.Annotations == nil {
						cur.Metadata.Annotations = map[string]string{}
					}
					cur.Metadata.Annotations[key] = value
					return cur, nil
				})
				if err != nil {
					t.Fatal(err)
				}
			},
		}
	})
}
