package clusterplanner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	observedKV, err := js.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, events.StreamControlPlanes)
	if err != nil {
		t.Fatal(err)
	}
	plantest.TestApplier(t, func(t *testing.T, c *capnv1.Cluster) plantest.ApplierWorld {
		s := New(Config{})
		s.pub = events.NewPublisher(js, "capn/"+Name)
		s.machines = store.NewBucket(desiredKV, store.New[capnv1.Machine]())
		s.clusters = store.NewBucket(desiredKV, store.New[capnv1.Cluster]())
		s.statuses = store.NewBucket(observedKV, store.New[capnv1.ClusterStatus]())
		s.records = store.NewBucket(observedKV, store.New[capnv1.ControlPlaneRecord]())
		recKey := keys.ControlPlane(c.GetMetadata().GetName())
		record := func() (*capnv1.ControlPlaneRecord, uint64) {
			rec, rev, err := s.records.Get(ctx, recKey)
			if errors.Is(err, store.ErrNotFound) {
				return nil, 0
			}
			if err != nil {
				t.Fatal(err)
			}
			return rec, rev
		}
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
			Record: record,
			PutRecord: func(rec *capnv1.ControlPlaneRecord) {
				if _, _, err := s.records.Mutate(ctx, recKey, func(*capnv1.ControlPlaneRecord, bool) (*capnv1.ControlPlaneRecord, error) { return rec, nil }); err != nil {
					t.Fatal(err)
				}
			},
			Commands: func() []plantest.Command {
				var out []plantest.Command
				info, err := stream.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
					m, err := stream.GetMsg(ctx, seq)
					if errors.Is(err, jetstream.ErrMsgNotFound) {
						continue
					}
					if err != nil {
						t.Fatal(err)
					}
					if !strings.HasSuffix(m.Subject, "."+c.GetMetadata().GetName()) {
						continue
					}
					e, err := events.FromMsg(m.Header, m.Data)
					if err != nil {
						t.Fatal(err)
					}
					cmd := new(capnv1.ControlPlaneCommand)
					if err := events.DataAs(e, cmd); err != nil {
						t.Fatal(err)
					}
					out = append(out, plantest.Command{Subject: m.Subject, ID: m.Header.Get(jetstream.MsgIDHeader), Command: cmd})
				}
				return out
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
