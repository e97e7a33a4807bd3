// Package e2e runs capn's services end to end: each as its own runtime.Run
// with its own NATS connection to one real embedded nats-server, exactly as
// separate programs would, talking only through NATS.
package e2e

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sim"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/bootstrapper"
	"github.com/capn-dev/capn/services/bootstrapper/seal"
	clusterplanner "github.com/capn-dev/capn/services/cluster-planner"
	machinemanager "github.com/capn-dev/capn/services/machine-manager"
	"github.com/capn-dev/capn/services/runtime"
)

// world is one capn deployment on one embedded server.
type world struct {
	t        *testing.T
	srv      *natstest.Server
	js       jetstream.JetStream
	ring     *seal.Keyring
	mu       sync.Mutex
	stops    map[string]func()
	clusters *store.Bucket[*capnv1.Cluster]
	desired  jetstream.KeyValue
	observed jetstream.KeyValue
}

func newWorld(t *testing.T) *world {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx := context.Background()
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	key, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, _ := seal.NewKeyring(key)
	w := &world{t: t, srv: srv, js: js, ring: ring, stops: map[string]func(){}}
	w.desired, _ = js.KeyValue(ctx, events.BucketDesired)
	w.observed, _ = js.KeyValue(ctx, events.BucketObserved)
	w.clusters = store.NewBucket(w.desired, func() *capnv1.Cluster { return new(capnv1.Cluster) })
	return w
}

// services are the programs of a deployment, by name; each call makes a
// fresh instance (as a restarted process would be).
func (w *world) newService(name string) runtime.Service {
	switch name {
	case clusterplanner.Name:
		return clusterplanner.New(clusterplanner.Config{})
	case machinemanager.Name:
		return machinemanager.New(machinemanager.Config{})
	case bootstrapper.Name:
		return bootstrapper.New(bootstrapper.Config{Keyring: w.ring})
	case "provider-sim":
		return sim.NewService(sim.Options{BootLatency: 30 * time.Millisecond, BootJitter: 30 * time.Millisecond, HeartbeatEvery: 2 * time.Second, Seed: 1},
			sdk.Options{ReconcileEvery: 2 * time.Second})
	}
	w.t.Fatalf("unknown service %s", name)
	return nil
}

var allServices = []string{clusterplanner.Name, machinemanager.Name, bootstrapper.Name, "provider-sim"}

// start runs a service until stop(name) or the test's end.
func (w *world) start(name string) {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := runtime.Config{Name: name, NATS: runtime.NATSConfig{URL: w.srv.URL()}, LogLevel: "warn"}
	done := make(chan error, 1)
	go func() { done <- runtime.Run(ctx, cfg, w.newService(name), runtime.WithoutHTTP()) }()
	stop := func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				w.t.Errorf("%s: %v", name, err)
			}
		case <-time.After(20 * time.Second):
			w.t.Errorf("%s did not stop within 20s", name)
		}
	}
	w.mu.Lock()
	w.stops[name] = stop
	w.mu.Unlock()
	w.t.Cleanup(func() { w.stop(name) })
}

func (w *world) stop(name string) {
	w.mu.Lock()
	stop := w.stops[name]
	delete(w.stops, name)
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// apply writes a cluster as the gateway does: decoded, defaulted,
// validated, with a uid at create and generation bumped on change.
func (w *world) apply(yaml string) *capnv1.Cluster {
	w.t.Helper()
	c, err := manifest.Decode([]byte(yaml))
	if err != nil {
		w.t.Fatal(err)
	}
	manifest.Default(c)
	if err := manifest.Validate(c); err != nil {
		w.t.Fatal(err)
	}
	key := "cluster." + c.GetMetadata().GetName()
	_, _, err = w.clusters.Mutate(context.Background(), key, func(cur *capnv1.Cluster, exists bool) (*capnv1.Cluster, error) {
		if exists {
			if err := manifest.ValidateUpdate(cur, c); err != nil {
				return nil, err
			}
			cur.Spec = c.Spec
			cur.Metadata.Generation++
			return cur, nil
		}
		c.Metadata.Uid = "uid-" + c.GetMetadata().GetName()
		c.Metadata.Generation = 1
		c.Metadata.CreationTimestamp = timestamppb.Now()
		return c, nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return c
}

func (w *world) mutateCluster(name string, fn func(*capnv1.Cluster)) {
	w.t.Helper()
	if _, _, err := w.clusters.Mutate(context.Background(), "cluster."+name, func(cur *capnv1.Cluster, _ bool) (*capnv1.Cluster, error) {
		fn(cur)
		cur.Metadata.Generation++
		return cur, nil
	}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) status(name string) *capnv1.ClusterStatus {
	b := store.NewBucket(w.observed, func() *capnv1.ClusterStatus { return new(capnv1.ClusterStatus) })
	st, _, err := b.Get(context.Background(), "cluster."+name)
	if err != nil {
		return nil
	}
	return st
}

// waitReady waits until the cluster's status is Ready for its current
// generation and every pool has exactly its replicas, all updated.
func (w *world) waitReady(name string, timeout time.Duration) {
	w.t.Helper()
	natstest.WaitFor(w.t, timeout, name+" Ready", func() bool {
		c, _, err := w.clusters.Get(context.Background(), "cluster."+name)
		st := w.status(name)
		if err != nil || st.GetPhase() != "Ready" || st.GetObservedGeneration() != c.GetMetadata().GetGeneration() {
			return false
		}
		return true
	})
}

// keys lists a bucket's keys under prefix.
func keys(t *testing.T, kv jetstream.KeyValue, prefix string) []string {
	t.Helper()
	lister, err := kv.ListKeys(context.Background())
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for k := range lister.Keys() {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
