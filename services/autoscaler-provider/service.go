// Package autoscalerprovider is the autoscaler-provider service: capn as
// the upstream cluster autoscaler's externalgrpc cloud provider
// (docs/autoscaling.md). It serves the autoscaler's gRPC API
// (schemas/externalgrpc) over mutual TLS, one workload cluster per client
// certificate (secrets/autoscalertls): the node groups are the cluster's
// autoscaled pools; a scale-up raises a pool's replicas in the desired
// cluster with the same compare-and-set write the gateway makes; a
// DeleteNodes marks the named machines capn.dev/delete-machine and then
// lowers replicas by their number, so the planner deletes those machines
// (drained first by the machine-manager) and no other. Every change is
// recorded in observed autoscaler.<cluster>.<pool> (the planner shows it
// in the pool's status) and published as an AutoscalerEvent on the
// cluster's timeline. See README.md.
package autoscalerprovider

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/externalgrpc"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/autoscalertls"
	"github.com/capn-dev/capn/services/daemon"
)

// Name is the service's name (and its NATS user's).
const Name = "autoscaler-provider"

// DefaultListen is where the gRPC API listens unless told otherwise.
const DefaultListen = "127.0.0.1:8086"

// Config configures the service. Zero fields take the defaults.
type Config struct {
	// Listen is the gRPC API's host:port (--autoscaler-listen).
	Listen string
	// TLSCert, TLSKey and TLSClientCA are the files of the server's
	// certificate and key and of the CA that verifies the autoscalers'
	// client certificates (autoscalertls; required).
	TLSCert, TLSKey, TLSClientCA string
	// Listener and TLS, when set, replace Listen and the files (tests).
	Listener net.Listener
	TLS      *tls.Config
	Now      func() time.Time
	Cache    store.CacheOptions
	// OnListen, when set, is called with the gRPC API's address once it
	// listens (capn dev, tests).
	OnListen func(addr string)
	// ServeWhenAsked listens only once a cluster has an autoscaled pool
	// (capn dev: no port is opened for clusters that do not ask).
	ServeWhenAsked bool
	// ClientsDir, when set, is an autoscalertls directory (its CA):
	// for every cluster with an autoscaled pool the service writes the
	// autoscaler's client certificate and --cloud-config there
	// (clients/<cluster>/), pointing at the address it listens on (capn
	// dev; a deployment issues them with capn-nats-config
	// autoscaler-client).
	ClientsDir string
}

// Service is the autoscaler-provider.
type Service struct {
	cfg      Config
	log      zerolog.Logger
	pub      *events.Publisher
	desired  *store.Cache
	observed *store.Cache
	clusters *store.Bucket[*capnv1.Cluster]
	machines *store.Bucket[*capnv1.Machine]
	statuses *store.Bucket[*capnv1.AutoscalerStatus]
	metrics  *metrics
	locks    poolLocks
}

var (
	_ daemon.Service      = (*Service)(nil)
	_ daemon.FlagProvider = (*Service)(nil)
	_ daemon.Validator    = (*Service)(nil)
)

// New returns the service, as cmd/autoscaler-provider and capn dev run it.
func New(cfg Config) *Service {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
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
		{Name: "autoscaler-listen", Env: "CAPN_AUTOSCALER_LISTEN", Usage: "`host:port` the cluster autoscaler's externalgrpc API listens on", Value: daemon.StringValue(&s.cfg.Listen)},
		{Name: "autoscaler-tls-cert", Env: "CAPN_AUTOSCALER_TLS_CERT", Usage: "server certificate `file` (the render's autoscaler/server.crt)", Value: daemon.StringValue(&s.cfg.TLSCert)},
		{Name: "autoscaler-tls-key", Env: "CAPN_AUTOSCALER_TLS_KEY", Usage: "server key `file` (autoscaler/server.key)", Value: daemon.StringValue(&s.cfg.TLSKey)},
		{Name: "autoscaler-tls-client-ca", Env: "CAPN_AUTOSCALER_TLS_CLIENT_CA", Usage: "CA `file` that verifies the autoscalers' client certificates (autoscaler/ca.crt)", Value: daemon.StringValue(&s.cfg.TLSClientCA)},
	}
}

