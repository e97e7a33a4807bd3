// Package remediator is the remediator service: it repairs machines the
// health-watcher judged unhealthy — a reboot where the provider can, a
// replacement otherwise or when the reboot did not help — guarded by a
// max-unhealthy circuit breaker per pool, a bound on repairs in flight, a
// minimum healthy period per slot and etcd quorum protection for the
// control plane. The decision is the pure Decide; this package's service
// reads state from the watch caches, writes the pool's RemediationStatus
// (observed remediation.<cluster>.<pool>) and then acts. See README.md.
package remediator

import (
	"context"
	"fmt"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/daemon"
)

// Name is the service's name.
const Name = "remediator"

// Config configures the remediator. Zero fields take the defaults.
type Config struct {
	Timing Timing
	// Policy is what an unset field of a cluster's health policy becomes
	// (its zero fields: policy.Default()'s) — the health-watcher's must be
	// the same.
	Policy  policy.Defaults
	Workers int
	Now     func() time.Time
	Cache   store.CacheOptions
	// OnReconcile, if set, is called as each reconcile of a cluster
	// starts: tests count the remediator's wake-ups with it.
	OnReconcile func(cluster string)
}

// Service is the remediator.
type Service struct {
	cfg      Config
	pub      *events.Publisher
	desired  *store.Cache
	observed *store.Cache
	machines *store.Bucket[*capnv1.Machine]
	statuses *store.Bucket[*capnv1.RemediationStatus]
	queue    *reconcile.Queue
	metrics  *metrics
	seen     *healthTimes
	verdicts *verdicts
}

var (
	_ daemon.Service      = (*Service)(nil)
	_ daemon.FlagProvider = (*Service)(nil)
)

// New returns the service, as cmd/remediator and capn dev run it.
func New(cfg Config) *Service {
	if cfg.Workers < 1 {
		cfg.Workers = 4
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Timing = cfg.Timing.withDefaults()
	cfg.Policy = cfg.Policy.Fill()
	return &Service{cfg: cfg}
}

// Name implements daemon.Service.
func (s *Service) Name() string { return Name }

// Flags implements daemon.FlagProvider.
func (s *Service) Flags() []daemon.Flag {
	return []daemon.Flag{
		{Name: "remediation-reboot-timeout", Env: "CAPN_REMEDIATION_REBOOT_TIMEOUT", Usage: "how long a rebooted machine may stay unhealthy before it is replaced", Value: daemon.DurationValue(&s.cfg.Timing.RebootTimeout)},
		{Name: "remediation-min-healthy-period", Env: "CAPN_REMEDIATION_MIN_HEALTHY_PERIOD", Usage: "how long a repaired slot must stay healthy before it is repaired again", Value: daemon.DurationValue(&s.cfg.Timing.MinHealthyPeriod)},
		{Name: "remediation-replace-timeout", Env: "CAPN_REMEDIATION_REPLACE_TIMEOUT", Usage: "how long a replacement may take before it stops counting in flight", Value: daemon.DurationValue(&s.cfg.Timing.ReplaceTimeout)},
	}
}

func unhealthyConsumer() events.ConsumerSpec {
	return events.ConsumerSpec{Stream: events.StreamEvents, Durable: Name + "-unhealthy", DeliverNew: true,
		Filters:     []string{events.EventSubject("machine", "unhealthy", "*", "*")},
		Description: "remediator: machines the health-watcher judged unhealthy"}
}

// Run implements daemon.Service: it reconciles a cluster's pools when
// its spec or a machine changes, or the verdict of a node record does
// (verdictChanged). The health-watcher's machine.unhealthy wakes nothing:
// onUnhealthy keeps when its input arrived, for the latency histogram.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	if err := s.open(ctx, d); err != nil {
		return err
	}
	c := &reconcile.Controller{
		Watches: []reconcile.Source{
			{Cache: s.desired, Prefixes: []string{keys.ClusterPrefix, keys.MachinePrefix}, Key: clusterOf},
			{Cache: s.observed, Prefixes: []string{keys.ClusterPrefix, keys.MachinePrefix}, Key: clusterOf},
			{Cache: s.observed, Prefixes: []string{keys.NodePrefix}, Key: s.verdictChanged},
		},
		Resync:    func() []string { return s.desired.KeysUnder(keys.ClusterPrefix) },
		Consumers: []reconcile.Consumer{{Spec: unhealthyConsumer(), Handler: events.Typed(s.onUnhealthy), Concurrency: 4}},
		Reconcile: s.reconcile,
		Workers:   s.cfg.Workers,
		OnError:   reconcile.LogFailures(d.Log, "cluster", "remediation not applied; will retry"),
		Queue:     s.queue,
	}
	return c.Run(ctx, reconcile.Env{JS: d.JS, Log: d.Log, Events: d.Events, Ready: d.Ready.Set})
}

// open sets the service's state up on the buckets; Run starts the caches.
func (s *Service) open(ctx context.Context, d *daemon.Deps) error {
	desiredKV, err := d.JS.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketDesired, err)
	}
	observedKV, err := d.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketObserved, err)
	}
	s.cfg.Timing = s.cfg.Timing.withDefaults() // flags may have zeroed a field
	s.cfg.Policy = s.cfg.Policy.Fill()
	s.pub = events.NewPublisher(d.JS, "capn/"+Name)
	s.machines = store.NewBucket(desiredKV, store.New[capnv1.Machine]())
	s.statuses = store.NewBucket(observedKV, store.New[capnv1.RemediationStatus]())
	s.desired = store.NewCache(desiredKV, s.cfg.Cache)
	s.observed = store.NewCache(observedKV, store.Keep(s.cfg.Cache, d.JS, keys.ClusterPrefix, keys.MachinePrefix, keys.NodePrefix, keys.ProviderPrefix, keys.RemediationPrefix))
	s.queue = reconcile.NewQueue()
	s.metrics = newMetrics(d.Metrics)
	s.seen = newHealthTimes()
	s.verdicts = newVerdicts()
	return nil
}
