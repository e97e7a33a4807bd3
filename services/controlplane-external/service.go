// Package controlplaneexternal is the external control-plane
// implementation (docs/architecture.md, Control-plane contract): for a
// cluster with controlPlane.type external, someone else runs the control
// plane and capn manages only the workers. The service consumes
// capn.controlplane.external.<verb>.<cluster> (stream CAPN_CONTROLPLANES)
// and is the one writer of the observed controlplane.<cluster> record of
// those clusters:
//
//   - ensure: it reads the desired cluster and the registered kubeconfig
//     it names (sealed externalkubeconfig.<name>), asks the API server its
//     version and the APIs workers need (discovery), prepares the cluster
//     for capn's workers to join with bootstrap tokens (objects.go, with
//     server-side apply as field manager capn) and writes the record:
//     endpoint, version, the kubeconfig's CA, initialized once the server
//     answered, conditions Ready and JoinPrepared with their reasons;
//   - delete: it removes what it created in the external cluster, and only
//     that, then deletes the record.
//
// Every Resync it checks every external cluster again (level-driven): a
// server that went away turns Ready False, a credential that lost its
// RBAC turns JoinPrepared False.
package controlplaneexternal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/daemon"
)

// Name is the service's name (its NATS user, program and durable).
const Name = "controlplane-external"

// Defaults of Config.
const (
	DefaultResync         = 30 * time.Second
	DefaultKubeAPITimeout = 10 * time.Second
	DefaultWorkers        = 4
)

// Config configures the service; zero fields take the defaults.
type Config struct {
	// Keyring opens the registered kubeconfigs (sealed in the secrets
	// bucket); without it SecretsKeyFile or CAPN_SECRETS_KEY must name the
	// key.
	Keyring            *seal.Keyring
	SecretsKeyFile     string
	OldSecretsKeyFiles string
	// Resync is how often every external cluster is checked again
	// (default 30s).
	Resync time.Duration
	// KubeAPITimeout bounds one request to an external API server
	// (default 10s).
	KubeAPITimeout time.Duration
	Workers        int
	Now            func() time.Time
	Cache          store.CacheOptions
}

