package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
)

// Clusters applies, watches and deletes clusters through capn's KV, as
// the gateway and a user would: the suite's view of a capn deployment.
type Clusters struct {
	t        testing.TB
	clusters *store.Bucket[*capnv1.Cluster]
	status   *store.Bucket[*capnv1.ClusterStatus]
	machines *store.Bucket[*capnv1.MachineStatus]
	wanted   *store.Bucket[*capnv1.Machine]
	records  *store.Bucket[*capnv1.ControlPlaneRecord]
	desired  jetstream.KeyValue
	observed jetstream.KeyValue
	secrets  jetstream.KeyValue
}

// NewClusters reads and writes the buckets through js.
func NewClusters(t testing.TB, js jetstream.JetStream) *Clusters {
	t.Helper()
	kv := func(name string) jetstream.KeyValue {
		b, err := js.KeyValue(context.Background(), name)
		if err != nil {
			t.Fatalf("bucket %s: %v", name, err)
		}
		return b
	}
	c := &Clusters{t: t, desired: kv(events.BucketDesired), observed: kv(events.BucketObserved), secrets: kv(events.BucketSecrets)}
	c.clusters = store.NewBucket(c.desired, store.New[capnv1.Cluster]())
	c.status = store.NewBucket(c.observed, store.New[capnv1.ClusterStatus]())
	c.machines = store.NewBucket(c.observed, store.New[capnv1.MachineStatus]())
	c.wanted = store.NewBucket(c.desired, store.New[capnv1.Machine]())
	c.records = store.NewBucket(c.observed, store.New[capnv1.ControlPlaneRecord]())
	return c
}

// ControlPlane is the cluster's control-plane record (observed
// controlplane.<name>), nil when there is none.
func (c *Clusters) ControlPlane(name string) *capnv1.ControlPlaneRecord {
	c.t.Helper()
	rec, _, err := c.records.Get(context.Background(), keys.ControlPlane(name))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		c.t.Fatalf("%s: %v", keys.ControlPlane(name), err)
	}
	return rec
}

// Revision is the desired cluster's KV revision — what a control-plane
// record's observedGeneration answers — or 0 when there is none.
func (c *Clusters) Revision(name string) uint64 {
	c.t.Helper()
	_, rev, err := c.clusters.Get(context.Background(), keys.Cluster(name))
	if errors.Is(err, store.ErrNotFound) {
		return 0
	}
	if err != nil {
		c.t.Fatalf("%s: %v", keys.Cluster(name), err)
	}
	return rev
}

// Apply writes a cluster manifest as the gateway does: decoded, defaulted,
// validated, with a uid and generation 1.
func (c *Clusters) Apply(yaml string) *capnv1.Cluster {
	c.t.Helper()
	cl, err := manifest.Decode([]byte(yaml))
	if err != nil {
		c.t.Fatal(err)
	}
	manifest.Default(cl)
	if err := manifest.Validate(cl); err != nil {
		c.t.Fatal(err)
	}
	cl.Metadata.Uid = uniqueName("uid-")
	cl.Metadata.Generation = 1
	cl.Metadata.CreationTimestamp = timestamppb.Now()
	if _, err := c.clusters.Create(context.Background(), keys.Cluster(cl.GetMetadata().GetName()), cl); err != nil {
		c.t.Fatal(err)
	}
	return cl
}

// Delete sets the cluster's deletion timestamp, as the gateway does.
func (c *Clusters) Delete(name string) {
	c.t.Helper()
	if _, _, err := c.clusters.Mutate(context.Background(), keys.Cluster(name), func(cur *capnv1.Cluster, _ bool) (*capnv1.Cluster, error) {
		cur.Metadata.DeletionTimestamp = timestamppb.Now()
		cur.Metadata.Generation++
		return cur, nil
	}); err != nil {
		c.t.Fatal(err)
	}
}

// Status is the cluster's observed status (nil when there is none).
func (c *Clusters) Status(name string) *capnv1.ClusterStatus {
	st, _, err := c.status.Get(context.Background(), keys.Cluster(name))
	if err != nil {
		return nil
	}
	return st
}

