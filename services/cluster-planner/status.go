package clusterplanner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// errCacheBehind: the cluster's status was last written from a newer view
// of the observed bucket than this replica's cache holds.
var errCacheBehind = errors.New("observed cache behind the cluster status")

// cacheBehindWait is how soon a plan held back by errCacheBehind is tried
// again: the cache is normally milliseconds behind.
const cacheBehindWait = 20 * time.Millisecond

// writeStatus compare-and-sets the cluster's observed status when it
// changed, and records phase changes on the cluster's timeline (reason:
// the phase; message: phaseMsg, what the phase means now). With two
// planner replicas, it writes only from a cache that has seen the status's
// last write (errCacheBehind otherwise), so the status never goes back.
func (s *Service) writeStatus(ctx context.Context, name string, old, st *capnv1.ClusterStatus, phaseMsg string) error {
	if st == nil || proto.Equal(old, st) {
		return nil
	}
	if old != nil && !statusNews(old, st) {
		if wait := s.coalesceWait(name); wait > 0 {
			return coalesced{wait}
		}
	}
	cur, rev, err := s.statuses.Get(ctx, keys.Cluster(name))
	switch {
	case errors.Is(err, store.ErrNotFound):
		_, err = s.statuses.Create(ctx, keys.Cluster(name), st)
	case err != nil:
	case rev > s.observedRev():
		// Another replica wrote the status from a view this replica's
		// cache has not reached: writing now would move the status
		// backwards (a machine's phase, a pool's counts).
		return errCacheBehind
	case proto.Equal(cur, st):
		return nil
	default:
		_, err = s.statuses.Update(ctx, keys.Cluster(name), st, rev)
	}
	if err == nil {
		s.statusWritten.Store(name, s.cfg.Now())
	}
	if err == nil && old.GetPhase() != st.GetPhase() {
		s.event(ctx, name, strings.ToLower(st.GetPhase()), &capnv1.ClusterEvent{Cluster: name, Phase: st.GetPhase(), Reason: st.GetPhase(), Message: phaseMsg}, fmt.Sprint(st.GetObservedGeneration()))
	}
	return err
}

func (s *Service) event(ctx context.Context, cluster, what string, ev *capnv1.ClusterEvent, discriminator string) {
	id := "cluster." + what + "." + cluster + "." + discriminator + "." + s.cfg.Now().UTC().Format(time.RFC3339)
	if _, err := s.pub.Publish(ctx, events.EventSubject("cluster", what, cluster, events.ClusterObject), events.TypeClusterEvent+"."+what, id, ev); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("publish cluster event")
	}
}

// DefaultStatusCoalesce is how often at most a cluster's status is
// rewritten for counts alone (Config.StatusCoalesce).
const DefaultStatusCoalesce = time.Second

// coalesced: the status changed only in what is written at most every
// Config.StatusCoalesce (counts, messages, the time it changed); the plan
// writes it after wait, from what it sees then.
type coalesced struct{ wait time.Duration }

func (c coalesced) Error() string { return fmt.Sprintf("status rewrite coalesced for %s", c.wait) }

// coalesceWait is how long the cluster's next counts-only rewrite waits: 0
// once Config.StatusCoalesce has passed since its last write by this
// process (none known: 0).
func (s *Service) coalesceWait(name string) time.Duration {
	every := s.cfg.StatusCoalesce
	if every == 0 {
		every = DefaultStatusCoalesce
	}
	if every < 0 {
		return 0
	}
	last, ok := s.statusWritten.Load(name)
	if !ok {
		return 0
	}
	return max(0, every-s.cfg.Now().Sub(last.(time.Time)))
}

// statusNews says whether st tells a reader something old does not, beyond
// counts: its phase, generation, endpoint, the control plane's
// initialisation, any condition's status, reason or severity, a pool's
// name, desired size, version or autoscaling, the topology, maintenance
// or hibernation. Those are written at once; counts (replicas, ready,
// updated, available), condition messages and the time of the change are
// coalesced, as Kubernetes controllers batch status updates.
func statusNews(old, st *capnv1.ClusterStatus) bool {
	return !proto.Equal(statusGist(old), statusGist(st))
}

// statusGist is st without what is coalesced.
func statusGist(st *capnv1.ClusterStatus) *capnv1.ClusterStatus {
	g := proto.Clone(st).(*capnv1.ClusterStatus)
	g.Updated = nil
	for _, c := range g.GetConditions() {
		c.Message, c.LastTransitionTime = "", nil
	}
	for _, p := range append([]*capnv1.PoolStatus{g.GetControlPlane()}, g.GetWorkerPools()...) {
		if p != nil {
			p.Replicas, p.Ready, p.Updated, p.Available = 0, 0, 0, 0
		}
	}
	return g
}
