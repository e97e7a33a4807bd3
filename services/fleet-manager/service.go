// Package fleetmanager is the fleet-manager service: it runs rollouts
// (desired rollout.<name>), level-driven from the KV buckets. Each
// reconcile of a rollout reads it, its last status (observed
// rollout.<name>) and what is observed of the clusters it picks, plans
// with the pure wave.Plan, writes the status (compare-and-set), then
// writes the change to the clusters the plan moves (each a
// compare-and-set of the desired cluster) and publishes the wave events.
// Time comes from Config.Now (a fake clock in tests); the maintenance
// windows from Config.Window. See README.md.
package fleetmanager

import (
	"context"
	"fmt"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/services/fleet-manager/wave"
)

// Name is the service's name (its NATS user and program).
const Name = "fleet-manager"

// Defaults.
const (
	DefaultWorkers = 2
	// DefaultTick is how often every unfinished rollout is planned again
	// with nothing changed (soak ends, ready deadlines, windows).
	DefaultTick = 5 * time.Second
)

// Config configures the fleet-manager. Zero fields take the defaults.
type Config struct {
	Workers int
	Tick    time.Duration
	// Now is the clock every decision reads (default time.Now).
	Now func() time.Time
	// Window is the clusters' maintenance windows (default: each
	// cluster's spec.maintenance, schemas/maintenance.Open).
	Window wave.Window
	Cache  store.CacheOptions
}

func (c Config) withDefaults() Config {
	if c.Workers < 1 {
		c.Workers = DefaultWorkers
	}
	if c.Tick <= 0 {
		c.Tick = DefaultTick
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Service is the fleet-manager.
type Service struct {
	cfg      Config
	pub      *events.Publisher
	desired  *store.Cache
	observed *store.Cache
	clusters *store.Bucket[*capnv1.Cluster]
	statuses *store.Bucket[*capnv1.RolloutStatus]
}

var (
	_ daemon.Service      = (*Service)(nil)
	_ daemon.FlagProvider = (*Service)(nil)
)

// New returns the service, as cmd/fleet-manager and capn dev run it.
func New(cfg Config) *Service { return &Service{cfg: cfg.withDefaults()} }

// Name implements daemon.Service.
func (s *Service) Name() string { return Name }

// Flags implements daemon.FlagProvider.
func (s *Service) Flags() []daemon.Flag {
	return []daemon.Flag{
		{Name: "fleet-workers", Env: "CAPN_FLEET_WORKERS", Usage: "rollouts planned in parallel", Value: daemon.IntValue(&s.cfg.Workers)},
		{Name: "fleet-tick", Env: "CAPN_FLEET_TICK", Usage: "how often unfinished rollouts are planned again with nothing changed", Value: daemon.DurationValue(&s.cfg.Tick)},
	}
}

// Run implements daemon.Service.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	s.cfg = s.cfg.withDefaults()
	des, err := d.JS.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketDesired, err)
	}
	obs, err := d.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketObserved, err)
	}
	s.pub = events.NewPublisher(d.JS, "capn/"+Name)
	s.clusters = store.NewBucket(des, store.New[capnv1.Cluster]())
	s.statuses = store.NewBucket(obs, store.New[capnv1.RolloutStatus]())
	s.desired = store.NewCache(des, store.Keep(s.cfg.Cache, d.JS, keys.ClusterPrefix, keys.ClassRevPrefix, keys.RolloutPrefix))
	s.observed = store.NewCache(obs, store.Keep(s.cfg.Cache, d.JS, keys.ClusterPrefix, keys.RemediationPrefix, keys.RolloutPrefix))
	active := func(store.Change) []string { return s.rollouts(false) }
	c := &reconcile.Controller{
		Watches: []reconcile.Source{
			{Cache: s.desired, Prefixes: []string{keys.RolloutPrefix}, Key: rolloutOf},
			{Cache: s.desired, Prefixes: []string{keys.ClusterPrefix}, Changed: active},
			{Cache: s.observed, Prefixes: []string{keys.ClusterPrefix, keys.RemediationPrefix}, Changed: active,
				Tick: func() []string { return s.rollouts(false) }, Every: s.cfg.Tick},
		},
		Resync:    func() []string { return s.rollouts(true) },
		Initial:   func() []string { return s.rollouts(true) },
		Reconcile: s.reconcile,
		Workers:   s.cfg.Workers,
		OnError:   reconcile.LogFailures(d.Log, "rollout", "rollout step not done; will retry"),
	}
	return reconcile.Run(ctx, reconcile.Env{JS: d.JS, Log: d.Log, Events: d.Events, Ready: d.Ready.Set}, c)
}

func rolloutOf(key string) string {
	k, err := keys.Parse(key)
	if err != nil || k.Kind != keys.KindRollout {
		return ""
	}
	return k.Name
}

// rollouts are the rollouts to plan: every one (all), or those not
// finished (Completed or Aborted in their status).
func (s *Service) rollouts(all bool) []string {
	var out []string
	for _, k := range s.desired.KeysUnder(keys.RolloutPrefix) {
		name := k
		if !all {
			if e, ok := s.observed.Get(keys.Rollout(name)); ok {
				if st, err := store.Decode(e.Value, store.New[capnv1.RolloutStatus]()); err == nil &&
					(st.GetPhase() == wave.PhaseCompleted || st.GetPhase() == wave.PhaseAborted) {
					continue
				}
			}
		}
		out = append(out, name)
	}
	return out
}
