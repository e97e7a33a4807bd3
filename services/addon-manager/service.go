// Package addonmanager is the addon-manager service: it applies add-on
// sets (desired addonset.<set>) to the workload clusters their selectors
// pick, with server-side apply as field manager capn, once each cluster's
// control plane is initialised, and records each set's outcome on each
// cluster (observed addon.<cluster>.<set>), which the cluster-planner
// reads for the cluster's AddonsApplied condition. It is Cluster API's
// ClusterResourceSet, done as a capn service: a reconcile loop per
// cluster over the pure Plan, reaching workload API servers through a
// kubeapi.ClusterCache. See README.md.
package addonmanager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/kubeapi"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/clusterkubeconfig"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/daemon"
)

// Name is the service's name (its NATS user and program).
const Name = "addon-manager"

// Defaults.
const (
	DefaultWorkers        = 4
	DefaultKubeAPITimeout = 10 * time.Second
	DefaultBackoffBase    = 5 * time.Second
	DefaultBackoffMax     = 5 * time.Minute
)

// Config configures the addon-manager. Zero fields take the defaults.
type Config struct {
	// Keyring opens the admin kubeconfigs and add-on secrets (sealed in
	// the secrets bucket); without it, SecretsKeyFile or CAPN_SECRETS_KEY
	// must name the key: the service cannot work without one.
	Keyring            *seal.Keyring
	SecretsKeyFile     string
	OldSecretsKeyFiles string
	// Workers reconcile clusters in parallel (default 4).
	Workers int
	// KubeAPITimeout bounds one request to a workload API server
	// (default 10s).
	KubeAPITimeout time.Duration
	// BackoffBase and BackoffMax space the attempts after a failed apply
	// (doubling from 5s, at most 5m).
	BackoffBase, BackoffMax time.Duration
	Now                     func() time.Time
	Cache                   store.CacheOptions
}

