// Package bootstrapper is the bootstrapper service: it owns every cluster's
// PKI and admin kubeconfig and answers GenerateBootstrap commands with
// per-machine bootstrap data, all kept sealed in the `secrets` bucket.
// See README.md for the flow and docs/bootstrap.md for the provider contract.
package bootstrapper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/kubeapi"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/clusterkubeconfig"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/builtin"
	"github.com/capn-dev/capn/services/daemon"
)

// Name is the service's name: its NATS client name, durable and source.
const Name = "bootstrapper"

// Config configures the service.
type Config struct {
	// Keyring seals and opens every value in the secrets bucket. Its
	// primary key seals; older keys only open, and values sealed with them
	// are re-sealed at start (key rotation). When nil, it is loaded from
	// KeyFile (or the CAPN_SECRETS_KEY variable) and OldKeyFiles.
	Keyring *seal.Keyring
	// KeyFile holds the primary key (32 bytes, hex or base64).
	KeyFile string
	// OldKeyFiles are comma-separated files of keys being rotated out.
	OldKeyFiles string
	// Registry of bootstrap providers (default: kubeadm and script).
	Registry *bootstrap.Registry
	// Workers reconciling clusters, and handlers of commands at once.
	Workers int
	// Now is the clock (tests set it).
	Now func() time.Time
	// TokenCheckEvery bounds how long a joining machine's token waits
	// before its renewal is considered (default 1 minute).
	TokenCheckEvery time.Duration
	// Cache options for the watch caches (tests shorten resyncs).
	Cache store.CacheOptions
	// JoinTokenBackoff spaces the attempts to register join tokens in a
	// workload cluster whose API server does not answer (default 2s,
	// doubled per failure up to 2m). A change the pass works from (a new
	// bootstrap record, a token renewed or done with, a new kubeconfig)
	// ends the wait.
	JoinTokenBackoff reconcile.Backoff
	// KubeAPITimeout bounds one request to a workload API server
	// (default 10s).
	KubeAPITimeout time.Duration
	// CalloutIssuer, when set, makes the bootstrapper answer the NATS
	// server's auth callout for machine logins (callout.go): it signs the
	// answers and the machines' user JWTs, and is the account nkey the
	// server's auth_callout names as issuer. When nil it is loaded from
	// CalloutIssuerSeedFile; with neither, machines cannot log in as
	// themselves (a server without the callout, e.g. tests).
	CalloutIssuer         nkeys.KeyPair
	CalloutIssuerSeedFile string
	// CalloutAccount is the account machines are placed in (default $G).
	CalloutAccount string
	// MachineJWTTTL is how long a machine's login lasts before it is
	// checked again (default 15 minutes).
	MachineJWTTTL time.Duration
}

// Service is the bootstrapper. Build it with New.
type Service struct {
	cfg Config

	pub      *events.Publisher
	desired  *store.Cache
	observed *store.Cache
	// secrets caches the clusters' PKI and admin kubeconfig records
	// (sealed, as stored): their revisions let ensurePKI and
	// ensureKubeconfig skip re-reading a record they already checked
	// (pkiChecks, adminKCs). Bootstrap data is not cached.
	secrets   *store.Cache
	clusters  *store.Bucket[*capnv1.Cluster] // authoritative reads for commands
	pkis      *store.Bucket[*capnv1.ClusterPKI]
	kubeconfs *store.Bucket[*capnv1.AdminKubeconfig]
	boots     *store.Bucket[*capnv1.BootstrapData]
	// bootSecrets are the bootstrap secrets files take content from
	// (bootstrapsecret.<name>, written by the gateway).
	bootSecrets *store.Bucket[*capnv1.BootstrapSecret]
	statuses    *store.Bucket[*capnv1.ClusterSecretsStatus]
	secretsKV   jetstream.KeyValue
	desiredKV   jetstream.KeyValue // authoritative reads (gone.go)
	queue       *reconcile.Queue
	tokens      tokenMemo
	pkiChecks   pkiChecks
	adminKCs    kubeconfigMemo
	caHashes    caHashMemo
	gone        goneMemo
	joins       *reconcile.Queue // jointokens.go: tokens in the workload clusters
	joinMemo    joinMemo
	issuer      nkeys.KeyPair         // callout.go; nil: no auth callout
	workload    *kubeapi.ClusterCache // the workload clusters' API clients and backoff
}

