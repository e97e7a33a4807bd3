package docker

import (
	"strings"
)

// Labels on every container and network this provider makes. Only what
// carries LabelProvider=docker and this deployment's LabelDeployment is
// ever listed, changed or removed.
const (
	LabelProvider   = "capn.dev/provider"
	LabelDeployment = "capn.dev/deployment"
	LabelCluster    = "capn.dev/cluster"
	LabelMachine    = "capn.dev/machine"
	// LabelRole is RoleMachine, RoleEndpoint or RoleNetwork.
	LabelRole = "capn.dev/role"
	// LabelAddress is a machine's static address on its cluster network.
	LabelAddress = "capn.dev/address"
	// LabelEndpointPort is the host port of a cluster's endpoint.
	LabelEndpointPort = "capn.dev/endpoint-port"
	// LabelFailureDomain is a machine's failure domain, as asked.
	LabelFailureDomain = "capn.dev/failure-domain"

	RoleMachine  = "machine"
	RoleEndpoint = "endpoint"
	RoleNetwork  = "network"
)

// Paths inside a machine's container.
const (
	// NodeDataDir is capn-node's --data-dir in the container.
	NodeDataDir = "/var/lib/capn-node"
	// RelayMount is where the NATS relay's directory is mounted.
	RelayMount = "/run/capn-relay"
	// CredsMount, NKeyMount and the TLS paths are where the machines'
	// NATS files are copied (before a machine's first start).
	CredsMount   = "/run/capn/nats.creds"
	NKeyMount    = "/run/capn/nats.nk"
	TLSCAMount   = "/run/capn/nats-ca.pem"
	TLSCertMount = "/run/capn/nats.pem"
	TLSKeyMount  = "/run/capn/nats-key.pem"
	// RelaySocket is the relay's socket file name.
	RelaySocket = "nats.sock"
	// EndpointPort is the endpoint container's port, published on
	// 127.0.0.1:<a host port chosen once>.
	EndpointPort = "6443/tcp"
	// HealthPort is where a machine's capn-node serves /healthz.
	HealthPort = "10248"
)

// names gives docker object names of one deployment. Cluster and machine
// names hold no '.', so '.' separates them unambiguously.
type names struct{ deployment string }

func (n names) network(cluster string) string { return n.deployment + "." + cluster }
func (n names) container(cluster, machine string) string {
	return n.deployment + "." + cluster + "." + machine
}
func (n names) endpoint(cluster string) string { return n.deployment + "." + cluster + "._endpoint" }

// labels of an object of cluster, machine and role (each left out when "").
func (n names) labels(cluster, machine, role string) map[string]string {
	l := map[string]string{LabelProvider: Name, LabelDeployment: n.deployment}
	if role != "" {
		l[LabelRole] = role
	}
	if cluster != "" {
		l[LabelCluster] = cluster
	}
	if machine != "" {
		l[LabelMachine] = machine
	}
	return l
}

// ours reports whether labels mark an object of this deployment with
// cluster, machine and role.
func (n names) ours(labels map[string]string, cluster, machine, role string) bool {
	for k, v := range n.labels(cluster, machine, role) {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// ProviderID is a docker machine's provider id: docker://<container id>.
func ProviderID(containerID string) string { return "docker://" + containerID }

// trimName drops the leading '/' docker puts before container names.
func trimName(s string) string { return strings.TrimPrefix(s, "/") }
