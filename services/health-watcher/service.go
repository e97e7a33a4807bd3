// Package healthwatcher is the health-watcher service: it normalises every
// health input of a machine's node — heartbeats, node conditions in
// node-problem-detector's shape, problem events and provider drift reports —
// into one NodeHealth record per machine (observed node.<cluster>.<machine>),
// judges it against the cluster's health policy with the pure Evaluate, and
// publishes a MachineUnhealthy event for each machine that needs repair.
// See README.md.
package healthwatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/kubeapi"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/clusterkubeconfig"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/daemon"
)

// Name is the service's name.
const Name = "health-watcher"

// Config configures the health-watcher. Zero fields take the defaults.
type Config struct {
	// Policy is what an unset field of a cluster's health policy becomes;
	// its zero fields take policy.Default()'s.
	Policy policy.Defaults
	// PersistEvery bounds how stale the last_heartbeat recorded in KV may
	// be (default 5m). Between writes, heartbeats are tracked in memory, so
	// a steady node costs one KV write per PersistEvery, not one per beat.
	PersistEvery time.Duration
	// HeartbeatBatch is how often heartbeats are fetched, each time all
	// that came (default 200ms; events.ConsumerSpec.BatchEvery): the
	// delay a heartbeat may wait, for one wake-up per burst instead of one
	// per heartbeat. Node conditions and problem events are taken at once.
	HeartbeatBatch time.Duration
	// ResyncEvery re-evaluates every cluster at least this often (default
	// 1m), as a safety net for a lost wake-up.
	ResyncEvery time.Duration
	// KeepProblems is how many recent problem events a record keeps
	// (default 10).
	KeepProblems int
	// Workers evaluate clusters in parallel (default 4); Concurrency
	// handles reports in parallel (default 8).
	Workers, Concurrency int
	Now                  func() time.Time
	Cache                store.CacheOptions

	// Reading the Nodes of workload clusters (workload.go). Keyring opens
	// the admin kubeconfigs the bootstrapper seals; without it (nor
	// SecretsKeyFile nor CAPN_SECRETS_KEY) no Node is read.
	Keyring            *seal.Keyring
	SecretsKeyFile     string
	OldSecretsKeyFiles string
	// NodePollEvery is how often a polled cluster's Nodes are read (default
	// 10s); NodeBackoffMax caps the backoff while its API server does not
	// answer (default 2m; it starts at NodePollEvery).
	NodePollEvery, NodeBackoffMax time.Duration
	// NodeDeleteGrace: no Node younger than this is deleted (default 30s).
	NodeDeleteGrace time.Duration
	// KubeAPITimeout bounds one request to a workload API server (default 10s).
	KubeAPITimeout time.Duration
}