func (c Config) withDefaults() Config {
	if c.Resync <= 0 {
		c.Resync = DefaultResync
	}
	if c.KubeAPITimeout <= 0 {
		c.KubeAPITimeout = DefaultKubeAPITimeout
	}
	if c.Workers < 1 {
		c.Workers = DefaultWorkers
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Service is the external control-plane implementation.
type Service struct {
	cfg         Config
	desired     *store.Cache
	clusters    *store.Bucket[*capnv1.Cluster]
	records     *store.Bucket[*capnv1.ControlPlaneRecord]
	kubeconfigs *store.Bucket[*capnv1.ExternalKubeconfig]

	// locks serialise the work on one cluster between the consumer's
	// commands and the periodic checks (cluster → *sync.Mutex).
	locks sync.Map
}

var (
	_ daemon.Service      = (*Service)(nil)
	_ daemon.FlagProvider = (*Service)(nil)
	_ daemon.Validator    = (*Service)(nil)
)

// New returns the service, as cmd/controlplane-external and capn dev run it.
func New(cfg Config) *Service { return &Service{cfg: cfg.withDefaults()} }

// Name implements daemon.Service.
func (s *Service) Name() string { return Name }

// Flags implements daemon.FlagProvider.
func (s *Service) Flags() []daemon.Flag {
	return []daemon.Flag{
		{Name: "secrets-key-file", Env: "CAPN_SECRETS_KEY_FILE", Usage: "`file` with the key that seals the secrets bucket, to open registered external kubeconfigs; or set " + seal.KeyEnv, Value: daemon.StringValue(&s.cfg.SecretsKeyFile)},
		{Name: "secrets-old-key-files", Env: "CAPN_SECRETS_OLD_KEY_FILES", Usage: "comma-separated `files` of keys being rotated out", Value: daemon.StringValue(&s.cfg.OldSecretsKeyFiles)},
		{Name: "external-resync", Env: "CAPN_EXTERNAL_RESYNC", Usage: "how often every external control plane is checked again", Value: daemon.DurationValue(&s.cfg.Resync)},
	}
}

// keyring loads the secrets key; an error without one.
func (s *Service) keyring() (*seal.Keyring, error) {
	if s.cfg.Keyring != nil {
		return s.cfg.Keyring, nil
	}
	ring, err := seal.LoadKeyring(s.cfg.SecretsKeyFile, s.cfg.OldSecretsKeyFiles)
	if err == nil && ring == nil {
		err = &daemon.FieldError{Flag: "secrets-key-file", Env: "CAPN_SECRETS_KEY_FILE", Problem: "the key that seals the secrets bucket is required to open registered external kubeconfigs: give --secrets-key-file or set " + seal.KeyEnv}
	}
	return ring, err
}

// Validate implements daemon.Validator.
func (s *Service) Validate() error {
	if s.cfg.Resync != 0 && s.cfg.Resync < 10*time.Millisecond {
		return &daemon.FieldError{Flag: "external-resync", Env: "CAPN_EXTERNAL_RESYNC", Value: s.cfg.Resync.String(), Problem: "must be at least 10ms"}
	}
	_, err := s.keyring()
	return err
}

// CommandConsumer is the service's durable consumer of its commands. A
// delete waits for the external API server to answer (capn must not
// forget what it made there), so it retries for long.
func CommandConsumer() events.ConsumerSpec {
	return events.ConsumerSpec{
		Stream: events.StreamControlPlanes, Durable: Name,
		Filters:     []string{keys.ControlPlaneRoot + "." + capnv1.ControlPlaneExternal + ".>"},
		Description: "controlplane-external: ensure and delete external control planes",
		MaxDeliver:  120,
		Backoff:     []time.Duration{250 * time.Millisecond, time.Second, 5 * time.Second, 15 * time.Second, 30 * time.Second},
	}
}

// Run implements daemon.Service.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	s.cfg = s.cfg.withDefaults() // flags may have zeroed a field
	ring, err := s.keyring()
	if err != nil {
		return err
	}
	kv := map[string]jetstream.KeyValue{}
	for _, b := range []string{events.BucketDesired, events.BucketObserved, events.BucketSecrets} {
		h, err := d.JS.KeyValue(ctx, b)
		if err != nil {
			return fmt.Errorf("bucket %s: %w", b, err)
		}
		kv[b] = h
	}
	s.clusters = store.NewBucket(kv[events.BucketDesired], store.New[capnv1.Cluster]())
	s.records = store.NewBucket(kv[events.BucketObserved], store.New[capnv1.ControlPlaneRecord]())
	s.kubeconfigs = store.NewBucket(kv[events.BucketSecrets], store.New[capnv1.ExternalKubeconfig](), store.WithSealer(ring))
	s.desired = store.NewCache(kv[events.BucketDesired], store.Keep(s.cfg.Cache, d.JS, keys.ClusterPrefix))
	c := &reconcile.Controller{
		Watches: []reconcile.Source{
			// A spec change (another kubeconfig named) is looked at at once;
			// every external cluster again every Resync.
			{Cache: s.desired, Prefixes: []string{keys.ClusterPrefix}, Key: s.externalCluster, Tick: s.externals, Every: s.cfg.Resync},
		},
		Resync:    s.externals,
		Initial:   s.externals,
		Consumers: []reconcile.Consumer{{Spec: CommandConsumer(), Handler: events.Typed(s.onCommand), Concurrency: s.cfg.Workers}},
		Reconcile: func(ctx context.Context, cluster string) (reconcile.Result, error) {
			return reconcile.Result{}, s.ensure(ctx, cluster, 0)
		},
		Workers: s.cfg.Workers,
		OnError: reconcile.LogFailures(d.Log, "cluster", "external control plane not checked; will retry"),
	}
	d.Log.Info().Dur("resync", s.cfg.Resync).Msg("controlplane-external running")
	return c.Run(ctx, reconcile.Env{JS: d.JS, Log: d.Log, Events: d.Events, Ready: d.Ready.Set})
}

// externalCluster maps a desired key to its cluster when its control
// plane is external ("" otherwise: not this implementation's).
func (s *Service) externalCluster(key string) string {
	c, _, ok := store.NewView(s.desired, store.New[capnv1.Cluster]()).Get(key)
	if !ok || c.GetSpec().GetControlPlane().Implementation() != capnv1.ControlPlaneExternal {
		return ""
	}
	return keys.ClusterOf(key)
}

// externals are the desired clusters with an external control plane that
// are not being deleted.
func (s *Service) externals() []string {
	entries, _ := store.NewView(s.desired, store.New[capnv1.Cluster]()).List(keys.ClusterPrefix)
	var out []string
	for _, e := range entries {
		if e.Value.GetSpec().GetControlPlane().Implementation() == capnv1.ControlPlaneExternal && e.Value.GetMetadata().GetDeletionTimestamp() == nil {
			out = append(out, keys.ClusterOf(e.Key))
		}
	}
	return out
}

// lock takes cluster's lock and returns its release.
func (s *Service) lock(cluster string) func() {
	m, _ := s.locks.LoadOrStore(cluster, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// onCommand handles ensure and delete. A subject of another shape, verb
// or implementation is terminated (it can never succeed).
func (s *Service) onCommand(ctx context.Context, m *events.Message, cmd *capnv1.ControlPlaneCommand) error {
	sub, err := keys.ParseSubject(m.Subject)
	if err != nil || sub.Root != keys.ControlPlaneRoot || sub.Entity != capnv1.ControlPlaneExternal {
		return events.Permanent(fmt.Errorf("subject %q: not capn.controlplane.%s.<verb>.<cluster>", m.Subject, capnv1.ControlPlaneExternal))
	}
	if cmd.GetCluster() != "" && cmd.GetCluster() != sub.Cluster {
		return events.Permanent(fmt.Errorf("subject %q names cluster %s, the command %s", m.Subject, sub.Cluster, cmd.GetCluster()))
	}
	switch sub.Verb {
	case keys.ControlPlaneEnsure:
		return s.ensure(ctx, sub.Cluster, cmd.GetGeneration())
	case keys.ControlPlaneDelete:
		return s.delete(ctx, sub.Cluster, cmd)
	}
	return events.Permanent(fmt.Errorf("subject %q: verb %q is not %s or %s", m.Subject, sub.Verb, keys.ControlPlaneEnsure, keys.ControlPlaneDelete))
}

// errGone: the record's cluster is not (or no longer) an external one.
var errGone = errors.New("not an external control plane")
