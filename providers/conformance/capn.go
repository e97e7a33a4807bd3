package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// ClusterTimeout bounds a whole cluster's create and its delete.
const ClusterTimeout = 90 * time.Second

// Manifest is a cluster on one provider: one control-plane machine and a
// pool of two workers.
func Manifest(cluster, provider string) string {
	return fmt.Sprintf(`apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  controlPlane:
    provider: %s
    replicas: 1
  workerPools:
  - name: md-0
    provider: %s
    replicas: 2
`, cluster, Version, provider, provider)
}

// throughCapn: capn's core services build a whole cluster on the provider
// — infrastructure, bootstrap data fetched by the machines, node
// heartbeats — until it is Ready, then delete it, leaving nothing in KV
// nor on the host.
func (s *suite) throughCapn(t *testing.T, e *Env) {
	s.f.Capn(t, e.NATSURL)
	e.StartProvider()
	clusters := NewClusters(t, e.JS)
	start := time.Now()
	clusters.Apply(Manifest(e.Cluster, e.Provider))
	clusters.WaitReady(e.Cluster, ClusterTimeout)
	t.Logf("cluster of 3 machines on %s Ready in %s", e.Provider, time.Since(start).Round(time.Millisecond))
	machines := clusters.Machines(e.Cluster)
	if len(machines) != 3 {
		t.Errorf("machines: %d, want 3", len(machines))
	}
	for name, m := range machines {
		if m.GetPhaseValue() != capnv1.MachineRunning || m.GetProviderId() == "" || m.GetKubeletVersion() != Version {
			t.Errorf("%s: phase %s, provider id %q, kubelet %q", name, m.GetPhase(), m.GetProviderId(), m.GetKubeletVersion())
		}
	}
	if keys := e.Keys(sdk.InfraPrefix(e.Provider) + e.Cluster + "."); len(keys) != 4 {
		t.Errorf("infra records %v, want 3 machines and the cluster's", keys)
	}
	start = time.Now()
	clusters.Delete(e.Cluster)
	clusters.WaitGone(e.Cluster, []string{e.Provider}, ClusterTimeout)
	t.Logf("deleted in %s", time.Since(start).Round(time.Millisecond))
	e.waitNoLeftovers(e.Cluster)
}
