package sdk

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// observed is a provider's view of its own keys in observed KV; it is the
// only writer of infra.<name>.* and provider.<name>. Safe for concurrent use.
type observed struct {
	name          string
	js            jetstream.JetStream
	kv            jetstream.KeyValue
	machines      *store.Bucket[*capnv1.InfraMachine]
	clusters      *store.Bucket[*capnv1.InfraCluster]
	announcements *store.Bucket[*capnv1.ProviderAnnouncement]
	deleted       tombstones
	now           func() time.Time
}

func newObserved(name string, js jetstream.JetStream, kv jetstream.KeyValue) *observed {
	return &observed{
		name:          name,
		js:            js,
		kv:            kv,
		machines:      store.NewBucket(kv, store.New[capnv1.InfraMachine]()),
		clusters:      store.NewBucket(kv, store.New[capnv1.InfraCluster]()),
		announcements: store.NewBucket(kv, store.New[capnv1.ProviderAnnouncement]()),
		now:           time.Now,
	}
}

// normalise fills the identity of m (provider, cluster, machine) and its
// updated time if unset. m is modified in place.
func (o *observed) normalise(m *capnv1.InfraMachine, cluster, machine string) {
	m.Provider, m.Cluster, m.Machine = o.name, cluster, machine
	if m.GetUpdated() == nil {
		m.Updated = timestamppb.New(o.now())
	}
}

