package fleetmanager

import (
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/topology"
)

// renderTopology is topology.Render: the same renderer as the gateway's.
func renderTopology(class *capnv1.ClusterClass, t *capnv1.ClusterTopology) (*capnv1.ClusterSpec, error) {
	return topology.Render(class, t)
}
