// Package clusterkubeconfig answers one question for every service that
// talks to a workload cluster's API server (the bootstrapper's join
// tokens, the health-watcher's Node reads and deletions, the
// addon-manager): which kubeconfig capn uses for cluster X.
//
//   - controlPlane.type machines (and hosted): the admin kubeconfig the
//     bootstrapper renders and seals, kubeconfig.<cluster>;
//   - controlPlane.type external: capn's CA did not sign that API server
//     and capn writes no admin kubeconfig for it; the kubeconfig the user
//     registered (capn external-kubeconfig set), sealed under
//     externalkubeconfig.<name>, <name> the one spec.controlPlane.external
//     .kubeconfig gives.
//
// A Source reads the desired cluster (to know its implementation) and the
// sealed kubeconfig each call; the revision it returns is the sealed key's
// (KV revisions are unique across keys, so a switch of the registered
// name is a new revision too). It is the Kubeconfig function of a
// kubeapi.ClusterCache.
//
// HasAPIServer is the other half of the answer, whether there is a real
// API server to talk to at all; the services ask it rather than each
// keeping its own rule.
package clusterkubeconfig

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/seal"
)

// Source reads the kubeconfig capn uses for a cluster.
type Source struct {
	clusters *store.Bucket[*capnv1.Cluster]
	admin    *store.Bucket[*capnv1.AdminKubeconfig]
	external *store.Bucket[*capnv1.ExternalKubeconfig]
}

// New reads desired clusters from desired and sealed kubeconfigs from
// secrets with ring. Its NATS user needs reads of desired cluster.>,
// secrets kubeconfig.> and secrets externalkubeconfig.>
// (deploy/natsconfig).
func New(desired, secrets jetstream.KeyValue, ring *seal.Keyring) *Source {
	sealer := store.WithSealer(ring)
	return &Source{
		clusters: store.NewBucket(desired, store.New[capnv1.Cluster]()),
		admin:    store.NewBucket(secrets, store.New[capnv1.AdminKubeconfig](), sealer),
		external: store.NewBucket(secrets, store.New[capnv1.ExternalKubeconfig](), sealer),
	}
}

// Kubeconfig is cluster's kubeconfig and its revision. A cluster without
// one yet (no admin kubeconfig rendered, no kubeconfig registered under
// the name its spec gives) is an error that wraps store.ErrNotFound and
// says which key is missing. A desired cluster that is gone (deleted to
// the end) falls back to the admin kubeconfig, which is gone with it.
func (s *Source) Kubeconfig(ctx context.Context, cluster string) ([]byte, uint64, error) {
	c, _, err := s.clusters.Get(ctx, keys.Cluster(cluster))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, 0, fmt.Errorf("desired cluster %s: %w", cluster, err)
	}
	if cp := c.GetSpec().GetControlPlane(); cp.Implementation() == capnv1.ControlPlaneExternal {
		name := cp.GetExternal().GetKubeconfig()
		if name == "" {
			return nil, 0, fmt.Errorf("cluster %s: spec.controlPlane.external.kubeconfig is empty: %w", cluster, store.ErrNotFound)
		}
		kc, rev, err := s.external.Get(ctx, keys.ExternalKubeconfig(name))
		if err != nil {
			return nil, 0, fmt.Errorf("cluster %s: the registered kubeconfig %s (%s): %w", cluster, name, keys.ExternalKubeconfig(name), err)
		}
		return kc.GetKubeconfig(), rev, nil
	}
	kc, rev, err := s.admin.Get(ctx, keys.Kubeconfig(cluster))
	if err != nil {
		return nil, 0, fmt.Errorf("cluster %s: the admin kubeconfig (%s): %w", cluster, keys.Kubeconfig(cluster), err)
	}
	return kc.GetKubeconfig(), rev, nil
}

// External says whether cluster's API server is one capn does not run
// (controlPlane.type external): real Kubernetes whatever its workers'
// providers, and still there while the cluster is deleted.
func External(c *capnv1.Cluster) bool {
	return c.GetSpec().GetControlPlane().Implementation() == capnv1.ControlPlaneExternal
}

// CapabilityRealKubernetes is the provider SDK's
// sdk.CapabilityRealKubernetes (services do not import the SDK): the
// provider's machines run real Kubernetes.
const CapabilityRealKubernetes = "real-kubernetes"

// HasAPIServer says whether cluster c has a real Kubernetes API server
// for capn to talk to (join tokens, Nodes, add-ons). A hosted or external
// control plane has one, whatever provider its workers run on: its
// implementation runs or checks a real kube-apiserver at the record's
// endpoint (workers on a provider without real Kubernetes, such as the
// simulator, register no Node there, and add-ons are applied all the
// same). A control plane on machines has one when its provider announces
// CapabilityRealKubernetes; capabilities gives what a provider announces
// (none when it has not announced).
func HasAPIServer(c *capnv1.Cluster, capabilities func(provider string) []string) bool {
	cp := c.GetSpec().GetControlPlane()
	if cp.Implementation() != capnv1.ControlPlaneMachines {
		return true
	}
	p := cp.GetProvider()
	return p != "" && slices.Contains(capabilities(p), CapabilityRealKubernetes)
}