// New returns the service; its key is loaded by Run unless cfg.Keyring is set.
func New(cfg Config) *Service {
	if cfg.Registry == nil {
		cfg.Registry = builtin.Registry()
	}
	if cfg.Workers < 1 {
		cfg.Workers = 4
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TokenCheckEvery == 0 {
		cfg.TokenCheckEvery = time.Minute
	}
	if cfg.JoinTokenBackoff.Base <= 0 {
		cfg.JoinTokenBackoff = DefaultJoinTokenBackoff
	}
	if cfg.JoinTokenBackoff.Max < cfg.JoinTokenBackoff.Base {
		cfg.JoinTokenBackoff.Max = cfg.JoinTokenBackoff.Base
	}
	if cfg.KubeAPITimeout <= 0 {
		cfg.KubeAPITimeout = DefaultKubeAPITimeout
	}
	if cfg.CalloutAccount == "" {
		cfg.CalloutAccount = DefaultCalloutAccount
	}
	if cfg.MachineJWTTTL <= 0 {
		cfg.MachineJWTTTL = DefaultMachineJWTTTL
	}
	return &Service{cfg: cfg}
}

// Flags implements daemon.FlagProvider.
func (s *Service) Flags() []daemon.Flag {
	return []daemon.Flag{
		{Name: "secrets-key-file", Env: "CAPN_SECRETS_KEY_FILE", Usage: "file with the key that seals the secrets bucket (32 bytes, hex or base64); or set " + seal.KeyEnv + " to the key itself", Value: daemon.StringValue(&s.cfg.KeyFile)},
		{Name: "auth-callout-issuer-seed-file", Env: "CAPN_AUTH_CALLOUT_ISSUER_SEED_FILE", Usage: "`file` with the account nkey seed the NATS server's auth_callout names as issuer: the bootstrapper then logs machines in as themselves (capn-nats-config renders it)", Value: daemon.StringValue(&s.cfg.CalloutIssuerSeedFile)},
		{Name: "auth-callout-account", Env: "CAPN_AUTH_CALLOUT_ACCOUNT", Usage: "NATS `account` machines are placed in (the deployment's account)", Value: daemon.StringValue(&s.cfg.CalloutAccount)},
		{Name: "secrets-old-key-files", Env: "CAPN_SECRETS_OLD_KEY_FILES", Usage: "comma-separated files of keys being rotated out: values sealed with them are re-sealed with the current key at start", Value: daemon.StringValue(&s.cfg.OldKeyFiles)},
	}
}

// Validate implements daemon.Validator: the keys must load.
func (s *Service) Validate() error {
	var errs []error
	if s.cfg.Keyring == nil {
		if _, err := s.loadKeyring(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.cfg.CalloutIssuer == nil && s.cfg.CalloutIssuerSeedFile != "" {
		if _, err := loadCalloutIssuer(s.cfg.CalloutIssuerSeedFile); err != nil {
			errs = append(errs, &daemon.FieldError{Flag: "auth-callout-issuer-seed-file", Env: "CAPN_AUTH_CALLOUT_ISSUER_SEED_FILE", Value: s.cfg.CalloutIssuerSeedFile, Problem: err.Error()})
		}
	}
	return errors.Join(errs...)
}

func (s *Service) loadKeyring() (*seal.Keyring, error) {
	ring, err := seal.LoadKeyring(s.cfg.KeyFile, s.cfg.OldKeyFiles)
	if err == nil && ring == nil {
		return nil, &daemon.FieldError{Flag: "secrets-key-file", Env: "CAPN_SECRETS_KEY_FILE", Problem: "a key to seal the secrets bucket is required: give --secrets-key-file or set " + seal.KeyEnv}
	}
	return ring, err
}

// Name implements daemon.Service.
func (s *Service) Name() string { return Name }

// Run implements daemon.Service: it re-seals values sealed with an old
// key, then keeps every cluster's PKI, kubeconfig and join tokens current
// and answers bootstrap commands until ctx is cancelled.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	log := d.Log
	if s.cfg.Keyring == nil {
		ring, err := s.loadKeyring()
		if err != nil {
			return err
		}
		s.cfg.Keyring = ring
	}
	kv := func(name string) (jetstream.KeyValue, error) { return d.JS.KeyValue(ctx, name) }
	desiredKV, err := kv(events.BucketDesired)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketDesired, err)
	}
	observedKV, err := kv(events.BucketObserved)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketObserved, err)
	}
	s.secretsKV, err = kv(events.BucketSecrets)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketSecrets, err)
	}
	s.desiredKV = desiredKV
	s.clusters = store.NewBucket(desiredKV, store.New[capnv1.Cluster]())
	sealer := store.WithSealer(s.cfg.Keyring)
	s.pkis = store.NewBucket(s.secretsKV, store.New[capnv1.ClusterPKI](), sealer)
	s.kubeconfs = store.NewBucket(s.secretsKV, store.New[capnv1.AdminKubeconfig](), sealer)
	s.workload = kubeapi.NewClusterCache(kubeapi.ClusterCacheConfig{
		// The admin kubeconfig, or an external cluster's registered one.
		Kubeconfig: clusterkubeconfig.New(desiredKV, s.secretsKV, s.cfg.Keyring).Kubeconfig,
		Timeout:    s.cfg.KubeAPITimeout, BackoffBase: s.cfg.JoinTokenBackoff.Base, BackoffMax: s.cfg.JoinTokenBackoff.Max,
	})
	defer s.workload.Close()
	s.boots = store.NewBucket(s.secretsKV, store.New[capnv1.BootstrapData](), sealer)
	s.bootSecrets = store.NewBucket(s.secretsKV, store.New[capnv1.BootstrapSecret](), sealer)
	s.statuses = store.NewBucket(observedKV, store.New[capnv1.ClusterSecretsStatus]())
	s.pub = events.NewPublisher(d.JS, "capn/"+Name)

	if n, err := s.resealAll(ctx); err != nil {
		return fmt.Errorf("re-seal secrets with the current key: %w", err)
	} else if n > 0 {
		log.Info().Int("resealed", n).Str("key_id", s.cfg.Keyring.PrimaryID()).Msg("re-sealed secrets with the current key")
	}

	s.desired = store.NewCache(desiredKV, s.cfg.Cache)
	s.observed = store.NewCache(observedKV, store.Keep(s.cfg.Cache, d.JS, keys.InfraPrefix, keys.MachinePrefix, keys.ProviderPrefix, keys.ControlPlanePrefix))
	s.secrets = store.NewCache(s.secretsKV, store.Keep(s.cfg.Cache, d.JS, keys.PKIPrefix, keys.KubeconfigPrefix))
	for _, c := range []*store.Cache{s.desired, s.observed, s.secrets} {
		if err := c.Start(ctx); err != nil {
			return err
		}
	}
	if err := s.serveFetch(ctx, d.NC, log); err != nil { // fetch.go: node agents fetch their own data
		return err
	}
	if err := s.serveCredentials(ctx, d.NC, log); err != nil { // credential.go: providers get their machines' credentials
		return err
	}
	if err := s.serveHosted(ctx, d.NC, log); err != nil { // hosted.go: the hosted control planes' PKI
		return err
	}
	if s.issuer = s.cfg.CalloutIssuer; s.issuer == nil && s.cfg.CalloutIssuerSeedFile != "" {
		if s.issuer, err = loadCalloutIssuer(s.cfg.CalloutIssuerSeedFile); err != nil {
			return err
		}
	}
	if s.issuer != nil {
		if err := s.serveCallout(ctx, d.NC, log); err != nil { // callout.go: machines log in as themselves
			return err
		}
	}
	s.queue = reconcile.NewQueue()
	s.joins = reconcile.NewQueue()
	ready := func(r bool) {
		d.Ready.Set(r)
		log.Info().Str("key_id", s.cfg.Keyring.PrimaryID()).Strs("bootstrap_providers", s.cfg.Registry.Names()).Msg("bootstrapper running")
	}
	// The caches are started above: fetch, credential and callout requests
	// are answered from them before the loops start.
	return reconcile.Run(ctx, reconcile.Env{JS: d.JS, Log: log, Events: d.Events, Ready: ready,
		Started: []*store.Cache{s.desired, s.observed, s.secrets}}, s.controllers(log)...)
}

