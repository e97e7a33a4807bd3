package gateway

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/daemon"
)

// Name is the service's name.
const Name = "gateway"

// Defaults of Options.
const (
	DefaultAddr      = "127.0.0.1:8080"
	DefaultRateLimit = 50 // requests per second per principal
	DefaultRateBurst = 100
	DefaultHeartbeat = 15 * time.Second
	// DefaultWatchRing is how many recent watch events are kept to resume
	// streams from; DefaultWatchBuffer how many may wait for one stream.
	DefaultWatchRing   = 4096
	DefaultWatchBuffer = 256
	// DefaultMaxStreams caps the watch and timeline streams open at once,
	// DefaultMaxStreamsPerToken those of one token (or one anonymous
	// client address).
	DefaultMaxStreams         = 1024
	DefaultMaxStreamsPerToken = 32
	// DefaultAuthFailureRate is the sustained failed authentications per
	// second allowed from one client address, DefaultAuthFailureBurst the
	// burst above it; past them, 429 until the bucket refills.
	DefaultAuthFailureRate  = 1
	DefaultAuthFailureBurst = 10
	// DefaultReadTimeout bounds reading a request, its body included: a
	// body that comes slower is answered 408.
	DefaultReadTimeout = time.Minute
)

// HTTP server timeouts. Streams (SSE) lift the read and write deadlines
// and bound each write instead.
const (
	readHeaderTimeout = 10 * time.Second
	writeTimeout      = 2 * time.Minute
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 256 << 10
)

// Limits are the request size limits; a zero field takes its default.
type Limits struct {
	// ManifestBytes bounds an apply's manifest (default 1 MiB).
	ManifestBytes int64
	// RequestBytes bounds the JSON body of scale, upgrade, pause, resume and
	// delete (default 64 KiB).
	RequestBytes int64
	// IngestRequestBytes bounds a POST /v1/events body (default 1 MiB) and
	// IngestEventBytes each event in it (default 256 KiB).
	IngestRequestBytes int64
	IngestEventBytes   int64
	// RestoreBytes bounds a backup file sent to POST /v1/restores
	// (default 256 MiB).
	RestoreBytes int64
}

func (l Limits) withDefaults() Limits {
	def := func(p *int64, v int64) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&l.ManifestBytes, 1<<20)
	def(&l.RequestBytes, 64<<10)
	def(&l.IngestRequestBytes, 1<<20)
	def(&l.IngestEventBytes, 256<<10)
	def(&l.RestoreBytes, 256<<20)
	return l
}

