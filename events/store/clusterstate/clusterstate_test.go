package clusterstate

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// world is a desired and an observed bucket on a real nats-server, and a
// cache of each (the observed one keeping only the prefixes Read reads).
type world struct {
	t                 *testing.T
	desired, observed jetstream.KeyValue
	dc, oc            *store.Cache
}

func newWorld(t *testing.T) *world {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx := context.Background()
	w := &world{t: t}
	var err error
	if w.desired, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "desired"}); err != nil {
		t.Fatal(err)
	}
	if w.observed, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "observed"}); err != nil {
		t.Fatal(err)
	}
	w.dc = store.NewCache(w.desired, store.CacheOptions{})
	w.oc = store.NewCache(w.observed, store.Keep(store.CacheOptions{}, js,
		keys.ClusterPrefix, keys.MachinePrefix, keys.NodePrefix, keys.InfraPrefix, keys.SecretsPrefix, keys.ProviderPrefix))
	cctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	for _, c := range []*store.Cache{w.dc, w.oc} {
		if err := c.Start(cctx); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// put writes m (nil: bytes that do not decode) and returns its revision.
func (w *world) put(kv jetstream.KeyValue, key string, m proto.Message) uint64 {
	w.t.Helper()
	data := []byte{0xff, 0xff}
	if m != nil {
		var err error
		if data, err = store.Encode(m); err != nil {
			w.t.Fatal(err)
		}
	}
	rev, err := kv.Put(context.Background(), key, data)
	if err != nil {
		w.t.Fatal(err)
	}
	return rev
}

// synced waits until both caches hold every write made so far.
func (w *world) synced() {
	w.t.Helper()
	for _, p := range []struct {
		kv jetstream.KeyValue
		c  *store.Cache
	}{{w.desired, w.dc}, {w.observed, w.oc}} {
		st, err := p.kv.Status(context.Background())
		if err != nil {
			w.t.Fatal(err)
		}
		last := st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
		natstest.WaitFor(w.t, 5*time.Second, "cache "+p.kv.Bucket(), func() bool { return p.c.Revision() >= last })
	}
}

func machine(cluster, name, provider string) *capnv1.Machine {
	return &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: name}, Spec: &capnv1.MachineSpec{Cluster: cluster, Provider: provider}}
}