// Validate implements daemon.Validator: mutual TLS is not optional.
func (s *Service) Validate() error {
	if s.cfg.TLS != nil {
		return nil
	}
	var errs []error
	for _, f := range []struct{ flag, env, v string }{
		{"autoscaler-tls-cert", "CAPN_AUTOSCALER_TLS_CERT", s.cfg.TLSCert},
		{"autoscaler-tls-key", "CAPN_AUTOSCALER_TLS_KEY", s.cfg.TLSKey},
		{"autoscaler-tls-client-ca", "CAPN_AUTOSCALER_TLS_CLIENT_CA", s.cfg.TLSClientCA},
	} {
		if f.v == "" {
			errs = append(errs, &daemon.FieldError{Flag: f.flag, Env: f.env, Problem: "required: the autoscaler API is served over mutual TLS only (capn nats-config render and capn dev write the files)"})
		}
	}
	if s.cfg.Listener == nil {
		if _, _, err := net.SplitHostPort(s.cfg.Listen); err != nil {
			errs = append(errs, &daemon.FieldError{Flag: "autoscaler-listen", Env: "CAPN_AUTOSCALER_LISTEN", Value: s.cfg.Listen, Problem: "must be host:port"})
		}
	}
	return errors.Join(errs...)
}

// Run implements daemon.Service: it starts its caches, then serves the
// gRPC API until ctx ends.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	s.log = d.Log
	if err := s.open(ctx, d); err != nil {
		return err
	}
	creds := s.cfg.TLS
	if creds == nil {
		var err error
		if creds, err = autoscalertls.ServerConfig(s.cfg.TLSCert, s.cfg.TLSKey, s.cfg.TLSClientCA); err != nil {
			return err
		}
	}
	lctx := d.Log.WithContext(ctx)
	for _, c := range []*store.Cache{s.desired, s.observed} {
		if err := c.Start(lctx); err != nil {
			return err
		}
	}
	if s.cfg.ServeWhenAsked {
		d.Ready.Set(true)
		d.Log.Info().Msg("the autoscaler API listens once a cluster asks for autoscaling")
		if !s.waitForAutoscaling(ctx) {
			return nil
		}
	}
	ln := s.cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.cfg.Listen); err != nil {
			return fmt.Errorf("autoscaler API: %w", err)
		}
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(creds)), grpc.ChainUnaryInterceptor(s.intercept))
	externalgrpc.RegisterCloudProviderServer(srv, &api{s: s})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	d.Log.Info().Str("addr", ln.Addr().String()).Msg("serving the cluster autoscaler's externalgrpc API (mutual TLS)")
	if s.cfg.OnListen != nil {
		s.cfg.OnListen(ln.Addr().String())
	}
	if s.cfg.ClientsDir != "" {
		go s.issueClients(ctx, ln.Addr().String())
	}
	d.Ready.Set(true)
	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("autoscaler API: %w", err)
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
	}
	return nil
}

// open sets up the buckets and caches; Run starts the caches.
func (s *Service) open(ctx context.Context, d *daemon.Deps) error {
	desiredKV, err := d.JS.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketDesired, err)
	}
	observedKV, err := d.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketObserved, err)
	}
	s.pub = events.NewPublisher(d.JS, "capn/"+Name)
	s.clusters = store.NewBucket(desiredKV, store.New[capnv1.Cluster]())
	s.machines = store.NewBucket(desiredKV, store.New[capnv1.Machine]())
	s.statuses = store.NewBucket(observedKV, store.New[capnv1.AutoscalerStatus]())
	s.desired = store.NewCache(desiredKV, store.Keep(s.cfg.Cache, d.JS, keys.ClusterPrefix, keys.MachinePrefix))
	s.observed = store.NewCache(observedKV, store.Keep(s.cfg.Cache, d.JS, keys.MachinePrefix, keys.InfraPrefix))
	s.metrics = newMetrics(d.Metrics)
	return nil
}