// Options configure the gateway. The zero value serves on DefaultAddr and
// needs tokens (TokensFile or Tokens) or AllowAnonymous.
type Options struct {
	// Addr is the host:port the API listens on (default DefaultAddr).
	Addr string
	// Listener, when set, is served instead of listening on Addr (tests;
	// systemd sockets). The service closes it.
	Listener net.Listener
	// TokensFile holds bearer tokens (see ParseTokens); Tokens are more,
	// given in code (capn dev's admin token).
	TokensFile string
	Tokens     []Token
	// AllowAnonymous serves requests without an Authorization header with
	// scopes read, write and ingest, never secrets. For local use only.
	AllowAnonymous bool
	// Keyring opens the sealed kubeconfigs of the secrets bucket. When nil
	// it is loaded from SecretsKeyFile, else from CAPN_SECRETS_KEY, with
	// OldSecretsKeyFiles (comma-separated) for values sealed before a key
	// rotation; with no key at all the kubeconfig endpoint answers 503.
	Keyring            *seal.Keyring
	SecretsKeyFile     string
	OldSecretsKeyFiles string
	// RateLimit is the sustained requests per second of one token (or one
	// client address when anonymous), RateBurst the burst above it. 0
	// means the default; a negative RateLimit disables rate limiting.
	RateLimit float64
	RateBurst int
	// AuthFailureRate and AuthFailureBurst limit failed authentications
	// per client address (0: the defaults; a negative rate disables it).
	AuthFailureRate  float64
	AuthFailureBurst int
	// MaxStreams and MaxStreamsPerToken cap the open streams (GET
	// /v1/watch, GET .../events?follow=true) in total and per token (per
	// address when anonymous); 0 means the default.
	MaxStreams, MaxStreamsPerToken int
	// AllowedHosts are more host names the gateway answers to (the Host
	// header; a proxy's or DNS name), comma-separated; "*" allows any.
	// The listen address's own names are always allowed.
	AllowedHosts string
	// ReadTimeout bounds reading a request with its body (default
	// DefaultReadTimeout).
	ReadTimeout time.Duration
	Limits      Limits
	// MaxPoolReplicas and MaxClusterReplicas bound what apply accepts (0:
	// manifest's defaults, 1,000 a pool and 5,000 a cluster); keep them the
	// cluster-planner's.
	MaxPoolReplicas, MaxClusterReplicas int
	// Heartbeat is the interval of SSE heartbeat comments and watch
	// bookmarks (default 15s).
	Heartbeat time.Duration
	// WatchRing and WatchBuffer size the watch hub (see the defaults).
	WatchRing, WatchBuffer int
	// Cache configures the watch caches of the desired and observed
	// buckets (tests shorten resyncs).
	Cache store.CacheOptions
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Service is the gateway: daemon.Service, FlagProvider and Validator.
// Build it with New.
type Service struct {
	opts Options

	mu  sync.Mutex
	url string
}

// New returns the gateway with opts' empty settings defaulted.
func New(opts Options) *Service {
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	if opts.RateLimit == 0 {
		opts.RateLimit = DefaultRateLimit
	}
	if opts.RateBurst == 0 {
		opts.RateBurst = DefaultRateBurst
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.AuthFailureRate == 0 {
		opts.AuthFailureRate = DefaultAuthFailureRate
	}
	if opts.AuthFailureBurst == 0 {
		opts.AuthFailureBurst = DefaultAuthFailureBurst
	}
	if opts.MaxStreams == 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.MaxStreamsPerToken == 0 {
		opts.MaxStreamsPerToken = DefaultMaxStreamsPerToken
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = DefaultReadTimeout
	}
	if opts.WatchRing <= 0 {
		opts.WatchRing = DefaultWatchRing
	}
	if opts.WatchBuffer <= 0 {
		opts.WatchBuffer = DefaultWatchBuffer
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Limits = opts.Limits.withDefaults()
	return &Service{opts: opts}
}

// Name implements daemon.Service.
func (s *Service) Name() string { return Name }

// URL is the API's base URL (http://host:port) once Run listens, else "".
func (s *Service) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// Flags implements daemon.FlagProvider.
func (s *Service) Flags() []daemon.Flag {
	o := &s.opts
	return []daemon.Flag{
		{Name: "addr", Env: "CAPN_GATEWAY_ADDR", Usage: "`address` the API listens on (host:port)", Value: daemon.StringValue(&o.Addr)},
		{Name: "tokens-file", Env: "CAPN_GATEWAY_TOKENS_FILE", Usage: "`file` of bearer tokens, one \"<token> <scope>[,<scope>] [<name>]\" a line (scopes: read, write, ingest, secrets, admin)", Value: daemon.StringValue(&o.TokensFile)},
		{Name: "insecure-allow-anonymous", Env: "CAPN_GATEWAY_INSECURE_ALLOW_ANONYMOUS", Usage: "serve requests without a token with scopes read, write and ingest (never secrets): for local use only", Value: daemon.BoolValue(&o.AllowAnonymous)},
		{Name: "secrets-key-file", Env: "CAPN_SECRETS_KEY_FILE", Usage: "`file` with the key that seals the secrets bucket, to serve kubeconfigs; or set " + seal.KeyEnv, Value: daemon.StringValue(&o.SecretsKeyFile)},
		{Name: "secrets-old-key-files", Env: "CAPN_SECRETS_OLD_KEY_FILES", Usage: "comma-separated `files` of keys being rotated out", Value: daemon.StringValue(&o.OldSecretsKeyFiles)},
		{Name: "rate-limit", Env: "CAPN_GATEWAY_RATE_LIMIT", Usage: "sustained `requests` per second per token (per address when anonymous); negative disables", Value: (*floatValue)(&o.RateLimit)},
		{Name: "rate-burst", Env: "CAPN_GATEWAY_RATE_BURST", Usage: "`requests` a token may make at once above the rate", Value: daemon.IntValue(&o.RateBurst)},
		{Name: "max-pool-replicas", Env: "CAPN_MAX_POOL_REPLICAS", Usage: "most replicas a worker pool may have (0: 1000)", Value: daemon.IntValue(&o.MaxPoolReplicas)},
		{Name: "max-cluster-replicas", Env: "CAPN_MAX_CLUSTER_REPLICAS", Usage: "most machines a cluster may have, control plane and pools (0: 5000)", Value: daemon.IntValue(&o.MaxClusterReplicas)},
		{Name: "max-streams", Env: "CAPN_GATEWAY_MAX_STREAMS", Usage: "`streams` (watch, timeline follow) open at once in total", Value: daemon.IntValue(&o.MaxStreams)},
		{Name: "max-streams-per-token", Env: "CAPN_GATEWAY_MAX_STREAMS_PER_TOKEN", Usage: "`streams` one token (or anonymous address) may hold open", Value: daemon.IntValue(&o.MaxStreamsPerToken)},
		{Name: "read-timeout", Env: "CAPN_GATEWAY_READ_TIMEOUT", Usage: "longest `duration` to read a request with its body (a slower body is answered 408)", Value: daemon.DurationValue(&o.ReadTimeout)},
		{Name: "allowed-hosts", Env: "CAPN_GATEWAY_ALLOWED_HOSTS", Usage: "comma-separated host `names` the gateway answers to besides its listen address (a proxy's or DNS name; * for any)", Value: daemon.StringValue(&o.AllowedHosts)},
	}
}

// Validate implements daemon.Validator: every problem of the settings at
// once.
func (s *Service) Validate() error {
	var errs []error
	if s.opts.Listener == nil {
		if _, port, err := net.SplitHostPort(s.opts.Addr); err != nil || port == "" {
			errs = append(errs, &daemon.FieldError{Flag: "addr", Env: "CAPN_GATEWAY_ADDR", Value: s.opts.Addr, Problem: "must be host:port", Err: err})
		}
	}
	if _, err := s.authenticator(); err != nil {
		errs = append(errs, err)
	}
	if _, err := s.keyring(); err != nil {
		errs = append(errs, err)
	}
	for _, f := range []struct {
		flag, env string
		v         int
	}{
		{"rate-burst", "CAPN_GATEWAY_RATE_BURST", s.opts.RateBurst},
		{"max-streams", "CAPN_GATEWAY_MAX_STREAMS", s.opts.MaxStreams},
		{"max-streams-per-token", "CAPN_GATEWAY_MAX_STREAMS_PER_TOKEN", s.opts.MaxStreamsPerToken},
		{"max-pool-replicas", "CAPN_MAX_POOL_REPLICAS", s.opts.MaxPoolReplicas},
		{"max-cluster-replicas", "CAPN_MAX_CLUSTER_REPLICAS", s.opts.MaxClusterReplicas},
	} {
		if f.v < 0 {
			errs = append(errs, &daemon.FieldError{Flag: f.flag, Env: f.env, Value: strconv.Itoa(f.v), Problem: "must not be negative (0: the default)"})
		}
	}
	return errors.Join(errs...)
}

// authenticator loads the tokens file and checks every token.
func (s *Service) authenticator() (*authenticator, error) {
	toks := append([]Token(nil), s.opts.Tokens...)
	if f := s.opts.TokensFile; f != "" {
		more, err := LoadTokensFile(f)
		if err != nil {
			return nil, &daemon.FieldError{Flag: "tokens-file", Env: "CAPN_GATEWAY_TOKENS_FILE", Value: f, Problem: err.Error(), Err: err}
		}
		toks = append(toks, more...)
	}
	if len(toks) == 0 && !s.opts.AllowAnonymous {
		return nil, &daemon.FieldError{Flag: "tokens-file", Env: "CAPN_GATEWAY_TOKENS_FILE", Value: s.opts.TokensFile,
			Problem: "no way to authenticate: give a tokens file, or --insecure-allow-anonymous for local use"}
	}
	return newAuthenticator(toks, s.opts.AllowAnonymous)
}

// keyring loads the secrets key, if any; nil without one.
func (s *Service) keyring() (*seal.Keyring, error) {
	if s.opts.Keyring != nil {
		return s.opts.Keyring, nil
	}
	return seal.LoadKeyring(s.opts.SecretsKeyFile, s.opts.OldSecretsKeyFiles)
}

// Run implements daemon.Service: it provisions the ingest stream, starts
// the watch caches and hub, and serves the API until ctx ends; then it
// ends the streams, lets requests in flight finish (within the shutdown
// timeout) and returns.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	log := d.Log
	auth, err := s.authenticator()
	if err != nil {
		return err
	}
	auth.sessions = newSessions(s.opts.Now)
	ring, err := s.keyring()
	if err != nil {
		return err
	}
	if !d.Config.SkipProvision {
		if err := events.Provision(ctx, d.JS, Topology(d.Config.Replicas)); err != nil {
			return fmt.Errorf("provision %s: %w", StreamIngest, err)
		}
	}
	desiredKV, err := d.JS.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketDesired, err)
	}
	observedKV, err := d.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketObserved, err)
	}
	m, err := newMetrics(d.Metrics)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	stopping := make(chan struct{})
	srv := &server{
		log: log, nc: d.NC, js: d.JS, auth: auth, pub: events.NewPublisher(d.JS, "capn/"+Name),
		limiter:      newRateLimiter(s.opts.RateLimit, s.opts.RateBurst, s.opts.Now),
		authFailures: newRateLimiter(s.opts.AuthFailureRate, s.opts.AuthFailureBurst, s.opts.Now),
		streams:      newStreamSlots(s.opts.MaxStreamsPerToken, s.opts.MaxStreams),
		limits:       s.opts.Limits, now: s.opts.Now, heartbeat: s.opts.Heartbeat, metrics: m,
		validator:        manifest.Validator{MaxPoolReplicas: s.opts.MaxPoolReplicas, MaxClusterReplicas: s.opts.MaxClusterReplicas},
		clusters:         store.NewBucket(desiredKV, store.New[capnv1.Cluster]()),
		machines:         store.NewBucket(desiredKV, store.New[capnv1.Machine]()),
		clusterStatuses:  store.NewBucket(observedKV, store.New[capnv1.ClusterStatus]()),
		machineStatuses:  store.NewBucket(observedKV, store.New[capnv1.MachineStatus]()),
		secretsStatuses:  store.NewBucket(observedKV, store.New[capnv1.ClusterSecretsStatus]()),
		addonSets:        store.NewBucket(desiredKV, store.New[capnv1.AddonSet]()),
		versions:         store.NewBucket(desiredKV, store.New[capnv1.KubernetesVersions]()),
		addonStatuses:    store.NewBucket(observedKV, store.New[capnv1.ClusterAddonStatus]()),
		controlPlanes:    store.NewBucket(observedKV, store.New[capnv1.ControlPlaneRecord]()),
		scheduleStatuses: store.NewBucket(observedKV, store.New[capnv1.BackupScheduleStatus]()),
		caStatuses:       store.NewBucket(observedKV, store.New[capnv1.CARotationStatus]()),
		certStatuses:     store.NewBucket(observedKV, store.New[capnv1.CertificatesStatus]()),
		classes:          store.NewBucket(desiredKV, store.New[capnv1.ClusterClass]()),
		rollouts:         store.NewBucket(desiredKV, store.New[capnv1.Rollout]()),
		rolloutStatuses:  store.NewBucket(observedKV, store.New[capnv1.RolloutStatus]()),
		stopping:         stopping,
		desiredKV:        desiredKV,
	}
	if ring != nil {
		srv.keyIDs = ring.KeyIDs()
		secretsKV, err := d.JS.KeyValue(ctx, events.BucketSecrets)
		if err != nil {
			return fmt.Errorf("bucket %s: %w", events.BucketSecrets, err)
		}
		srv.kubeconfigs = store.NewBucket[*capnv1.AdminKubeconfig](secretsKV, store.New[capnv1.AdminKubeconfig](), store.WithSealer(ring))
		srv.addonSecrets = store.NewBucket(secretsKV, store.New[capnv1.AddonSecret](), store.WithSealer(ring))
		srv.bootstrapSecrets = store.NewBucket(secretsKV, store.New[capnv1.BootstrapSecret](), store.WithSealer(ring))
		srv.externalKubeconfigs = store.NewBucket(secretsKV, store.New[capnv1.ExternalKubeconfig](), store.WithSealer(ring))
	} else {
		log.Warn().Msg("no secrets key (--secrets-key-file or " + seal.KeyEnv + "): kubeconfigs cannot be served")
	}

	// One cache per bucket feeds the watch hub.
	// The watch serves clusters and machines only.
	desired, observed := store.NewCache(desiredKV, s.opts.Cache), store.NewCache(observedKV, store.Keep(s.opts.Cache, d.JS, keys.ClusterPrefix, keys.MachinePrefix))
	for _, c := range []*store.Cache{desired, observed} {
		if err := c.Start(log.WithContext(ctx)); err != nil {
			return err
		}
	}
	srv.hub = newHub(desired, observed, log, s.opts.WatchRing, s.opts.WatchBuffer, s.opts.Heartbeat)
	hubDone := make(chan struct{})
	go func() { defer close(hubDone); srv.hub.run(ctx) }()
	srv.routes()

	ln := s.opts.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", s.opts.Addr); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	srv.hosts = newHostPolicy(ln.Addr().String(), strings.Split(s.opts.AllowedHosts, ","))
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          stdlog.New(log.With().Str("component", "http").Logger(), "", 0),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	s.mu.Lock()
	s.url = "http://" + ln.Addr().String()
	s.mu.Unlock()
	log.Info().Str("url", s.URL()).Bool("anonymous", s.opts.AllowAnonymous).Bool("kubeconfigs", ring != nil).Msg("gateway listening")
	d.Ready.Set(true)

	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	}
	close(stopping)
	grace := d.Config.ShutdownTimeout * 2 / 3
	if grace <= 0 {
		grace = 5 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn().Err(err).Msg("requests still running at shutdown; closing them")
		_ = hs.Close()
	}
	<-hubDone
	return nil
}

// floatValue binds a float64 setting to a flag.
type floatValue float64

func (v *floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("not a number")
	}
	*v = floatValue(f)
	return nil
}

func (v *floatValue) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 64) }
