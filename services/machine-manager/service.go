// Package machinemanager is the machine-manager service: it owns each
// machine's life — bootstrap data, the provider's create and delete, the
// node's readiness — and writes the machine's observed status. The life
// itself is the pure Step function; this file is its NATS wiring.
package machinemanager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/runtime"
)

// Name is the service's name.
const Name = "machine-manager"

// Config configures the machine-manager.
type Config struct {
	Timeouts Timeouts
	Workers  int
	Now      func() time.Time
	Cache    store.CacheOptions
}

// Service is the machine-manager.
type Service struct {
	cfg      Config
	pub      *events.Publisher
	desired  *store.Cache
	observed *store.Cache
	statuses *store.Bucket[*capnv1.MachineStatus]
	// machines and infras read desired machine.* and observed infra.*
	// directly, to confirm an absence the caches report before acting on
	// it (store.LookupConfirmed): with two replicas a cache may not yet
	// hold what the other replica's provider or planner wrote.
	machines *store.Bucket[*capnv1.Machine]
	infras   *store.Bucket[*capnv1.InfraMachine]
	// desiredView and observedView are what reconcile reads the caches
	// through (the caches themselves; a test's may miss keys).
	desiredView, observedView store.Getter
	queue                     *reconcile.Queue
}

// New returns the service.
func New(cfg Config) *Service {
	if cfg.Workers < 1 {
		cfg.Workers = 8
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg}
}

// Name implements runtime.Service.
func (s *Service) Name() string { return Name }

// Flags implements runtime.FlagProvider.
func (s *Service) Flags() []runtime.Flag {
	return []runtime.Flag{
		{Name: "bootstrap-timeout", Env: "CAPN_BOOTSTRAP_TIMEOUT", Usage: "how long a machine may wait for bootstrap data before it fails", Value: runtime.DurationValue(&s.cfg.Timeouts.Bootstrap)},
		{Name: "provisioning-timeout", Env: "CAPN_PROVISIONING_TIMEOUT", Usage: "how long a provider may take to create a machine before it fails", Value: runtime.DurationValue(&s.cfg.Timeouts.Provisioning)},
		{Name: "node-startup-timeout", Env: "CAPN_NODE_STARTUP_TIMEOUT", Usage: "how long a provisioned machine may take to report a ready node before it fails", Value: runtime.DurationValue(&s.cfg.Timeouts.NodeStartup)},
	}
}

// The consumer the machine-manager reads: bootstrap answers. Node reports
// reach it through the health-watcher's node records (node.<cluster>.<machine>).
func bootstrapConsumer() events.ConsumerSpec {
	return events.ConsumerSpec{Stream: events.StreamEvents, Durable: Name + "-bootstrap", DeliverNew: true,
		Filters:     []string{events.SubjectEvents + ".bootstrap.ready.>", events.SubjectEvents + ".bootstrap.failed.>"},
		Description: "machine-manager: bootstrap data ready or failed"}
}

// Run implements runtime.Service.
func (s *Service) Run(ctx context.Context, d *runtime.Deps) error {
	desiredKV, err := d.JS.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketDesired, err)
	}
	observedKV, err := d.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketObserved, err)
	}
	if err := s.start(ctx, d.JS, desiredKV, observedKV); err != nil {
		return err
	}
	s.queue = reconcile.NewQueue()
	var wg sync.WaitGroup
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	for _, sub := range []*store.Subscription{
		s.desired.Subscribe(keys.MachinePrefix), s.observed.Subscribe(keys.MachinePrefix), s.observed.Subscribe(keys.InfraPrefix),
		s.observed.Subscribe(keys.NodePrefix),
	} {
		run(func() { reconcile.Watch(ctx, s.queue, sub, machineOf, s.allMachines) })
	}
	loop := &reconcile.Loop{Queue: s.queue, Reconciler: reconcile.Func(s.reconcile), Workers: s.cfg.Workers,
		OnError: func(key string, err error, n int) {
			d.Log.Warn().Err(err).Str("machine", key).Int("failures", n).Msg("reconcile failed; will retry")
		}}
	run(func() { loop.Run(log(ctx, d.Log)) })
	// Orphaned infrastructure (orphans.go), in a queue of its own.
	orphans := reconcile.NewQueue()
	infraSub := s.observed.Subscribe(keys.InfraPrefix)
	run(func() {
		reconcile.Watch(ctx, orphans, infraSub, infraKeyOf, func() []string {
			var infra []string
			for _, k := range s.observed.KeysUnder(keys.InfraPrefix) {
				if k := infraKeyOf(keys.InfraPrefix + k); k != "" {
					infra = append(infra, k)
				}
			}
			return infra
		})
	})
	collector := &reconcile.Loop{Queue: orphans, Reconciler: reconcile.Func(s.collectOrphan), Workers: 2,
		OnError: func(key string, err error, n int) {
			d.Log.Warn().Err(err).Str("infra", key).Int("failures", n).Msg("orphan check failed; will retry")
		}}
	run(func() { collector.Run(log(ctx, d.Log)) })
	errc := make(chan error, 2)
	for _, c := range []*events.Consumer{
		events.NewConsumer(d.JS, bootstrapConsumer(), s.onBootstrap, events.WithLogger(d.Log), events.WithMetrics(d.Events), events.WithConcurrency(4)),
	} {
		run(func() { errc <- c.Run(ctx) })
	}
	d.Ready.Set(true)
	wg.Wait()
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// start sets the service's state up on the buckets and fills its caches.
func (s *Service) start(ctx context.Context, js jetstream.JetStream, desiredKV, observedKV jetstream.KeyValue) error {
	s.pub = events.NewPublisher(js, "capn/"+Name)
	s.statuses = store.NewBucket(observedKV, newStatus)
	s.machines = store.NewBucket(desiredKV, newMachine)
	s.infras = store.NewBucket(observedKV, newInfra)
	s.desired = store.NewCache(desiredKV, s.cfg.Cache)
	s.observed = store.NewCache(observedKV, store.Keep(s.cfg.Cache, js, keys.MachinePrefix, keys.InfraPrefix, keys.NodePrefix))
	if s.desiredView == nil {
		s.desiredView = s.desired
	}
	if s.observedView == nil {
		s.observedView = s.observed
	}
	for _, c := range []*store.Cache{s.desired, s.observed} {
		if err := c.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

func log(ctx context.Context, l zerolog.Logger) context.Context { return l.WithContext(ctx) }

// machineOf maps a watched key to the machine it concerns, "<cluster>.<machine>".
func machineOf(key string) string {
	if k, err := keys.Parse(key); err == nil && k.Machine() && k.Kind != keys.KindBootstrap {
		return k.Cluster + "." + k.Name
	}
	return ""
}

// allMachines is every machine known desired or observed.
func (s *Service) allMachines() []string {
	return append(s.desired.KeysUnder(keys.MachinePrefix), s.observed.KeysUnder(keys.MachinePrefix)...)
}
