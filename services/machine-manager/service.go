// Package machinemanager is the machine-manager service: it owns each
// machine's life — bootstrap data, the provider's create and delete, the
// node's readiness — and writes the machine's observed status. The life
// itself is the pure Step function; this file is its NATS wiring.
package machinemanager

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/daemon"
)

// Name is the service's name.
const Name = "machine-manager"

// Config configures the machine-manager.
type Config struct {
	Timeouts Timeouts
	Workers  int
	Now      func() time.Time
	Cache    store.CacheOptions
	// HoldProvisioned is how long a machine whose infrastructure came up
	// waits for its node before it is written Provisioned (0:
	// DefaultHoldProvisioned; negative: not at all). A node ready within
	// it takes the machine from Provisioning to Running in one write.
	HoldProvisioned time.Duration
}

// DefaultHoldProvisioned is Config.HoldProvisioned's default.
const DefaultHoldProvisioned = time.Second

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
	// infraUp: "<cluster>.<machine>" → when this process first saw the
	// infrastructure of a Provisioning machine running (HoldProvisioned).
	infraUp sync.Map
	// pending: "<cluster>.<machine>" → when this process first saw a
	// machine with no status (Input.PendingSince).
	pending sync.Map
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

// Name implements daemon.Service.
func (s *Service) Name() string { return Name }

// Flags implements daemon.FlagProvider.
func (s *Service) Flags() []daemon.Flag {
	return []daemon.Flag{
		{Name: "bootstrap-timeout", Env: "CAPN_BOOTSTRAP_TIMEOUT", Usage: "how long a machine may wait for bootstrap data before it fails", Value: daemon.DurationValue(&s.cfg.Timeouts.Bootstrap)},
		{Name: "provisioning-timeout", Env: "CAPN_PROVISIONING_TIMEOUT", Usage: "how long a provider may take to create a machine before it fails", Value: daemon.DurationValue(&s.cfg.Timeouts.Provisioning)},
		{Name: "node-startup-timeout", Env: "CAPN_NODE_STARTUP_TIMEOUT", Usage: "how long a provisioned machine may take to report a ready node before it fails", Value: daemon.DurationValue(&s.cfg.Timeouts.NodeStartup)},
	}
}

// The consumer the machine-manager reads: bootstrap answers. Node reports
// reach it through the health-watcher's node records (node.<cluster>.<machine>).
func bootstrapConsumer() events.ConsumerSpec {
	return events.ConsumerSpec{Stream: events.StreamEvents, Durable: Name + "-bootstrap", DeliverNew: true,
		Filters: []string{events.SubjectEvents + ".bootstrap.ready.>", events.SubjectEvents + ".bootstrap.failed.>",
			events.SubjectEvents + ".bootstrap.waiting.>"},
		Description: "machine-manager: bootstrap data ready, failed or waiting for a bootstrap secret"}
}

// Run implements daemon.Service: a machine's reconcile wakes when its
// desired record, its status, its infrastructure or its node record
// changes, or its bootstrap data is ready; orphaned infrastructure is
// collected in a loop of its own (orphans.go).
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	if err := s.open(ctx, d.JS); err != nil {
		return err
	}
	machines := &reconcile.Controller{
		Watches: []reconcile.Source{
			{Cache: s.desired, Prefixes: []string{keys.MachinePrefix}, Key: machineOf},
			{Cache: s.observed, Prefixes: []string{keys.MachinePrefix, keys.InfraPrefix, keys.NodePrefix}, Key: machineOf},
		},
		Resync:    s.allMachines,
		Consumers: []reconcile.Consumer{{Spec: bootstrapConsumer(), Handler: s.onBootstrap, Concurrency: 4}},
		Reconcile: s.reconcile,
		Workers:   s.cfg.Workers,
		OnError: func(key string, err error, n int) {
			d.Log.Warn().Err(err).Str("machine", key).Int("failures", n).Msg("reconcile failed; will retry")
		},
	}
	orphans := &reconcile.Controller{
		Watches:   []reconcile.Source{{Cache: s.observed, Prefixes: []string{keys.InfraPrefix}, Key: infraKeyOf}},
		Resync:    s.allInfra,
		Reconcile: s.collectOrphan,
		Workers:   2,
		OnError: func(key string, err error, n int) {
			d.Log.Warn().Err(err).Str("infra", key).Int("failures", n).Msg("orphan check failed; will retry")
		},
	}
	return reconcile.Run(ctx, reconcile.Env{JS: d.JS, Log: d.Log, Events: d.Events, Ready: d.Ready.Set}, machines, orphans)
}

// open sets the service's state up on the buckets; Run starts the caches.
func (s *Service) open(ctx context.Context, js jetstream.JetStream) error {
	desiredKV, err := js.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketDesired, err)
	}
	observedKV, err := js.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketObserved, err)
	}
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
	return nil
}

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
