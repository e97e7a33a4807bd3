package clusterplanner

import (
	"context"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
)

// providerRecheckEvery is how often the planner looks for announcements
// that went stale without a change (a provider that crashed): their
// clusters are planned again then.
const providerRecheckEvery = time.Second

func newAnnouncement() *capnv1.ProviderAnnouncement {
	return new(capnv1.ProviderAnnouncement)
}

// clusterProviders are the providers a cluster's control plane and worker
// pools name.
func clusterProviders(c *capnv1.Cluster) []string {
	var ps []string
	add := func(p string) {
		if p != "" && !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	add(c.GetSpec().GetControlPlane().GetProvider())
	for _, wp := range c.GetSpec().GetWorkerPools() {
		add(wp.GetProvider())
	}
	return ps
}

// readProviders reads the announcements of the providers cluster names. An
// absence is confirmed from the bucket (a replica's cache may lag another's
// write); a failed read is an error: the plan waits rather than refusing
// the cluster on a guess.
func (s *Service) readProviders(ctx context.Context, cluster *capnv1.Cluster) (map[string]*capnv1.ProviderAnnouncement, error) {
	out := map[string]*capnv1.ProviderAnnouncement{}
	for _, p := range clusterProviders(cluster) {
		a, _, ok, err := store.LookupConfirmed(ctx, s.observed, s.announcements, keys.Provider(p))
		if err != nil {
			return nil, err
		}
		if ok {
			out[p] = a
		}
	}
	return out, nil
}

// providerState is what the planner last made of one provider's
// announcement: whether it runs, and what it can do.
type providerState struct {
	alive bool
	caps  string
	at    time.Time // the announcement's time
}

// watchProviders plans again the clusters that name a provider whenever
// what its announcement says changes: it appears, is withdrawn, changes its
// capabilities, or goes stale without a write (a provider that crashed; found
// by a recheck every providerRecheckEvery). A refresh that changes nothing
// but the time wakes no cluster.
func (s *Service) watchProviders(ctx context.Context, sub *store.Subscription) {
	defer sub.Unsubscribe()
	known := map[string]providerState{}
	wake := func(provider string, st providerState, present bool) {
		old, had := known[provider]
		if present {
			known[provider] = st
		} else {
			delete(known, provider)
		}
		if had == present && old.alive == st.alive && old.caps == st.caps {
			return
		}
		for _, e := range s.desired.List(keys.ClusterPrefix) {
			c, err := store.Decode(e.Value, func() *capnv1.Cluster { return new(capnv1.Cluster) })
			if err == nil && slices.Contains(clusterProviders(c), provider) {
				s.queue.Add(strings.TrimPrefix(e.Key, keys.ClusterPrefix))
			}
		}
	}
	tick := time.NewTicker(providerRecheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ch, ok := <-sub.C():
			if !ok {
				return
			}
			if ch.Resync {
				continue
			}
			provider := strings.TrimPrefix(ch.Key, keys.ProviderPrefix)
			if ch.Op == store.OpDelete {
				wake(provider, providerState{}, false)
				continue
			}
			a, err := store.Decode(ch.Value, newAnnouncement)
			if err != nil {
				wake(provider, providerState{}, false)
				continue
			}
			caps := slices.Clone(a.GetCapabilities())
			slices.Sort(caps)
			wake(provider, providerState{alive: plan.ProviderAlive(a, s.cfg.Now()), caps: strings.Join(caps, ","), at: a.GetTime().AsTime()}, true)
		case <-tick.C:
			now := s.cfg.Now()
			for p, st := range known {
				if st.alive && !plan.ProviderAlive(&capnv1.ProviderAnnouncement{Time: timestamppb.New(st.at)}, now) {
					st.alive = false
					wake(p, st, true)
				}
			}
		}
	}
}
