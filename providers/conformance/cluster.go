package conformance

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"google.golang.org/protobuf/proto"
)

// clusterInfra: ensuring the cluster's infrastructure is idempotent (and
// survives a restart), its endpoint is reported (and listens, when
// claimed), and deleting it twice leaves nothing.
func (s *suite) clusterInfra(t *testing.T, e *Env) {
	e.StartProvider()
	ensure := func(id string) *capnv1.InfraCluster {
		t.Helper()
		e.Send(e.Provider, sdk.KindCluster, "ensure", id, &capnv1.EnsureClusterInfra{Cluster: e.Cluster})
		e.WaitDrained()
		var ic *capnv1.InfraCluster
		natstest.WaitFor(t, s.f.Timeout, "cluster infrastructure ready", func() bool {
			var ok bool
			ic, ok = e.Env.Cluster(e.Provider, e.Cluster)
			return ok && ic.GetReady()
		})
		return ic
	}
	first := ensure("ensure-1")
	ep := first.GetControlPlaneEndpoint()
	if ep.GetHost() == "" || ep.GetPort() == 0 {
		t.Fatalf("no control-plane endpoint: %v", first)
	}
	if again := ensure("ensure-2"); !proto.Equal(again.GetControlPlaneEndpoint(), ep) {
		t.Errorf("a second ensure moved the endpoint: %v then %v", ep, again.GetControlPlaneEndpoint())
	}
	addr := net.JoinHostPort(ep.GetHost(), strconv.Itoa(int(ep.GetPort())))
	if s.f.EndpointListens {
		dial(t, addr)
	}
	if s.f.RestartSafe {
		e.StopProvider()
		e.StartProvider()
		if again := ensure("ensure-3"); !proto.Equal(again.GetControlPlaneEndpoint(), ep) {
			t.Errorf("ensure after a restart moved the endpoint: %v then %v", ep, again.GetControlPlaneEndpoint())
		}
		if s.f.EndpointListens {
			dial(t, addr)
		}
	}
	for _, id := range []string{"delete-infra-1", "delete-infra-2"} {
		e.Send(e.Provider, sdk.KindCluster, "delete", id, &capnv1.DeleteClusterInfra{Cluster: e.Cluster})
		e.WaitDrained()
		natstest.WaitFor(t, s.f.Timeout, "cluster infrastructure record deleted", func() bool {
			_, ok := e.Env.Cluster(e.Provider, e.Cluster)
			return !ok
		})
	}
	e.waitNoLeftovers(e.Cluster)
}

func dial(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Errorf("the control-plane endpoint %s does not accept connections: %v", addr, err)
		return
	}
	c.Close()
}