// Machines are the cluster's observed machine statuses, by machine name.
func (c *Clusters) Machines(name string) map[string]*capnv1.MachineStatus {
	c.t.Helper()
	list, err := c.machines.List(context.Background(), keys.MachinesOf(name))
	if err != nil {
		c.t.Fatal(err)
	}
	out := make(map[string]*capnv1.MachineStatus, len(list))
	for _, e := range list {
		out[e.Key[len(keys.MachinesOf(name)):]] = e.Value
	}
	return out
}

// UIDs are the uids of the cluster's desired machines, by name: a
// replacement may reuse a name (the planner fills the lowest free slot),
// never a uid.
func (c *Clusters) UIDs(name string) map[string]string {
	c.t.Helper()
	list, err := c.wanted.List(context.Background(), keys.MachinesOf(name))
	if err != nil {
		c.t.Fatal(err)
	}
	out := make(map[string]string, len(list))
	for _, e := range list {
		out[e.Key[len(keys.MachinesOf(name)):]] = e.Value.GetMetadata().GetUid()
	}
	return out
}

// WaitReady waits until the cluster's status is Ready for its current
// generation.
func (c *Clusters) WaitReady(name string, timeout time.Duration) {
	c.t.Helper()
	c.waitFor(timeout, name+" Ready", func() (bool, string) {
		cl, _, err := c.clusters.Get(context.Background(), keys.Cluster(name))
		st := c.Status(name)
		if err != nil || st == nil {
			return false, "no status yet"
		}
		return st.GetPhaseValue() == capnv1.ClusterReady && st.GetObservedGeneration() == cl.GetMetadata().GetGeneration(),
			fmt.Sprintf("phase %s, generation %d/%d, %s", st.GetPhase(), st.GetObservedGeneration(), cl.GetMetadata().GetGeneration(), c.machineSummary(name))
	})
}

// WaitGone waits until nothing of the cluster is left in KV: desired and
// observed cluster and machines, the control-plane record, the providers'
// infra records, the secrets status, PKI, kubeconfig and bootstrap data.
func (c *Clusters) WaitGone(name string, providers []string, timeout time.Duration) {
	c.t.Helper()
	c.waitFor(timeout, name+" gone", func() (bool, string) {
		left := c.Left(name, providers)
		return len(left) == 0, fmt.Sprintf("left: %v", left)
	})
}

// Left lists the cluster's keys still in KV.
func (c *Clusters) Left(name string, providers []string) []string {
	c.t.Helper()
	var out []string
	listKeys := func(kv jetstream.KeyValue, prefixes ...string) {
		b := store.NewBucket(kv, store.New[capnv1.Cluster]())
		for _, p := range prefixes {
			k, err := b.Keys(context.Background(), p)
			if err != nil {
				c.t.Fatal(err)
			}
			for _, key := range k {
				// cluster.<name> itself, not cluster.<name>2.
				if key == p || p[len(p)-1] == '.' || key[len(p)] == '.' {
					out = append(out, key)
				}
			}
		}
	}
	listKeys(c.desired, keys.Cluster(name), keys.MachinesOf(name))
	listKeys(c.observed, keys.Cluster(name), keys.MachinesOf(name), keys.Secrets(name), keys.ControlPlane(name))
	for _, p := range providers {
		listKeys(c.observed, sdk.InfraPrefix(p)+name+".")
	}
	listKeys(c.secrets, keys.PKI(name), keys.Kubeconfig(name), keys.BootstrapsOf(name))
	return out
}

func (c *Clusters) machineSummary(name string) string {
	var s string
	for m, st := range c.Machines(name) {
		s += fmt.Sprintf(" %s=%s", m, st.GetPhase())
		if st.GetFailureReason() != "" {
			s += "(" + st.GetFailureReason() + ")"
		}
	}
	return "machines:" + s
}

func (c *Clusters) waitFor(timeout time.Duration, what string, cond func() (bool, string)) {
	c.t.Helper()
	if err := natstest.Poll(timeout, 50*time.Millisecond, func() error {
		if ok, state := cond(); !ok {
			return errors.New(state)
		}
		return nil
	}); err != nil {
		c.t.Fatalf("timed out after %s waiting for %s (%v)", timeout, what, err)
	}
}
