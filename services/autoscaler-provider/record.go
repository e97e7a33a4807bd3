package autoscalerprovider

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store/clusterstate"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// EventEntity is the entity of the autoscaler's facts:
// capn.evt.autoscaler.<what>.<cluster>._, <what> the reason in kebab case
// (scaled-up, deleted-nodes, decreased-target-size).
const EventEntity = "autoscaler"

// EventType is their CloudEvents type.
const EventType = "dev.capn.autoscaler."

// record keeps what the autoscaler did to a pool (rev: the desired
// cluster's revision the change made): the pool's AutoscalerStatus
// (observed autoscaler.<cluster>.<pool>, which the planner shows in the
// pool's status) and an AutoscalerEvent on the cluster's timeline, with
// an id of the change (a repeated publish is stored once). The change is
// made already: a failure here is logged, not returned (the autoscaler
// would make it again).
func (s *Service) record(ctx context.Context, cluster, pool string, rev uint64, a *capnv1.AutoscalerAction) {
	log := zerolog.Ctx(ctx).With().Str("cluster", cluster).Str("pool", pool).Str("reason", a.GetReason()).Logger()
	a.Time = timestamppb.New(s.cfg.Now())
	log.Info().Int32("from", a.GetFrom()).Int32("to", a.GetTo()).Strs("machines", a.GetMachines()).Msg(a.GetMessage())
	s.metrics.actions.WithLabelValues(a.GetReason()).Inc()
	if _, _, err := s.statuses.Mutate(ctx, keys.Autoscaler(cluster, pool), func(st *capnv1.AutoscalerStatus, _ bool) (*capnv1.AutoscalerStatus, error) {
		st.Cluster, st.Pool, st.LastAction = cluster, pool, a
		return st, nil
	}); err != nil {
		log.Warn().Err(err).Msg("autoscaler action not recorded in the pool's status")
	}
	ev := &capnv1.AutoscalerEvent{Cluster: cluster, Pool: pool, Reason: a.GetReason(), Message: a.GetMessage(),
		From: a.GetFrom(), To: a.GetTo(), Machines: a.GetMachines()}
	what := kebab(a.GetReason())
	id := fmt.Sprintf("autoscaler-%s-%s-%d", cluster, pool, rev)
	if _, err := s.pub.Publish(ctx, events.EventSubject(EventEntity, what, cluster, keys.ClusterObject), EventType+what, id, ev); err != nil {
		log.Warn().Err(err).Msg("autoscaler event not published")
	}
}

var upper = regexp.MustCompile(`[A-Z]`)

// kebab is "DeletedNodes" as "deleted-nodes".
func kebab(s string) string {
	return strings.TrimPrefix(upper.ReplaceAllStringFunc(s, func(u string) string { return "-" + strings.ToLower(u) }), "-")
}

// clusterMembers are a cluster's machines as the caches hold them, with
// their status and infrastructure (for provider ids).
func (s *Service) clusterMembers(_ context.Context, cluster string) ([]member, error) {
	st := clusterstate.Read(s.desired, s.observed, clusterstate.Query{Cluster: cluster, Parts: clusterstate.MachineStatuses | clusterstate.MachineInfra})
	out := make([]member, 0, len(st.Machines))
	for _, m := range st.Machines {
		out = append(out, member{name: m.Name, desired: m.Desired, rev: m.Revision, status: m.Status, infra: m.Infra})
	}
	return out, nil
}

// poolMembers are clusterMembers of one pool.
func (s *Service) poolMembers(ctx context.Context, cluster, pool string) ([]member, error) {
	all, err := s.clusterMembers(ctx, cluster)
	var out []member
	for _, m := range all {
		if m.desired.GetSpec().GetPool() == pool {
			out = append(out, m)
		}
	}
	return out, err
}