func TestRead(t *testing.T) {
	w := newWorld(t)
	obs, des := w.observed, w.desired
	cl := &capnv1.Cluster{Spec: &capnv1.ClusterSpec{ControlPlane: &capnv1.ControlPlaneSpec{Provider: "sim"}}}
	w.put(des, keys.Cluster("c1"), cl)
	w.put(obs, keys.Cluster("c1"), &capnv1.ClusterStatus{ControlPlaneInitialized: true})
	w.put(obs, keys.Secrets("c1"), &capnv1.ClusterSecretsStatus{PkiReady: true})
	w.put(obs, keys.InfraCluster("sim", "c1"), &capnv1.InfraCluster{Ready: true})
	revA := w.put(des, keys.Machine("c1", "a"), machine("c1", "a", "sim"))
	w.put(obs, keys.Machine("c1", "a"), &capnv1.MachineStatus{Phase: capnv1.MachineRunning.Wire()})
	nodeA := w.put(obs, keys.Node("c1", "a"), &capnv1.NodeHealth{Healthy: true})
	w.put(obs, keys.Infra("sim", "c1", "a"), &capnv1.InfraMachine{ProviderId: "sim://a"})
	revB := w.put(des, keys.Machine("c1", "b"), machine("c1", "b", "sim"))
	w.put(obs, keys.Machine("c1", "b"), nil) // garbled status
	nodeB := w.put(obs, keys.Node("c1", "b"), nil)
	bad := w.put(des, keys.Machine("c1", "bad"), nil)
	w.put(des, keys.Machine("c10", "x"), machine("c10", "x", "sim")) // another cluster: not read
	garbled := w.put(des, keys.Cluster("garbled"), nil)
	// A cluster without a spec: its infrastructure is an announced
	// provider's.
	w.put(des, keys.Cluster("bare"), &capnv1.Cluster{})
	w.put(obs, keys.Provider("docker"), &capnv1.ProviderAnnouncement{})
	w.put(obs, keys.Provider("sim"), &capnv1.ProviderAnnouncement{})
	w.put(obs, keys.InfraCluster("sim", "bare"), &capnv1.InfraCluster{ControlPlaneEndpoint: &capnv1.Endpoint{Host: "bare"}})
	w.synced()

	all := ClusterStatus | Secrets | ClusterInfra | MachineStatuses | Nodes | MachineInfra
	t.Run("everything", func(t *testing.T) {
		st := Read(w.dc, w.oc, Query{Cluster: "c1", Parts: all})
		if !proto.Equal(st.Cluster, cl) || !st.Status.GetControlPlaneInitialized() || !st.Secrets.GetPkiReady() ||
			!st.Infra.GetReady() || st.InfraProvider != "sim" {
			t.Errorf("cluster-level state %+v", st)
		}
		if !slices.Equal(st.Names, []string{"a", "b", "bad"}) {
			t.Errorf("names %v, want a b bad", st.Names)
		}
		if len(st.Unreadable) != 1 || st.Unreadable[0].Key != keys.Machine("c1", "bad") || st.Unreadable[0].Revision != bad {
			t.Errorf("unreadable %+v, want machine.c1.bad@%d", st.Unreadable, bad)
		}
		if len(st.Machines) != 2 {
			t.Fatalf("machines %+v, want a and b", st.Machines)
		}
		a, b := st.Machines[0], st.Machines[1]
		if a.Name != "a" || a.Revision != revA || a.Status.GetPhaseValue() != capnv1.MachineRunning ||
			!a.Node.GetHealthy() || a.NodeRevision != nodeA || a.Infra.GetProviderId() != "sim://a" {
			t.Errorf("machine a %+v", a)
		}
		// Garbage reads as absent; a node record's revision is kept for
		// the write that replaces it.
		if b.Name != "b" || b.Revision != revB || b.Status != nil || b.Node != nil || b.NodeRevision != nodeB || b.Infra != nil {
			t.Errorf("machine b %+v", b)
		}
		if want := []string{keys.Machine("c1", "b"), keys.Node("c1", "b")}; !slices.Equal(st.Garbled, want) {
			t.Errorf("garbled %v, want %v", st.Garbled, want)
		}
		if m, ok := st.Machine("b"); !ok || m.Revision != revB {
			t.Errorf("Machine(b) = %+v %v", m, ok)
		}
		if _, ok := st.Machine("bad"); ok {
			t.Error("Machine(bad) found an unreadable machine")
		}
	})

	tests := []struct {
		name  string
		q     Query
		check func(t *testing.T, st State)
	}{
		{"only the parts asked for", Query{Cluster: "c1", Parts: MachineStatuses}, func(t *testing.T, st State) {
			if st.Status != nil || st.Secrets != nil || st.Infra != nil || len(st.Machines) != 2 ||
				st.Machines[0].Status == nil || st.Machines[0].Node != nil || st.Machines[0].Infra != nil {
				t.Errorf("read more or less than machine statuses: %+v", st)
			}
		}},
		{"only some machines in full", Query{Cluster: "c1", Parts: all, Only: map[string]struct{}{"b": {}, "gone": {}}}, func(t *testing.T, st State) {
			if len(st.Machines) != 1 || st.Machines[0].Name != "b" || len(st.Unreadable) != 0 || len(st.Names) != 3 {
				t.Errorf("machines %+v unreadable %+v names %v, want b alone, all three names", st.Machines, st.Unreadable, st.Names)
			}
		}},
		{"no cluster", Query{Cluster: "nope", Parts: all}, func(t *testing.T, st State) {
			if st.Cluster != nil || st.ClusterRevision != 0 || st.Names != nil {
				t.Errorf("state of a missing cluster %+v", st)
			}
		}},
		{"a cluster record that does not decode", Query{Cluster: "garbled", Parts: all}, func(t *testing.T, st State) {
			if st.Cluster != nil || st.ClusterRevision != garbled {
				t.Errorf("garbled cluster read as %v@%d, want nil@%d", st.Cluster, st.ClusterRevision, garbled)
			}
		}},
		{"a cluster without a spec", Query{Cluster: "bare", Parts: ClusterInfra}, func(t *testing.T, st State) {
			if st.InfraProvider != "sim" || st.Infra.GetControlPlaneEndpoint().GetHost() != "bare" {
				t.Errorf("infra %v of %q, want sim's", st.Infra, st.InfraProvider)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.check(t, Read(w.dc, w.oc, tt.q)) })
	}
}