func (c Config) withDefaults() Config {
	c.Policy = c.Policy.Fill()
	if c.PersistEvery <= 0 {
		c.PersistEvery = 5 * time.Minute
	}
	if c.HeartbeatBatch <= 0 {
		c.HeartbeatBatch = DefaultHeartbeatBatch
	}
	if c.ResyncEvery <= 0 {
		c.ResyncEvery = time.Minute
	}
	if c.KeepProblems <= 0 {
		c.KeepProblems = 10
	}
	if c.Workers < 1 {
		c.Workers = 4
	}
	if c.Concurrency < 1 {
		c.Concurrency = 8
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NodePollEvery <= 0 {
		c.NodePollEvery = DefaultNodePollEvery
	}
	if c.NodeBackoffMax < c.NodePollEvery {
		c.NodeBackoffMax = max(DefaultNodeBackoffMax, c.NodePollEvery)
	}
	if c.NodeDeleteGrace <= 0 {
		c.NodeDeleteGrace = DefaultNodeDeleteGrace
	}
	if c.KubeAPITimeout <= 0 {
		c.KubeAPITimeout = DefaultKubeAPITimeout
	}
	return c
}

// DefaultHeartbeatBatch is Config.HeartbeatBatch's default.
const DefaultHeartbeatBatch = 200 * time.Millisecond

// Service is the health-watcher.
type Service struct {
	cfg      Config
	pub      *events.Publisher
	desired  *store.Cache
	observed *store.Cache
	nodes    *store.Bucket[*capnv1.NodeHealth]
	queue    *reconcile.Queue
	pending  *pending
	beats    *tracker
	facts    facts
	metrics  *metrics
	started  time.Time
	work     *workload // nil without a secrets key
}

var (
	_ daemon.Service      = (*Service)(nil)
	_ daemon.FlagProvider = (*Service)(nil)
	_ daemon.Validator    = (*Service)(nil)
)

// New returns the service, as cmd/health-watcher and capn dev run it.
func New(cfg Config) *Service { return &Service{cfg: cfg.withDefaults()} }

// Name implements daemon.Service.
func (s *Service) Name() string { return Name }

// Flags implements daemon.FlagProvider: the defaults of the health policy,
// the heartbeat persistence interval, and the secrets key and poll interval
// of the workload clusters' Node reads.
func (s *Service) Flags() []daemon.Flag {
	return []daemon.Flag{
		{Name: "health-node-startup-timeout", Env: "CAPN_HEALTH_NODE_STARTUP_TIMEOUT", Usage: "default node startup timeout of a health policy (0 disables)", Value: daemon.DurationValue(&s.cfg.Policy.NodeStartupTimeout)},
		{Name: "health-heartbeat-grace", Env: "CAPN_HEALTH_HEARTBEAT_GRACE", Usage: "default time a node may stay silent before its Ready condition is Unknown", Value: daemon.DurationValue(&s.cfg.Policy.HeartbeatGrace)},
		{Name: "health-heartbeat-batch", Env: "CAPN_HEALTH_HEARTBEAT_BATCH", Usage: "how often heartbeats are fetched, all that came each time (the longest a heartbeat waits)", Value: daemon.DurationValue(&s.cfg.HeartbeatBatch)},
		{Name: "health-persist-every", Env: "CAPN_HEALTH_PERSIST_EVERY", Usage: "how stale the heartbeat time recorded in KV may get", Value: daemon.DurationValue(&s.cfg.PersistEvery)},
		{Name: "secrets-key-file", Env: "CAPN_SECRETS_KEY_FILE", Usage: "`file` with the key that seals the secrets bucket, to open the admin kubeconfigs and read the Nodes of real-kubernetes clusters; or set " + seal.KeyEnv, Value: daemon.StringValue(&s.cfg.SecretsKeyFile)},
		{Name: "secrets-old-key-files", Env: "CAPN_SECRETS_OLD_KEY_FILES", Usage: "comma-separated `files` of keys being rotated out", Value: daemon.StringValue(&s.cfg.OldSecretsKeyFiles)},
		{Name: "health-node-poll-every", Env: "CAPN_HEALTH_NODE_POLL_EVERY", Usage: "how often the Nodes of a real-kubernetes cluster are read from its API server", Value: daemon.DurationValue(&s.cfg.NodePollEvery)},
		{Name: "health-node-delete-grace", Env: "CAPN_HEALTH_NODE_DELETE_GRACE", Usage: "age under which a Node whose machine is gone or being deleted is not deleted", Value: daemon.DurationValue(&s.cfg.NodeDeleteGrace)},
	}
}

// Consumers of the health-watcher: every health report, and drift reports.
func healthConsumer() events.ConsumerSpec {
	return events.ConsumerSpec{Stream: events.StreamHealth, Durable: Name + "-health",
		Filters:       events.HealthFilters(keys.HealthConditions, keys.HealthProblem),
		MaxAckPending: 4096,
		Description:   "health-watcher: node conditions and problem events"}
}

// heartbeatConsumer takes the heartbeats in bursts (every batch): a steady
// node's heartbeat changes nothing, and one process woken per heartbeat
// cost ~0.3 ms of CPU each where handling one costs 5 µs.
func heartbeatConsumer(batch time.Duration) events.ConsumerSpec {
	return events.ConsumerSpec{Stream: events.StreamHealth, Durable: Name + "-heartbeats",
		Filters:       events.HealthFilters(keys.HealthHeartbeat),
		MaxAckPending: 4096, BatchEvery: batch,
		Description: "health-watcher: heartbeats, in bursts"}
}

func driftConsumer() events.ConsumerSpec {
	return events.ConsumerSpec{Stream: events.StreamEvents, Durable: Name + "-drift", DeliverNew: true,
		Filters:     []string{events.DriftSubject("*", "*", "*")},
		Description: "health-watcher: providers' drift reports"}
}

// Run implements daemon.Service.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	desiredKV, err := d.JS.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketDesired, err)
	}
	observedKV, err := d.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketObserved, err)
	}
	s.cfg = s.cfg.withDefaults() // flags may have zeroed a field
	s.started = s.cfg.Now()
	ring, err := s.keyring()
	if err != nil {
		return err
	}
	if ring != nil {
		secretsKV, err := d.JS.KeyValue(ctx, events.BucketSecrets)
		if err != nil {
			return fmt.Errorf("bucket %s: %w", events.BucketSecrets, err)
		}
		cache := kubeapi.NewClusterCache(kubeapi.ClusterCacheConfig{
			// The admin kubeconfig, or an external cluster's registered one.
			Kubeconfig: clusterkubeconfig.New(desiredKV, secretsKV, ring).Kubeconfig,
			Timeout:    s.cfg.KubeAPITimeout, BackoffBase: s.cfg.NodePollEvery, BackoffMax: s.cfg.NodeBackoffMax,
		})
		defer cache.Close()
		s.work = newWorkload(cache)
	} else {
		d.Log.Warn().Msg("no secrets key (--secrets-key-file or " + seal.KeyEnv + "): the Nodes of real-kubernetes clusters are not read")
	}
	s.pub = events.NewPublisher(d.JS, "capn/"+Name)
	s.nodes = store.NewBucket(observedKV, store.New[capnv1.NodeHealth]())
	s.desired = store.NewCache(desiredKV, s.cfg.Cache)
	s.observed = store.NewCache(observedKV, store.Keep(s.cfg.Cache, d.JS, keys.ClusterPrefix, keys.MachinePrefix, keys.NodePrefix, keys.InfraPrefix, keys.ProviderPrefix))
	s.beats = newTracker()
	s.facts = newFacts(s.desired, s.observed)
	s.metrics = newMetrics(d.Metrics)
	s.queue = reconcile.NewQueue()
	s.pending = newPending()
	cs := []*reconcile.Controller{{
		Watches: []reconcile.Source{
			{Cache: s.desired, Prefixes: []string{keys.ClusterPrefix, keys.MachinePrefix}, Changed: s.changed(false)},
			{Cache: s.observed, Prefixes: []string{keys.ClusterPrefix, keys.MachinePrefix, keys.NodePrefix, keys.InfraPrefix}, Changed: s.changed(true)},
		},
		Consumers: []reconcile.Consumer{
			{Spec: healthConsumer(), Handler: s.onHealth, Concurrency: s.cfg.Concurrency},
			{Spec: heartbeatConsumer(s.cfg.HeartbeatBatch), Handler: s.onHealth, Concurrency: s.cfg.Concurrency},
			{Spec: driftConsumer(), Handler: events.Typed(s.onDrift), Concurrency: s.cfg.Concurrency},
		},
		Reconcile: s.reconcile,
		Workers:   s.cfg.Workers,
		OnError:   reconcile.LogFailures(d.Log, "cluster", "health evaluation not applied; will retry"),
		Queue:     s.queue,
	}}
	if s.work != nil {
		cs = append(cs, &reconcile.Controller{
			Watches: []reconcile.Source{
				{Cache: s.desired, Prefixes: []string{keys.ClusterPrefix, keys.MachinePrefix}, Changed: s.workloadChanged},
				{Cache: s.observed, Prefixes: []string{keys.MachinePrefix, keys.ProviderPrefix}, Changed: s.workloadChanged},
			},
			Reconcile: s.reconcileWorkload,
			Workers:   s.cfg.Workers,
			OnError: func(key string, err error, n int) {
				d.Log.Warn().Err(err).Str("cluster", key).Int("failures", n).Msg("workload Node read not applied; will retry")
			},
			Queue: s.work.queue,
		})
	}
	return reconcile.Run(ctx, reconcile.Env{JS: d.JS, Log: d.Log, Events: d.Events, Ready: d.Ready.Set}, cs...)
}