// controllers are the bootstrapper's loops: its clusters' secrets and
// status, answering its commands, and the join tokens in the workload
// clusters.
func (s *Service) controllers(log zerolog.Logger) []*reconcile.Controller {
	all := func() []string { return s.desired.KeysUnder(keys.ClusterPrefix) }
	// Anything about a cluster — its spec, its infrastructure's endpoint, a
	// machine joining — wakes that cluster's reconcile. A subscription first
	// replays every current key, so each known cluster is looked at once at
	// start. Of machine statuses only a machine that joined matters here
	// (its token goes), and of infrastructure records only the cluster's
	// (its endpoint), not its machines' (two or more writes per machine);
	// every other change would cost a reconcile for nothing. Machines
	// join in bursts: their changes are coalesced per cluster
	// (machineCoalesce), one reconcile tending all their tokens.
	clusters := &reconcile.Controller{
		Watches: []reconcile.Source{
			{Cache: s.desired, Prefixes: []string{keys.ClusterPrefix}, Key: keys.ClusterOf},
			// A hosted or external control plane's endpoint comes from its
			// record (controlplane.<c>), a machines one's from the infra.
			{Cache: s.observed, Prefixes: []string{keys.InfraPrefix, keys.ControlPlanePrefix}, Key: clusterOfClusterLevel},
			{Cache: s.observed, Prefixes: []string{keys.MachinePrefix}, Key: s.clusterOfJoined, Coalesce: machineCoalesce},
		},
		Resync:    all,
		Consumers: []reconcile.Consumer{{Spec: CommandConsumer(), Handler: s.handleCommand, Concurrency: s.cfg.Workers}},
		Reconcile: s.reconcileCluster,
		Workers:   s.cfg.Workers,
		OnError: func(key string, err error, n int) {
			log.Warn().Err(err).Str("cluster", key).Int("failures", n).Msg("reconcile failed; will retry")
		},
		Queue: s.queue,
	}
	// Join tokens in the workload clusters: a loop of its own, so a
	// workload API server that does not answer holds up nothing above.
	// Its passes are kicked by the cluster reconcile, generate and tendTokens
	// when what they work from changes (ending a backoff), and woken by the
	// cluster's desired machines (one wanted or being deleted); every
	// cluster is looked at once at start.
	joins := &reconcile.Controller{
		Watches: []reconcile.Source{
			{Cache: s.desired, Prefixes: []string{keys.MachinePrefix}, Changed: s.desiredMachineChanged(all)},
			// A provider starting or ceasing to announce real-kubernetes
			// changes which clusters have an API server to ask.
			{Cache: s.observed, Prefixes: []string{keys.ProviderPrefix}, Changed: s.realKubernetesChanged(all)},
		},
		Resync:    all,
		Initial:   all,
		Reconcile: s.reconcileJoinTokens,
		Workers:   s.cfg.Workers,
		OnError: func(key string, err error, n int) {
			log.Warn().Err(err).Str("cluster", key).Int("failures", n).Msg("join-token reconcile failed; will retry")
		},
		Queue: s.joins,
	}
	// New machines' bootstrap data, from their desired spec: no command
	// needed (machines.go).
	machines := &reconcile.Controller{
		Watches:   []reconcile.Source{{Cache: s.desired, Prefixes: []string{keys.MachinePrefix}, Key: machineOf}},
		Resync:    func() []string { return s.desired.KeysUnder(keys.MachinePrefix) },
		Reconcile: s.reconcileMachine,
		Workers:   s.cfg.Workers,
		OnError: func(key string, err error, n int) {
			if n == 1 || n%10 == 0 {
				log.Info().Err(err).Str("machine", key).Int("failures", n).Msg("bootstrap data not generated yet; will retry")
			}
		},
	}
	return []*reconcile.Controller{clusters, joins, machines}
}

// CommandConsumer is the bootstrapper's durable consumer of its commands.
// Bootstrap waits for the control-plane endpoint, so it retries longer
// than the default before giving up.
func CommandConsumer() events.ConsumerSpec {
	return events.ConsumerSpec{
		Stream: events.StreamCommands, Durable: Name,
		Filters:     []string{events.SubjectCommands + ".bootstrap.>"},
		Description: "bootstrapper: generate bootstrap data, clean up a deleted cluster's secrets",
		MaxDeliver:  60,
		Backoff:     []time.Duration{250 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second},
	}
}
