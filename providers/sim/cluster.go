package sim

import (
	"context"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// ClusterHost is the host of every simulated control-plane endpoint.
const ClusterHost = "127.0.0.1"

// EnsureCluster records the cluster's simulated infrastructure: ready at
// once, with the control-plane endpoint 127.0.0.1:<port>, the port
// deterministic per cluster name (30000..59999). Nothing listens there:
// there is no network and no load balancer. params are ignored.
func (p *Provider) EnsureCluster(_ context.Context, cluster string, _ map[string]string) (*capnv1.InfraCluster, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.clusters[cluster]
	if !ok {
		c = &capnv1.InfraCluster{
			Provider:             Name,
			Cluster:              cluster,
			ControlPlaneEndpoint: &capnv1.Endpoint{Host: ClusterHost, Port: clusterPort(cluster)},
			Ready:                true,
			Message:              "simulated: nothing listens on the control-plane endpoint",
		}
		p.clusters[cluster] = c
	}
	return proto.Clone(c).(*capnv1.InfraCluster), nil
}

// DeleteCluster forgets the cluster's infrastructure (its machines are
// deleted by their own commands); a missing cluster is fine.
func (p *Provider) DeleteCluster(_ context.Context, cluster string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.clusters, cluster)
	return nil
}
