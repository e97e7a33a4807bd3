// Package clusterstate reads one cluster's state from a service's watch
// caches into one typed value: the desired cluster and machines, and what
// is observed of them. Each service cuts the [State] down to the input of
// its pure core (the planner's plan.Input, the health-watcher's State, the
// remediator's Snapshot).
//
// It lives under events/store, not services/, because every service reads
// it: tests/arch forbids a service to import another service's packages,
// and a package here is plumbing, like the store it reads.
package clusterstate

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// Part is a part of a cluster's observed state that [Read] reads. A part
// needs its prefix kept by the observed cache (store.Keep); a cache panics
// on a key it does not keep, so a missing prefix is found at once.
type Part uint8

// The parts of a cluster's observed state.
const (
	// ClusterStatus is cluster.<c>: State.Status.
	ClusterStatus Part = 1 << iota
	// Secrets is secrets.<c>: State.Secrets.
	Secrets
	// ClusterInfra is infra.<p>.<c>._ for the control plane's provider p,
	// or, for a cluster without a spec, each announced provider (needs
	// provider. too): State.Infra and State.InfraProvider.
	ClusterInfra
	// MachineStatuses is machine.<c>.<m>: Machine.Status.
	MachineStatuses
	// Nodes is node.<c>.<m>: Machine.Node and Machine.NodeRevision.
	Nodes
	// MachineInfra is infra.<p>.<c>.<m> for the machine's provider p:
	// Machine.Infra.
	MachineInfra
)

// Query says what [Read] reads.
type Query struct {
	Cluster string
	Parts   Part
	// Only, when not nil, is the machines read in full; every desired
	// machine is still named in State.Names.
	Only map[string]struct{}
}

// State is one cluster as a service's caches hold it. Everything is a
// fresh copy the caller owns.
type State struct {
	Name string
	// Cluster is the desired cluster: nil when there is none, or when its
	// record does not decode (ClusterRevision is then not 0). Nothing else
	// is read without it.
	Cluster         *capnv1.Cluster
	ClusterRevision uint64
	// Status is the observed cluster status (nil: none).
	Status *capnv1.ClusterStatus
	// Secrets is the status of the cluster's secrets (nil: none).
	Secrets *capnv1.ClusterSecretsStatus
	// Infra is the cluster's infrastructure and InfraProvider the provider
	// whose record it is (nil and "": none).
	Infra         *capnv1.InfraCluster
	InfraProvider string
	// Names are every desired machine's name, sorted, whether it decodes
	// or was asked for or not.
	Names []string
	// Machines are the desired machines read in full (Query.Only), sorted
	// by name; Unreadable the desired machine records among them that do
	// not decode.
	Machines   []Machine
	Unreadable []store.Undecodable
	// Garbled are the observed keys read that are there but do not
	// decode (read as absent), for a caller to log.
	Garbled []string
}

// Machine is one desired machine and what is observed of it.
type Machine struct {
	Name string
	// Desired is the desired machine, at Revision.
	Desired  *capnv1.Machine
	Revision uint64
	// Status is its observed status (nil: none).
	Status *capnv1.MachineStatus
	// Node is its node's health record (nil: none, or one that does not
	// decode) and NodeRevision the key's revision (0: no key).
	Node         *capnv1.NodeHealth
	NodeRevision uint64
	// Infra is its provider's record of its infrastructure (nil: none).
	Infra *capnv1.InfraMachine
}

// Read reads cluster q.Cluster and q.Parts of what is observed of it from
// the caches desired and observed. It does no I/O.
func Read(desired, observed *store.Cache, q Query) State {
	st := State{Name: q.Cluster}
	r := reader{q: q, st: &st}
	var ok bool
	st.Cluster, st.ClusterRevision, ok = store.NewView(desired, store.New[capnv1.Cluster]()).Get(keys.Cluster(q.Cluster))
	if !ok {
		return st
	}
	if q.Parts&ClusterStatus != 0 {
		st.Status = get(&r, observed, keys.Cluster(q.Cluster), store.New[capnv1.ClusterStatus]())
	}
	if q.Parts&Secrets != 0 {
		st.Secrets = get(&r, observed, keys.Secrets(q.Cluster), store.New[capnv1.ClusterSecretsStatus]())
	}
	if q.Parts&ClusterInfra != 0 {
		r.clusterInfra(observed)
	}
	prefix := keys.MachinesOf(q.Cluster)
	for _, e := range desired.List(prefix) {
		name := strings.TrimPrefix(e.Key, prefix)
		st.Names = append(st.Names, name)
		if _, ok := q.Only[name]; q.Only != nil && !ok {
			continue
		}
		m, err := store.Decode(e.Value, store.New[capnv1.Machine]())
		if err != nil {
			st.Unreadable = append(st.Unreadable, store.Undecodable{Key: e.Key, Revision: e.Revision, Err: err})
			continue
		}
		st.Machines = append(st.Machines, r.machine(observed, name, m, e.Revision))
	}
	return st
}

type reader struct {
	q  Query
	st *State
}

// get reads key through a view, noting a value that does not decode.
func get[T proto.Message](r *reader, c *store.Cache, key string, newT func() T) T {
	v, _ := getOK(r, c, key, newT)
	return v
}

func getOK[T proto.Message](r *reader, c *store.Cache, key string, newT func() T) (T, bool) {
	v, rev, ok := store.NewView(c, newT).Get(key)
	if !ok && rev != 0 {
		r.st.Garbled = append(r.st.Garbled, key)
	}
	return v, ok
}

func (r *reader) clusterInfra(observed *store.Cache) {
	providers := []string{r.st.Cluster.GetSpec().GetControlPlane().GetProvider()}
	if providers[0] == "" {
		// A cluster without a spec (a corrupt record replaced on delete):
		// its infrastructure is whichever announced provider holds it.
		providers = observed.KeysUnder(keys.ProviderPrefix)
	}
	for _, p := range providers {
		if ic, ok := getOK(r, observed, keys.InfraCluster(p, r.q.Cluster), store.New[capnv1.InfraCluster]()); ok {
			r.st.Infra, r.st.InfraProvider = ic, p
			return
		}
	}
}

func (r *reader) machine(observed *store.Cache, name string, m *capnv1.Machine, rev uint64) Machine {
	out := Machine{Name: name, Desired: m, Revision: rev}
	c := r.q.Cluster
	if r.q.Parts&MachineStatuses != 0 {
		out.Status = get(r, observed, keys.Machine(c, name), store.New[capnv1.MachineStatus]())
	}
	if r.q.Parts&Nodes != 0 {
		var ok bool
		out.Node, out.NodeRevision, ok = store.NewView(observed, store.New[capnv1.NodeHealth]()).Get(keys.Node(c, name))
		if !ok && out.NodeRevision != 0 {
			r.st.Garbled = append(r.st.Garbled, keys.Node(c, name))
		}
	}
	if p := m.GetSpec().GetProvider(); p != "" && r.q.Parts&MachineInfra != 0 {
		out.Infra = get(r, observed, keys.Infra(p, c, name), store.New[capnv1.InfraMachine]())
	}
	return out
}

// Machine returns the machine named name among s.Machines.
func (s State) Machine(name string) (Machine, bool) {
	i, ok := slices.BinarySearchFunc(s.Machines, name, func(m Machine, n string) int { return strings.Compare(m.Name, n) })
	if !ok {
		return Machine{}, false
	}
	return s.Machines[i], true
}
