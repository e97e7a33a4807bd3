package conformance

import (
	"testing"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// handover: orphaning a machine and the cluster's infrastructure removes
// only the provider's records — the machine is not deleted, so adopting
// its record (what the deployment it moves to does) finds it and records
// it Running with the same identity — and what was handed back deletes
// cleanly afterwards.
func (s *suite) handover(t *testing.T, e *Env) {
	e.StartProvider()
	e.Send(e.Provider, sdk.KindCluster, "ensure", "ensure-"+e.Cluster, &capnv1.EnsureClusterInfra{Cluster: e.Cluster})
	e.Create("m1", "create-m1")
	before := e.WaitState("m1", sdk.StateRunning)
	var cluster *capnv1.InfraCluster
	natstest.WaitFor(t, s.f.Timeout, "the cluster's record", func() bool {
		var ok bool
		cluster, ok = e.Env.Cluster(e.Provider, e.Cluster)
		return ok && cluster.GetReady()
	})

	e.Send(e.Provider, sdk.KindMachine, "orphan", "orphan-m1", &capnv1.DeleteMachine{Cluster: e.Cluster, Machine: "m1"})
	e.Send(e.Provider, sdk.KindCluster, "orphan", "orphan-"+e.Cluster, &capnv1.DeleteClusterInfra{Cluster: e.Cluster})
	e.WaitNoMachine(e.Provider, e.Cluster, "m1")
	natstest.WaitFor(t, s.f.Timeout, "the cluster's record removed", func() bool {
		_, ok := e.Env.Cluster(e.Provider, e.Cluster)
		return !ok
	})
	e.WaitDrained()

	e.Send(e.Provider, sdk.KindCluster, "adopt", "adopt-"+e.Cluster, &capnv1.AdoptClusterInfra{Cluster: e.Cluster, Record: cluster})
	e.Send(e.Provider, sdk.KindMachine, "adopt", "adopt-m1", &capnv1.AdoptMachine{Cluster: e.Cluster, Machine: "m1", Record: before})
	after := e.WaitState("m1", sdk.StateRunning)
	if !sameIdentity(before, after) {
		t.Errorf("the machine adopted back is not the one orphaned:\n before %v\n after  %v", before, after)
	}
	natstest.WaitFor(t, s.f.Timeout, "the cluster's record adopted", func() bool {
		c, ok := e.Env.Cluster(e.Provider, e.Cluster)
		return ok && c.GetControlPlaneEndpoint().GetPort() == cluster.GetControlPlaneEndpoint().GetPort()
	})
	if s.f.Heartbeats {
		e.WaitHeartbeat("m1", "")
	}
	e.Delete("m1", "delete-m1")
	e.WaitGone("m1")
	e.Send(e.Provider, sdk.KindCluster, "delete", "delete-"+e.Cluster, &capnv1.DeleteClusterInfra{Cluster: e.Cluster})
	natstest.WaitFor(t, s.f.Timeout, "the cluster's record deleted", func() bool {
		_, ok := e.Env.Cluster(e.Provider, e.Cluster)
		return !ok
	})
	e.waitNoLeftovers(e.Cluster)
}
