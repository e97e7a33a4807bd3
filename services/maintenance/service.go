// Package maintenance is the maintenance service: it applies the changes
// capn starts on its own inside a cluster's maintenance windows —
// auto-patch to the newest supported patch of the cluster's minor from
// the KubernetesVersions catalogue, and an upgrade asked for with
// `capn upgrade --respect-window` — and hibernates and wakes clusters on
// their hibernation schedules. The rules are the pure Decide (on
// schemas/maintenance); this package reads the desired clusters and the
// catalogue from a watch cache, writes a cluster's spec with a
// compare-and-set and records what it decided in observed
// maintenance.<cluster>, which the cluster-planner copies into the
// cluster's status. Repairs are the remediator's: nothing here holds
// them. See README.md.
package maintenance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/daemon"
)

// Name is the service's name (and its NATS user's).
const Name = "maintenance"

// DefaultResync is how often every cluster with windows or schedules is
// looked at again, beside the wake-up at its next transition.
const DefaultResync = 30 * time.Second

// Config configures the service; zero fields take the defaults.
type Config struct {
	// Now is the clock every decision reads (default time.Now); tests
	// inject a fake one and advance it.
	Now func() time.Time
	// Resync is how often every cluster with windows or schedules is
	// decided again (default 30s), however far its next transition is.
	Resync  time.Duration
	Workers int
	Cache   store.CacheOptions
	// OnReconcile, if set, is called as each decision of a cluster
	// starts: tests count the service's wake-ups with it.
	OnReconcile func(cluster string)
}

// Service is the maintenance service.
type Service struct {
	cfg      Config
	desired  *store.Cache
	clusters *store.Bucket[*capnv1.Cluster]
	records  *store.Bucket[*capnv1.MaintenanceRecord]
}

var (
	_ daemon.Service      = (*Service)(nil)
	_ daemon.FlagProvider = (*Service)(nil)
	_ daemon.Validator    = (*Service)(nil)
)

// New returns the service, as cmd/maintenance and capn dev run it.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Resync == 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.Workers < 1 {
		cfg.Workers = 2
	}
	return &Service{cfg: cfg}
}

// Name implements daemon.Service.
func (s *Service) Name() string { return Name }

// Flags implements daemon.FlagProvider.
func (s *Service) Flags() []daemon.Flag {
	return []daemon.Flag{
		{Name: "maintenance-resync", Env: "CAPN_MAINTENANCE_RESYNC", Usage: "how often every cluster with maintenance windows or hibernation schedules is decided again", Value: daemon.DurationValue(&s.cfg.Resync)},
	}
}

// Validate implements daemon.Validator.
func (s *Service) Validate() error {
	if s.cfg.Resync < 10*time.Millisecond {
		return &daemon.FieldError{Flag: "maintenance-resync", Env: "CAPN_MAINTENANCE_RESYNC", Value: s.cfg.Resync.String(), Problem: "must be at least 10ms"}
	}
	return nil
}

// Run implements daemon.Service: it decides a cluster when its spec or
// the catalogue changes, at its next transition, and every Resync.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	if err := s.Validate(); err != nil {
		return err
	}
	desiredKV, err := d.JS.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketDesired, err)
	}
	observedKV, err := d.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketObserved, err)
	}
	s.clusters = store.NewBucket(desiredKV, store.New[capnv1.Cluster]())
	s.records = store.NewBucket(observedKV, store.New[capnv1.MaintenanceRecord]())
	s.desired = store.NewCache(desiredKV, store.Keep(s.cfg.Cache, d.JS, keys.ClusterPrefix, keys.K8sVersionsPrefix))
	all := func() []string { return s.scheduled(false) }
	c := &reconcile.Controller{
		Watches: []reconcile.Source{
			{Cache: s.desired, Prefixes: []string{keys.ClusterPrefix}, Key: keys.ClusterOf,
				Tick: all, Every: s.cfg.Resync},
			// A new catalogue may hold a patch for every cluster that opts in.
			{Cache: s.desired, Prefixes: []string{keys.K8sVersionsPrefix}, Changed: func(store.Change) []string { return s.scheduled(true) }},
		},
		Resync:    all,
		Initial:   all,
		Reconcile: s.reconcile,
		Workers:   s.cfg.Workers,
		OnError:   reconcile.LogFailures(d.Log, "cluster", "maintenance not applied; will retry"),
	}
	d.Log.Info().Dur("resync", s.cfg.Resync).Msg("maintenance service running")
	return c.Run(ctx, reconcile.Env{JS: d.JS, Log: d.Log, Events: d.Events, Ready: d.Ready.Set})
}

// scheduled are the clusters with a maintenance spec or hibernation
// schedules (autoPatch: only those that opt in to auto-patch).
func (s *Service) scheduled(autoPatch bool) []string {
	view := store.NewView(s.desired, store.New[capnv1.Cluster]())
	entries, _ := view.List(keys.ClusterPrefix)
	var out []string
	for _, e := range entries {
		spec := e.Value.GetSpec()
		if autoPatch && !spec.GetMaintenance().GetAutoPatch() {
			continue
		}
		if spec.GetMaintenance() != nil || len(spec.GetHibernation().GetSchedules()) > 0 {
			out = append(out, keys.ClusterOf(e.Key))
		}
	}
	return out
}

// errGone stops a spec write: the cluster went away.
var errGone = errors.New("cluster gone")
