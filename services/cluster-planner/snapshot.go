package clusterplanner

import (
	"context"
	"strings"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
)

// snapshot reads what the planner's caches hold of cluster name into the
// planner's input, with the revision of each machine record read (the one
// RemoveMachine deletes at). ok is false when there is no cluster to plan:
// no record, or one that does not decode (logged: nothing is planned for
// it until it is deleted). An error is a failed read of a provider's
// announcement: the plan waits rather than refusing the cluster on a guess.
func (s *Service) snapshot(ctx context.Context, name string) (in plan.Input, revs map[string]uint64, ok bool, err error) {
	log := zerolog.Ctx(ctx)
	cluster, _, ok := store.Lookup(s.desired, keys.Cluster(name), func() *capnv1.Cluster { return new(capnv1.Cluster) })
	if !ok {
		if _, there := s.desired.Get(keys.Cluster(name)); there {
			// A record that does not decode: plan nothing (neither keep
			// nor tear down its machines) until it is deleted.
			log.Warn().Msg("cluster record does not decode; nothing is planned for it until it is deleted (DELETE /v1/clusters/" + name + ")")
		}
		return plan.Input{}, nil, false, nil
	}
	// The planner's one check of the stored spec: the cache's copy is
	// shared, so a copy is defaulted.
	spec := manifest.Validator{MaxPoolReplicas: s.cfg.MaxPoolReplicas, MaxClusterReplicas: s.cfg.MaxClusterReplicas}.
		Check(proto.CloneOf(cluster))
	in = plan.Input{Cluster: cluster, Spec: spec, Machines: map[string]*capnv1.Machine{}, Observed: map[string]*capnv1.MachineStatus{}, Now: s.cfg.Now(),
		MaxActions: s.maxActions()}
	revs = map[string]uint64{}
	for _, e := range s.desired.List(keys.MachinesOf(name)) {
		n := strings.TrimPrefix(e.Key, keys.MachinesOf(name))
		m, err := store.Decode(e.Value, newMachine)
		if err != nil {
			// Retrying cannot mend it and would stop the whole cluster:
			// its name stays taken, the rest is planned.
			log.Warn().Err(err).Str("machine", n).Msg("machine record does not decode; left alone")
			in.Unreadable = append(in.Unreadable, n)
			continue
		}
		in.Machines[n], revs[n] = m, e.Revision
	}
	for _, e := range s.observed.List(keys.MachinesOf(name)) {
		n := strings.TrimPrefix(e.Key, keys.MachinesOf(name))
		st, err := store.Decode(e.Value, newStatus)
		if err != nil {
			log.Warn().Err(err).Str("machine", n).Msg("machine status does not decode; planned as if none were written")
			continue
		}
		in.Observed[n] = st
	}
	cp := cluster.GetSpec().GetControlPlane().GetProvider()
	infraOf := []string{cp}
	if cp == "" {
		// A cluster without a spec (a corrupt record replaced on delete):
		// its infrastructure is whichever announced provider holds it.
		infraOf = s.observed.KeysUnder(keys.ProviderPrefix)
	}
	for _, p := range infraOf {
		if ic, _, ok := store.Lookup(s.observed, keys.InfraCluster(p, name), func() *capnv1.InfraCluster { return new(capnv1.InfraCluster) }); ok {
			in.Infra = plan.Infra{Exists: true, Ready: ic.GetReady(), Endpoint: ic.GetControlPlaneEndpoint(), Provider: p}
			break
		}
	}
	if sec, _, ok := store.Lookup(s.observed, keys.Secrets(name), func() *capnv1.ClusterSecretsStatus { return new(capnv1.ClusterSecretsStatus) }); ok {
		in.PKIExists = sec.GetPkiReady()
	}
	in.Status, _, _ = store.Lookup(s.observed, keys.Cluster(name), newClusterStatus)
	if in.Providers, err = s.readProviders(ctx, cluster); err != nil {
		return plan.Input{}, nil, false, err
	}
	return in, revs, true, nil
}
