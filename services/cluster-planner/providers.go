package clusterplanner

import (
	"context"
	"slices"
	"strings"
	"sync"
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
	os    string    // the operating systems it runs, sorted
	at    time.Time // the announcement's time
}

// providerWatch plans again the clusters that name a provider whenever
// what its announcement says changes: it appears, is withdrawn, changes its
// capabilities, or goes stale without a write (a provider that crashed;
// found by recheck every providerRecheckEvery), or changes the operating
// systems it runs. A refresh that changes nothing but the time wakes no
// cluster. It is the Source of the planner's
// provider.* watch: changed and recheck run in goroutines of their own.
type providerWatch struct {
	s     *Service
	mu    sync.Mutex
	known map[string]providerState
}

func newProviderWatch(s *Service) *providerWatch {
	return &providerWatch{s: s, known: map[string]providerState{}}
}

// changed maps a change of a provider's announcement to the clusters to
// plan again (a resync marker wakes none).
func (w *providerWatch) changed(ch store.Change) []string {
	if ch.Resync {
		return nil
	}
	provider := strings.TrimPrefix(ch.Key, keys.ProviderPrefix)
	if ch.Op == store.OpDelete {
		return w.wake(provider, providerState{}, false)
	}
	a, err := store.Decode(ch.Value, store.New[capnv1.ProviderAnnouncement]())
	if err != nil {
		return w.wake(provider, providerState{}, false)
	}
	caps := slices.Clone(a.GetCapabilities())
	slices.Sort(caps)
	systems := slices.Clone(a.GetOperatingSystems())
	slices.Sort(systems)
	return w.wake(provider, providerState{alive: plan.ProviderAlive(a, w.s.cfg.Now()), caps: strings.Join(caps, ","),
		os: strings.Join(systems, ","), at: a.GetTime().AsTime()}, true)
}

// recheck returns the clusters of providers whose announcement went stale
// since it was written.
func (w *providerWatch) recheck() []string {
	now := w.s.cfg.Now()
	var stale []string
	w.mu.Lock()
	for p, st := range w.known {
		if st.alive && !plan.ProviderAlive(&capnv1.ProviderAnnouncement{Time: timestamppb.New(st.at)}, now) {
			st.alive = false
			w.known[p] = st
			stale = append(stale, p)
		}
	}
	w.mu.Unlock()
	var out []string
	for _, p := range stale {
		out = append(out, w.clustersNaming(p)...)
	}
	return out
}

// wake records what provider's announcement says and, if whether it runs
// or what it can do changed, returns the clusters that name it.
func (w *providerWatch) wake(provider string, st providerState, present bool) []string {
	w.mu.Lock()
	old, had := w.known[provider]
	if present {
		w.known[provider] = st
	} else {
		delete(w.known, provider)
	}
	w.mu.Unlock()
	if had == present && old.alive == st.alive && old.caps == st.caps && old.os == st.os {
		return nil
	}
	return w.clustersNaming(provider)
}

// clustersNaming returns the clusters whose spec names provider.
func (w *providerWatch) clustersNaming(provider string) []string {
	var out []string
	for _, e := range w.s.desired.List(keys.ClusterPrefix) {
		c, err := store.Decode(e.Value, store.New[capnv1.Cluster]())
		if err == nil && slices.Contains(clusterProviders(c), provider) {
			out = append(out, strings.TrimPrefix(e.Key, keys.ClusterPrefix))
		}
	}
	return out
}
