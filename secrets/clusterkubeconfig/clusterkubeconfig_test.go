package clusterkubeconfig_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/clusterkubeconfig"
	"github.com/capn-dev/capn/secrets/seal"
)

// TestSourceAnswersPerImplementation: on a real nats-server with capn's
// buckets, a machines cluster gets its admin kubeconfig, an external one
// the kubeconfig registered under the name its spec gives (never an admin
// kubeconfig planted under its name), a missing one is store.ErrNotFound
// naming the key, and a re-registration is a new revision.
func TestSourceAnswersPerImplementation(t *testing.T) {
	ctx := context.Background()
	ns := natstest.Start(t)
	_, js := ns.Connect(t)
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	key, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	des, err := js.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := js.KeyValue(ctx, events.BucketSecrets)
	if err != nil {
		t.Fatal(err)
	}
	clusters := store.NewBucket(des, store.New[capnv1.Cluster]())
	admin := store.NewBucket(sec, store.New[capnv1.AdminKubeconfig](), store.WithSealer(ring))
	external := store.NewBucket(sec, store.New[capnv1.ExternalKubeconfig](), store.WithSealer(ring))
	put := func(name string, cp *capnv1.ControlPlaneSpec) {
		t.Helper()
		c := &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: name}, Spec: &capnv1.ClusterSpec{ControlPlane: cp}}
		if _, err := clusters.Create(ctx, keys.Cluster(name), c); err != nil {
			t.Fatal(err)
		}
	}
	setAdmin := func(cluster, data string) {
		t.Helper()
		if _, _, err := admin.Mutate(ctx, keys.Kubeconfig(cluster), func(*capnv1.AdminKubeconfig, bool) (*capnv1.AdminKubeconfig, error) {
			return &capnv1.AdminKubeconfig{Kubeconfig: []byte(data)}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	register := func(name, data string) uint64 {
		t.Helper()
		_, rev, err := external.Mutate(ctx, keys.ExternalKubeconfig(name), func(*capnv1.ExternalKubeconfig, bool) (*capnv1.ExternalKubeconfig, error) {
			return &capnv1.ExternalKubeconfig{Name: name, Kubeconfig: []byte(data)}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	put("m", &capnv1.ControlPlaneSpec{Provider: "process", Replicas: 1})
	put("x", &capnv1.ControlPlaneSpec{Type: capnv1.ControlPlaneExternal, External: &capnv1.ExternalControlPlaneSpec{Kubeconfig: "prod"}})
	setAdmin("m", "admin of m")
	setAdmin("x", "planted admin of x")
	src := clusterkubeconfig.New(des, sec, ring)

	got := func(cluster string) (string, uint64, error) {
		data, rev, err := src.Kubeconfig(ctx, cluster)
		return string(data), rev, err
	}
	if data, _, err := got("m"); err != nil || data != "admin of m" {
		t.Fatalf("machines cluster: %q %v, want its admin kubeconfig", data, err)
	}
	_, _, err = got("x")
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("external cluster, nothing registered: %v, want store.ErrNotFound (never the planted admin kubeconfig)", err)
	}
	if want := "externalkubeconfig.prod"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %s", err, want)
	}
	rev1 := register("prod", "registered v1")
	data, rev, err := got("x")
	if err != nil || data != "registered v1" || rev != rev1 {
		t.Fatalf("external cluster: %q rev %d %v, want the registered kubeconfig at rev %d", data, rev, err, rev1)
	}
	rev2 := register("prod", "registered v2")
	if data, rev, err := got("x"); err != nil || data != "registered v2" || rev != rev2 || rev2 == rev1 {
		t.Fatalf("re-registered: %q rev %d %v, want v2 at rev %d (was %d)", data, rev, err, rev2, rev1)
	}
	// A cluster gone from desired: its admin kubeconfig, if any.
	if data, _, err := got("gone"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("gone cluster: %q %v, want store.ErrNotFound", data, err)
	}
	if !clusterkubeconfig.External(&capnv1.Cluster{Spec: &capnv1.ClusterSpec{ControlPlane: &capnv1.ControlPlaneSpec{Type: capnv1.ControlPlaneExternal}}}) ||
		clusterkubeconfig.External(&capnv1.Cluster{Spec: &capnv1.ClusterSpec{ControlPlane: &capnv1.ControlPlaneSpec{Provider: "process"}}}) {
		t.Error("External: wrong answer")
	}
}

// TestHasAPIServer: the one rule the bootstrapper, health-watcher and
// addon-manager share. A hosted or external control plane has a real API
// server whatever its workers run on; one on machines only when its
// provider announces real-kubernetes.
func TestHasAPIServer(t *testing.T) {
	announced := map[string][]string{"process": {"stop-start", clusterkubeconfig.CapabilityRealKubernetes}, "sim": {"stop-start"}}
	caps := func(p string) []string { return announced[p] }
	simWorkers := []*capnv1.WorkerPool{{Name: "md-0", Provider: "sim", Replicas: 2}}
	tests := []struct {
		name string
		cp   *capnv1.ControlPlaneSpec
		want bool
	}{
		{"machines on a real-kubernetes provider", &capnv1.ControlPlaneSpec{Provider: "process", Replicas: 1}, true},
		{"machines, type written out", &capnv1.ControlPlaneSpec{Type: capnv1.ControlPlaneMachines, Provider: "process", Replicas: 1}, true},
		{"machines on the simulator", &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 1}, false},
		{"machines on a provider not announced", &capnv1.ControlPlaneSpec{Provider: "docker", Replicas: 1}, false},
		{"machines with no provider", &capnv1.ControlPlaneSpec{Replicas: 1}, false},
		{"hosted, workers on the simulator", &capnv1.ControlPlaneSpec{Type: capnv1.ControlPlaneHosted, Replicas: 1}, true},
		{"external, workers on the simulator", &capnv1.ControlPlaneSpec{Type: capnv1.ControlPlaneExternal, Replicas: 1,
			External: &capnv1.ExternalControlPlaneSpec{Kubeconfig: "prod"}}, true},
	}
	for _, tt := range tests {
		c := &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "demo"}, Spec: &capnv1.ClusterSpec{ControlPlane: tt.cp, WorkerPools: simWorkers}}
		if got := clusterkubeconfig.HasAPIServer(c, caps); got != tt.want {
			t.Errorf("%s: HasAPIServer %v, want %v", tt.name, got, tt.want)
		}
	}
	if clusterkubeconfig.HasAPIServer(&capnv1.Cluster{}, caps) {
		t.Error("a cluster without a spec has no API server")
	}
}
