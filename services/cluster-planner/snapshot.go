package clusterplanner

import (
	"context"
	"strings"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/events/store/clusterstate"
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
	st := clusterstate.Read(s.desired, s.observed, clusterstate.Query{Cluster: name,
		Parts: clusterstate.ClusterStatus | clusterstate.Secrets | clusterstate.ClusterInfra | clusterstate.MachineStatuses})
	if st.Cluster == nil {
		if st.ClusterRevision != 0 {
			// A record that does not decode: plan nothing (neither keep
			// nor tear down its machines) until it is deleted.
			log.Warn().Msg("cluster record does not decode; nothing is planned for it until it is deleted (DELETE /v1/clusters/" + name + ")")
		}
		return plan.Input{}, nil, false, nil
	}
	// The planner's one check of the stored spec: the cache's copy is
	// shared, so a copy is defaulted.
	spec := manifest.Validator{MaxPoolReplicas: s.cfg.MaxPoolReplicas, MaxClusterReplicas: s.cfg.MaxClusterReplicas}.
		Check(proto.CloneOf(st.Cluster))
	in = plan.Input{Cluster: st.Cluster, Spec: spec, Machines: map[string]*capnv1.Machine{}, Observed: map[string]*capnv1.MachineStatus{}, Now: s.cfg.Now(),
		MaxActions: s.maxActions(), Status: st.Status, PKIExists: st.Secrets.GetPkiReady()}
	revs = map[string]uint64{}
	for _, u := range st.Unreadable {
		// Retrying cannot mend it and would stop the whole cluster: its
		// name stays taken, the rest is planned.
		n := strings.TrimPrefix(u.Key, keys.MachinesOf(name))
		log.Warn().Err(u.Err).Str("machine", n).Msg("machine record does not decode; left alone")
		in.Unreadable = append(in.Unreadable, n)
	}
	for _, m := range st.Machines {
		in.Machines[m.Name], revs[m.Name] = m.Desired, m.Revision
		if m.Status != nil {
			in.Observed[m.Name] = m.Status
		}
	}
	for _, k := range st.Garbled {
		if n, ok := strings.CutPrefix(k, keys.MachinesOf(name)); ok {
			log.Warn().Str("machine", n).Msg("machine status does not decode; planned as if none were written")
		}
	}
	if st.Infra != nil {
		in.Infra = plan.Infra{Exists: true, Ready: st.Infra.GetReady(), Endpoint: st.Infra.GetControlPlaneEndpoint(), Provider: st.InfraProvider}
	}
	in.Autoscaler = s.autoscalerActions(name, st.Cluster)
	if in.Providers, err = s.readProviders(ctx, st.Cluster); err != nil {
		return plan.Input{}, nil, false, err
	}
	in.Addons = s.addons(name, st.Cluster)
	if rec, _, ok := store.NewView(s.observed, store.New[capnv1.MaintenanceRecord]()).Get(keys.Maintenance(name)); ok {
		in.Maintenance = rec
	}
	in.ClusterRevision = st.ClusterRevision
	if rec, _, ok := store.NewView(s.observed, newControlPlaneRecord).Get(keys.ControlPlane(name)); ok {
		in.ControlPlane = rec
	}
	return in, revs, true, nil
}

// autoscalerActions are the autoscaler's last actions on c's autoscaled
// pools (observed autoscaler.<c>.<pool>), for the pools' status.
func (s *Service) autoscalerActions(name string, c *capnv1.Cluster) map[string]*capnv1.AutoscalerAction {
	var out map[string]*capnv1.AutoscalerAction
	view := store.NewView(s.observed, store.New[capnv1.AutoscalerStatus]())
	for _, p := range c.GetSpec().GetWorkerPools() {
		if p.GetAutoscaling() == nil {
			continue
		}
		if st, _, ok := view.Get(keys.Autoscaler(name, p.GetName())); ok && st.GetLastAction() != nil {
			if out == nil {
				out = map[string]*capnv1.AutoscalerAction{}
			}
			out[p.GetName()] = st.GetLastAction()
		}
	}
	return out
}

// addons are the add-on sets that select the cluster, each with the
// addon-manager's record of it on this cluster (nil before it has one).
func (s *Service) addons(name string, c *capnv1.Cluster) []plan.Addon {
	var out []plan.Addon
	for _, e := range s.desired.List(keys.AddonSetPrefix) {
		set, err := store.Decode(e.Value, newAddonSet)
		if err != nil || !manifest.AddonSetSelects(set, c) {
			continue
		}
		rec, _, _ := store.Lookup(s.observed, keys.Addon(name, set.GetMetadata().GetName()), newAddonRecord)
		out = append(out, plan.Addon{Set: set, Record: rec})
	}
	return out
}

var (
	newAddonSet    = store.New[capnv1.AddonSet]()
	newAddonRecord = store.New[capnv1.ClusterAddonStatus]()

	newControlPlaneRecord = store.New[capnv1.ControlPlaneRecord]()
)