func (c Config) withDefaults() Config {
	if c.Workers < 1 {
		c.Workers = DefaultWorkers
	}
	if c.KubeAPITimeout <= 0 {
		c.KubeAPITimeout = DefaultKubeAPITimeout
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = DefaultBackoffBase
	}
	if c.BackoffMax < c.BackoffBase {
		c.BackoffMax = max(DefaultBackoffMax, c.BackoffBase)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// backoff is the wait after n failed attempts in a row.
func (c Config) backoff(n int32) time.Duration {
	d := c.BackoffBase
	for i := int32(1); i < n && d < c.BackoffMax; i++ {
		d *= 2
	}
	return min(d, c.BackoffMax)
}

// Service is the addon-manager.
type Service struct {
	cfg      Config
	ring     *seal.Keyring
	pub      *events.Publisher
	desired  *store.Cache
	observed *store.Cache
	secrets  *store.Cache // addonsecret.*, sealed
	records  *store.Bucket[*capnv1.ClusterAddonStatus]
	// clusterBucket confirms a cluster's absence before its records go.
	clusterBucket *store.Bucket[*capnv1.Cluster]
	clients       *kubeapi.ClusterCache
	metrics       *metrics

	mu   sync.Mutex
	real map[string]bool // providers announcing real-kubernetes
	// written is, per cluster, the observed revision of this replica's
	// last record write: a reconcile waits until the cache has it, so
	// that it never plans from a record older than its own last write
	// (which would apply a set again and lose the compare-and-set).
	written sync.Map // cluster → uint64
}

var (
	_ daemon.Service      = (*Service)(nil)
	_ daemon.FlagProvider = (*Service)(nil)
	_ daemon.Validator    = (*Service)(nil)
)

// New returns the service, as cmd/addon-manager and capn dev run it.
func New(cfg Config) *Service { return &Service{cfg: cfg.withDefaults(), real: map[string]bool{}} }

// Name implements daemon.Service.
func (s *Service) Name() string { return Name }

// Flags implements daemon.FlagProvider.
func (s *Service) Flags() []daemon.Flag {
	return []daemon.Flag{
		{Name: "secrets-key-file", Env: "CAPN_SECRETS_KEY_FILE", Usage: "`file` with the key that seals the secrets bucket, to open admin kubeconfigs and add-on secrets; or set " + seal.KeyEnv, Value: daemon.StringValue(&s.cfg.SecretsKeyFile)},
		{Name: "secrets-old-key-files", Env: "CAPN_SECRETS_OLD_KEY_FILES", Usage: "comma-separated `files` of keys being rotated out", Value: daemon.StringValue(&s.cfg.OldSecretsKeyFiles)},
		{Name: "addon-workers", Env: "CAPN_ADDON_WORKERS", Usage: "clusters reconciled in parallel", Value: daemon.IntValue(&s.cfg.Workers)},
		{Name: "addon-backoff-max", Env: "CAPN_ADDON_BACKOFF_MAX", Usage: "longest wait between attempts of a failing add-on set", Value: daemon.DurationValue(&s.cfg.BackoffMax)},
	}
}

// keyring loads the secrets key (seal.LoadKeyring); an error without one.
func (s *Service) keyring() (*seal.Keyring, error) {
	if s.cfg.Keyring != nil {
		return s.cfg.Keyring, nil
	}
	ring, err := seal.LoadKeyring(s.cfg.SecretsKeyFile, s.cfg.OldSecretsKeyFiles)
	if err == nil && ring == nil {
		err = errors.New("the addon-manager needs the secrets key to open admin kubeconfigs and add-on secrets: --secrets-key-file or " + seal.KeyEnv)
	}
	return ring, err
}

// Validate implements daemon.Validator: the secrets key must load.
func (s *Service) Validate() error {
	_, err := s.keyring()
	return err
}

// Run implements daemon.Service.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	s.cfg = s.cfg.withDefaults() // flags may have zeroed a field
	ring, err := s.keyring()
	if err != nil {
		return err
	}
	s.ring = ring
	kv := map[string]jetstream.KeyValue{}
	for _, b := range []string{events.BucketDesired, events.BucketObserved, events.BucketSecrets} {
		h, err := d.JS.KeyValue(ctx, b)
		if err != nil {
			return fmt.Errorf("bucket %s: %w", b, err)
		}
		kv[b] = h
	}
	s.clients = kubeapi.NewClusterCache(kubeapi.ClusterCacheConfig{
		// The admin kubeconfig, or an external cluster's registered one.
		Kubeconfig: clusterkubeconfig.New(kv[events.BucketDesired], kv[events.BucketSecrets], ring).Kubeconfig,
		Timeout:    s.cfg.KubeAPITimeout, BackoffBase: s.cfg.BackoffBase, BackoffMax: s.cfg.BackoffMax, Now: s.cfg.Now,
	})
	defer s.clients.Close()
	s.pub = events.NewPublisher(d.JS, "capn/"+Name)
	s.records = store.NewBucket(kv[events.BucketObserved], store.New[capnv1.ClusterAddonStatus]())
	s.clusterBucket = store.NewBucket(kv[events.BucketDesired], store.New[capnv1.Cluster]())
	s.desired = store.NewCache(kv[events.BucketDesired], store.Keep(s.cfg.Cache, d.JS, keys.ClusterPrefix, keys.AddonSetPrefix))
	s.observed = store.NewCache(kv[events.BucketObserved], store.Keep(s.cfg.Cache, d.JS, keys.ClusterPrefix, keys.AddonPrefix, keys.ProviderPrefix))
	s.secrets = store.NewCache(kv[events.BucketSecrets], store.Keep(s.cfg.Cache, d.JS, keys.AddonSecretPrefix))
	s.metrics = newMetrics(d.Metrics)
	all := func(store.Change) []string { return s.clusters() }
	c := &reconcile.Controller{
		Watches: []reconcile.Source{
			{Cache: s.desired, Prefixes: []string{keys.ClusterPrefix}, Key: keys.ClusterOf},
			{Cache: s.desired, Prefixes: []string{keys.AddonSetPrefix}, Changed: all},
			{Cache: s.observed, Prefixes: []string{keys.ClusterPrefix}, Key: keys.ClusterOf},
			{Cache: s.observed, Prefixes: []string{keys.ProviderPrefix}, Changed: s.providerChanged},
			{Cache: s.secrets, Prefixes: []string{keys.AddonSecretPrefix}, Changed: all},
		},
		Resync:    s.clusters,
		Initial:   s.clusters,
		Reconcile: s.reconcile,
		Workers:   s.cfg.Workers,
		OnError:   reconcile.LogFailures(d.Log, "cluster", "add-on step not applied; will retry"),
	}
	return reconcile.Run(ctx, reconcile.Env{JS: d.JS, Log: d.Log, Events: d.Events, Ready: d.Ready.Set}, c)
}

// clusters are every cluster to reconcile: those in desired and those
// with records (a cluster gone leaves records to forget).
func (s *Service) clusters() []string {
	out := s.desired.KeysUnder(keys.ClusterPrefix)
	for _, k := range s.observed.KeysUnder(keys.AddonPrefix) {
		if c, _, ok := strings.Cut(k, "."); ok && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// providerChanged wakes every cluster when a provider starts or stops
// announcing real-kubernetes (announcements are rewritten every few
// seconds; only a change of that capability counts), or on a resync.
func (s *Service) providerChanged(ch store.Change) []string {
	if ch.Resync {
		return s.clusters()
	}
	p, ok := strings.CutPrefix(ch.Key, keys.ProviderPrefix)
	if !ok {
		return nil
	}
	real := false
	if ch.Op == store.OpPut {
		if a, err := store.Decode(ch.Value, store.New[capnv1.ProviderAnnouncement]()); err == nil {
			real = slices.Contains(a.GetCapabilities(), clusterkubeconfig.CapabilityRealKubernetes)
		}
	}
	s.mu.Lock()
	changed := s.real[p] != real
	s.real[p] = real
	s.mu.Unlock()
	if changed {
		return s.clusters()
	}
	return nil
}
