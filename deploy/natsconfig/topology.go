package natsconfig

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/gateway"
)

// Topology is everything a deployment declares in JetStream: capn's
// streams and buckets (events.DefaultTopology) and the gateway's ingest
// stream (gateway.Topology), replicated replicas times. Durable consumers
// are left to the services, which create their own at start (creating a
// consumer is reading its stream, which the init user may not).
func Topology(replicas int) events.Topology {
	t := events.DefaultTopology(replicas)
	g := gateway.Topology(replicas)
	t.Streams = append(t.Streams, g.Streams...)
	t.Buckets = append(t.Buckets, g.Buckets...)
	t.ObjectStores = append(t.ObjectStores, g.ObjectStores...)
	return t
}

// StreamNames are the names of Topology's streams, buckets' included.
func StreamNames() []string {
	t := Topology(1)
	var out []string
	for _, s := range t.Streams {
		out = append(out, s.Name)
	}
	for _, b := range t.Buckets {
		out = append(out, "KV_"+b.Bucket)
	}
	for _, o := range t.ObjectStores {
		out = append(out, "OBJ_"+o.Bucket)
	}
	return out
}

// Provision creates or updates Topology(replicas) through js and returns
// once every stream has a leader and all its replicas are current, so the
// services that start next find a working topology. It retries while
// JetStream is not ready (a cluster electing its meta leader answers
// "temporarily unavailable"), until ctx ends.
func Provision(ctx context.Context, js jetstream.JetStream, replicas int) error {
	wait := 250 * time.Millisecond
	var last error
	for {
		if last = provisionOnce(ctx, js, replicas); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("provision: %w (last error: %w)", ctx.Err(), last)
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func provisionOnce(ctx context.Context, js jetstream.JetStream, replicas int) error {
	actx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := events.Provision(actx, js, Topology(replicas)); err != nil {
		return err
	}
	for _, name := range StreamNames() {
		s, err := js.Stream(actx, name)
		if err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
		if err := ready(s.CachedInfo(), replicas); err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
	}
	return nil
}

// ready tells whether a stream has a leader and every replica is current.
func ready(info *jetstream.StreamInfo, replicas int) error {
	if replicas <= 1 {
		return nil
	}
	c := info.Cluster
	if c == nil || c.Leader == "" {
		return fmt.Errorf("no leader yet")
	}
	if len(c.Replicas) != replicas-1 {
		return fmt.Errorf("%d of %d replicas", len(c.Replicas)+1, replicas)
	}
	for _, p := range c.Replicas {
		if !p.Current || p.Offline {
			return fmt.Errorf("replica %s is not current", p.Name)
		}
	}
	return nil
}
