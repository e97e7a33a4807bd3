package bootstrapper_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
)

// applyTyped applies a cluster whose control plane is of type typ (no
// control-plane machines: no provider).
func (e *env) applyTyped(name, typ string) {
	e.t.Helper()
	c := &capnv1.Cluster{ApiVersion: "capn.dev/v1alpha1", Kind: "Cluster",
		Metadata: &capnv1.ObjectMeta{Name: name, CreationTimestamp: timestamppb.Now()},
		Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2",
			ControlPlane: &capnv1.ControlPlaneSpec{Type: typ, Replicas: 1},
			Network:      &capnv1.NetworkSpec{PodCidrs: []string{"192.168.0.0/16"}, ServiceCidrs: []string{"10.96.0.0/12"}, ServiceDomain: "cluster.local"}}}
	b := store.NewBucket(e.kv(events.BucketDesired), func() *capnv1.Cluster { return new(capnv1.Cluster) })
	if _, err := b.Create(context.Background(), "cluster."+name, c); err != nil {
		e.t.Fatal(err)
	}
}

// decoded is cloud-config data with its base64 file contents decoded.
func decoded(t *testing.T, data []byte) string {
	t.Helper()
	out := string(data)
	for _, line := range strings.Split(out, "\n") {
		if b64, ok := strings.CutPrefix(strings.TrimSpace(line), "content: "); ok {
			raw, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				t.Fatalf("content %q: %v", b64, err)
			}
			out += "\n" + string(raw)
		}
	}
	return out
}

// putRecord writes the control-plane record as its implementation does.
func (e *env) putRecord(rec *capnv1.ControlPlaneRecord) {
	e.t.Helper()
	b := store.NewBucket(e.kv(events.BucketObserved), func() *capnv1.ControlPlaneRecord { return new(capnv1.ControlPlaneRecord) })
	if _, _, err := b.Mutate(context.Background(), "controlplane."+rec.GetCluster(), func(*capnv1.ControlPlaneRecord, bool) (*capnv1.ControlPlaneRecord, error) {
		return rec, nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

// TestWorkersOfAnImplementationTrustItsRecord: a hosted or external
// control plane's workers join the endpoint of its record and trust the CA
// of its record — not the cluster PKI's, not an infrastructure's — and
// wait until the record has both. The admin kubeconfig of a hosted
// control plane names the record's endpoint; an external one gets none
// from capn (capn's CA did not sign its API server).
func TestWorkersOfAnImplementationTrustItsRecord(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	e.start(ring)
	theirCA, err := pki.NewCA("their-ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	theirHash, err := pki.CACertHash(theirCA.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{capnv1.ControlPlaneHosted, capnv1.ControlPlaneExternal} {
		t.Run(typ, func(t *testing.T) {
			name := "t-" + typ
			e.applyTyped(name, typ)
			natstest.WaitFor(t, 10*time.Second, "the record awaited", func() bool {
				return strings.Contains(e.status(name).GetMessage(), "controlplane."+name) || typ == capnv1.ControlPlaneExternal && e.status(name).GetPkiReady()
			})
			// A provider's infrastructure endpoint is not the control plane's.
			e.reportEndpoint(name)
			got := e.collect(name)
			e.want(name, name+"-md-0")
			cmd := &capnv1.GenerateBootstrap{Cluster: name, Machine: name + "-md-0", Role: "worker", Version: "v1.34.2"}
			if _, err := e.pub.Publish(context.Background(), events.CommandSubject("bootstrap", "generate", name, name+"-md-0"), events.TypeGenerateBootstrap, "gen-"+name, cmd); err != nil {
				t.Fatal(err)
			}
			// The record without a CA: the worker still waits.
			e.putRecord(&capnv1.ControlPlaneRecord{Cluster: name, Implementation: typ, Initialized: true,
				Endpoint: &capnv1.Endpoint{Host: "10.1.2.3", Port: 16443}, Version: "v1.34.2"})
			select {
			case m := <-got:
				t.Fatalf("bootstrap answered before the record had a CA: %s %s", m.Event.Type(), m.Event.Data())
			case <-time.After(500 * time.Millisecond):
			}
			e.putRecord(&capnv1.ControlPlaneRecord{Cluster: name, Implementation: typ, Initialized: true,
				Endpoint: &capnv1.Endpoint{Host: "10.1.2.3", Port: 16443}, Version: "v1.34.2", CaCertificatePem: string(theirCA.CertPEM)})
			m := next(t, got)
			if m.Event.Type() != events.TypeBootstrapReady {
				t.Fatalf("got %s: %s", m.Event.Type(), m.Event.Data())
			}
			var ready capnv1.BootstrapReady
			if err := events.DataAs(m.Event, &ready); err != nil {
				t.Fatal(err)
			}
			boots := store.NewBucket(e.kv(events.BucketSecrets), func() *capnv1.BootstrapData { return new(capnv1.BootstrapData) }, store.WithSealer(ring))
			data, _, err := boots.Get(context.Background(), ready.GetSecretKey())
			if err != nil {
				t.Fatal(err)
			}
			ownHash, err := pki.CACertHash([]byte(e.openPKI(ring, name).GetCa().GetCertPem()))
			if err != nil {
				t.Fatal(err)
			}
			d := decoded(t, data.GetData())
			if !strings.Contains(d, "10.1.2.3:16443") || !strings.Contains(d, theirHash) || strings.Contains(d, ownHash) || strings.Contains(d, "127.0.0.1:6443") {
				t.Fatalf("worker bootstrap data does not join 10.1.2.3:16443 trusting the record's CA %s (cluster PKI's %s):\n%s", theirHash, ownHash, d)
			}
			// The pin providers hand their machines is the record's CA, not
			// the cluster PKI's (capn-node refuses bootstrap data naming
			// another CA than its pin).
			natstest.WaitFor(t, 10*time.Second, "secrets."+name+" pins the record's CA", func() bool {
				return e.status(name).GetCaCertHash() == theirHash
			})
			kc := store.NewBucket(e.kv(events.BucketSecrets), func() *capnv1.AdminKubeconfig { return new(capnv1.AdminKubeconfig) }, store.WithSealer(ring))
			if typ == capnv1.ControlPlaneHosted {
				natstest.WaitFor(t, 10*time.Second, "the admin kubeconfig names the record's endpoint", func() bool {
					k, _, err := kc.Get(context.Background(), "kubeconfig."+name)
					return err == nil && k.GetServer() == "https://10.1.2.3:16443"
				})
				return
			}
			if _, _, err := kc.Get(context.Background(), "kubeconfig."+name); err == nil {
				t.Errorf("an admin kubeconfig of capn's for an external control plane")
			}
		})
	}
}