// writeMachine stores m (already normalised) unless observed KV holds a
// newer state (by updated). async reports are also dropped when they are
// older than a delete this process made, so a late report never
// resurrects a deleted machine.
func (o *observed) writeMachine(ctx context.Context, m *capnv1.InfraMachine, async bool) error {
	key := InfraKey(o.name, m.GetCluster(), m.GetMachine())
	at := m.GetUpdated().AsTime()
	_, _, err := o.machines.Mutate(ctx, key, func(cur *capnv1.InfraMachine, exists bool) (*capnv1.InfraMachine, error) {
		if exists && cur.GetUpdated().AsTime().After(at) {
			return nil, store.ErrNoChange
		}
		if !exists && async && o.deleted.after(key, at) {
			return nil, store.ErrNoChange
		}
		return proto.Clone(m).(*capnv1.InfraMachine), nil
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	return nil
}

// markMachine sets the state and message of an existing machine record (no
// write if the key does not exist), stamped now.
func (o *observed) markMachine(ctx context.Context, cluster, machine string, state capnv1.InfraState, message string) error {
	key := InfraKey(o.name, cluster, machine)
	now := timestamppb.New(o.now())
	_, _, err := o.machines.Mutate(ctx, key, func(cur *capnv1.InfraMachine, exists bool) (*capnv1.InfraMachine, error) {
		if !exists {
			return nil, store.ErrNoChange
		}
		if state != capnv1.InfraState_INFRA_STATE_UNSPECIFIED {
			cur.SetStateValue(state)
		}
		cur.Message, cur.Updated = message, now
		return cur, nil
	})
	if err != nil {
		return fmt.Errorf("mark %s %s: %w", key, state, err)
	}
	return nil
}

// failMachine records a machine as Failed with message, creating the
// record if need be: the core surfaces it as a condition.
func (o *observed) failMachine(ctx context.Context, cluster, machine, message string) error {
	m := &capnv1.InfraMachine{State: StateFailed.Wire(), Message: message}
	o.normalise(m, cluster, machine)
	key := InfraKey(o.name, cluster, machine)
	_, _, err := o.machines.Mutate(ctx, key, func(cur *capnv1.InfraMachine, exists bool) (*capnv1.InfraMachine, error) {
		if exists {
			// Keep the identity the provider reported, if any.
			m.ProviderId, m.Addresses, m.FailureDomain = cur.GetProviderId(), cur.GetAddresses(), cur.GetFailureDomain()
		}
		return proto.Clone(m).(*capnv1.InfraMachine), nil
	})
	if err != nil {
		return fmt.Errorf("fail %s: %w", key, err)
	}
	return nil
}

// deleteMachine removes a machine's key (compare-and-set; nothing if it is
// missing) and remembers the deletion so that late reports are dropped.
func (o *observed) deleteMachine(ctx context.Context, cluster, machine string) error {
	key := InfraKey(o.name, cluster, machine)
	o.deleted.add(key, o.now())
	_, _, err := o.machines.Mutate(ctx, key, func(*capnv1.InfraMachine, bool) (*capnv1.InfraMachine, error) {
		return nil, store.ErrDelete
	})
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// writeCluster stores c under infra.<name>.<cluster>._ (no write when equal).
func (o *observed) writeCluster(ctx context.Context, c *capnv1.InfraCluster) error {
	key := InfraClusterKey(o.name, c.GetCluster())
	_, _, err := o.clusters.Mutate(ctx, key, func(*capnv1.InfraCluster, bool) (*capnv1.InfraCluster, error) {
		return proto.Clone(c).(*capnv1.InfraCluster), nil
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	return nil
}

// clusterMessage records a failure on a cluster's record, creating a
// not-ready one if there is none.
func (o *observed) clusterMessage(ctx context.Context, cluster, message string) error {
	key := InfraClusterKey(o.name, cluster)
	_, _, err := o.clusters.Mutate(ctx, key, func(cur *capnv1.InfraCluster, exists bool) (*capnv1.InfraCluster, error) {
		if !exists {
			cur = &capnv1.InfraCluster{Provider: o.name, Cluster: cluster}
		}
		cur.Message = message
		return cur, nil
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	return nil
}

func (o *observed) deleteCluster(ctx context.Context, cluster string) error {
	key := InfraClusterKey(o.name, cluster)
	_, _, err := o.clusters.Mutate(ctx, key, func(*capnv1.InfraCluster, bool) (*capnv1.InfraCluster, error) {
		return nil, store.ErrDelete
	})
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// infraRecords is every infra record of one provider at one moment.
type infraRecords struct {
	machines map[string]store.Entry[*capnv1.InfraMachine] // by key
	clusters map[string]store.Entry[*capnv1.InfraCluster]
	// bad are the records that did not decode, skipped.
	bad []error
}

// list reads every infra.<name>.* record through one short-lived push
// consumer of the bucket's stream (the last message of each key), which the
// server removes once it is idle (listConsumerIdle). It is never deleted by
// name: a provider's NATS user may create consumers of its own keys but
// delete none, so it cannot delete another component's. (store.Bucket.List
// cannot be used: machine and cluster records share the prefix but not the
// message type.) A record that does not decode is skipped and its error
// kept in bad, so one corrupt record cannot stop drift detection for all
// the others.
func (o *observed) list(ctx context.Context) (infraRecords, error) {
	ctx, cancel := context.WithTimeout(ctx, store.DefaultLoadTimeout)
	defer cancel()
	out := infraRecords{machines: map[string]store.Entry[*capnv1.InfraMachine]{}, clusters: map[string]store.Entry[*capnv1.InfraCluster]{}}
	fail := func(err error) (infraRecords, error) {
		return out, fmt.Errorf("list %s: %w", InfraPrefix(o.name), err)
	}
	bucket := o.kv.Bucket()
	keyPrefix := "$KV." + bucket + "."
	cons, err := o.js.CreatePushConsumer(ctx, "KV_"+bucket, jetstream.ConsumerConfig{
		Name: "list_" + nats.NewInbox()[len(nats.InboxPrefix):], DeliverSubject: o.js.Conn().NewInbox(),
		DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy, AckPolicy: jetstream.AckNonePolicy,
		FilterSubject: keyPrefix + InfraPrefix(o.name) + ">", InactiveThreshold: listConsumerIdle, MemoryStorage: true,
	})
	if err != nil {
		return fail(err)
	}
	if cons.CachedInfo().NumPending == 0 {
		return out, nil
	}
	msgs := make(chan jetstream.Msg, 64)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-ctx.Done():
		}
	})
	if err != nil {
		return fail(err)
	}
	defer cc.Stop()
	for {
		select {
		case m := <-msgs:
			md, err := m.Metadata()
			if err != nil {
				return fail(err)
			}
			key := strings.TrimPrefix(m.Subject(), keyPrefix)
			if op := m.Headers().Get(kvOperationHeader); op == "DEL" || op == "PURGE" {
				delete(out.machines, key)
				delete(out.clusters, key)
			} else if strings.HasSuffix(key, "."+events.ClusterObject) {
				v, err := store.Decode(m.Data(), store.New[capnv1.InfraCluster]())
				if err != nil {
					out.bad = append(out.bad, fmt.Errorf("key %s: %w", key, err))
				} else {
					out.clusters[key] = store.Entry[*capnv1.InfraCluster]{Key: key, Value: v, Revision: md.Sequence.Stream}
				}
			} else {
				v, err := store.Decode(m.Data(), store.New[capnv1.InfraMachine]())
				if err != nil {
					out.bad = append(out.bad, fmt.Errorf("key %s: %w", key, err))
				} else {
					out.machines[key] = store.Entry[*capnv1.InfraMachine]{Key: key, Value: v, Revision: md.Sequence.Stream}
				}
			}
			if md.NumPending == 0 {
				return out, nil
			}
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
}

// listConsumerIdle is how long the server keeps a list's consumer once it
// is idle.
const listConsumerIdle = 5 * time.Second

// kvOperationHeader marks a KV delete or purge (nats.go's KV-Operation).
const kvOperationHeader = "KV-Operation"

// tombstones remember when this process deleted a machine's key, for a
// while, so that a report made before the delete cannot create it again.
type tombstones struct {
	mu     sync.Mutex
	at     map[string]time.Time
	pruned time.Time
}

// tombstoneTTL bounds how long a deletion is remembered: far longer than a
// report can be in flight.
const tombstoneTTL = 10 * time.Minute

func (t *tombstones) add(key string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at == nil {
		t.at = map[string]time.Time{}
	}
	if at.Sub(t.pruned) > tombstoneTTL/10 {
		for k, v := range t.at {
			if at.Sub(v) > tombstoneTTL {
				delete(t.at, k)
			}
		}
		t.pruned = at
	}
	t.at[key] = at
}

// after reports whether key was deleted at or after at.
func (t *tombstones) after(key string, at time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	d, ok := t.at[key]
	return ok && !d.Before(at)
}
