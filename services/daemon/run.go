package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
)

// ProfileLabel is the pprof label Run puts on every goroutine of a
// service, with the service's name as its value.
const ProfileLabel = "service"

// labelled makes an in-process connection with the labels of ctx: the
// server's goroutines for it are started from the goroutine that asks.
type labelled struct {
	nats.InProcessConnProvider
	ctx context.Context
}

func (l labelled) InProcessConn() (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		pprof.SetGoroutineLabels(l.ctx)
		c, err := l.InProcessConnProvider.InProcessConn()
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// ErrShutdownTimeout is returned (wrapped) by Run when the service did not
// stop within Config.ShutdownTimeout of its context's cancellation.
var ErrShutdownTimeout = errors.New("did not stop in time")

// Option changes how Run runs a service.
type Option func(*runOptions)

type runOptions struct {
	conn      *nats.Conn
	inProcess nats.InProcessConnProvider
	noHTTP    bool
	ops       *OpsHandler
	listener  net.Listener
	registry  prometheus.Registerer
	log       *zerolog.Logger
}

// WithConn runs the service on nc instead of connecting. The caller owns
// nc: Run neither drains nor closes it.
func WithConn(nc *nats.Conn) Option { return func(o *runOptions) { o.conn = nc } }

// WithInProcess connects the service to an in-process nats-server (a
// *server.Server) instead of cfg.NATS.URL: its own connection, without
// TCP, that Run drains at the end. capn dev runs every service this way.
func WithInProcess(srv nats.InProcessConnProvider) Option {
	return func(o *runOptions) { o.inProcess = srv }
}

// WithoutHTTP serves no ops endpoints, whatever cfg.HTTPAddr says.
func WithoutHTTP() Option { return func(o *runOptions) { o.noHTTP = true } }

// WithOps reports the service's health on h, an ops handler that the
// caller serves for several services, instead of serving its own.
func WithOps(h *OpsHandler) Option { return func(o *runOptions) { o.ops = h } }

// WithListener serves the ops endpoints on ln instead of listening on
// cfg.HTTPAddr. Run closes ln.
func WithListener(ln net.Listener) Option { return func(o *runOptions) { o.listener = ln } }

// WithRegistry registers the service's metrics on reg, with the constant
// label service=<name>, instead of on a registry of its own; the caller
// serves reg (capn dev shares one among its services). A service name
// can run only once per registry in a process: events.Metrics cannot be
// unregistered.
func WithRegistry(reg prometheus.Registerer) Option { return func(o *runOptions) { o.registry = reg } }

// WithLogger logs through l (Run adds service=<name>) instead of a new
// logger on stderr made from cfg.
func WithLogger(l zerolog.Logger) Option { return func(o *runOptions) { o.log = &l } }

// Run runs svc until ctx is cancelled or svc fails:
//
//  1. applies defaults to cfg (Name defaults to svc.Name()) and validates it;
//  2. serves /healthz /readyz /metrics on cfg.HTTPAddr (unless "off",
//     WithoutHTTP or WithOps) — before connecting, so that liveness holds
//     while NATS is unreachable;
//  3. connects to NATS (or uses WithConn / WithInProcess), retrying until
//     ctx ends;
//  4. provisions events.DefaultTopology(cfg.Replicas) unless
//     cfg.SkipProvision (idempotent: every service may do it);
//  5. calls svc.Run with its Deps.
//
// On ctx's cancellation it marks the service not ready, waits for svc.Run
// to return, drains the connection and stops the HTTP server, all within
// cfg.ShutdownTimeout, and returns nil (also when ctx ends before the
// service started, while connecting or provisioning). If svc.Run returns
// an error (or panics) Run shuts down the same way and returns it; if
// svc.Run does not return in time Run returns an error wrapping
// ErrShutdownTimeout and leaves it running.
func Run(ctx context.Context, cfg Config, svc Service, opts ...Option) error {
	var o runOptions
	for _, opt := range opts {
		opt(&o)
	}
	if cfg.Name == "" {
		cfg.Name = svc.Name()
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("service %s: invalid config: %w", cfg.Name, err)
	}
	name := cfg.Name
	// Every goroutine of the service — its own, its connection's and its
	// subscriptions' — carries the pprof label service=<name>, so that a
	// CPU profile of a process running several (capn dev, capn-bench)
	// says which spends what. The in-process server's side of the
	// connection is the server's work: it keeps the caller's labels.
	outer := ctx
	ctx = pprof.WithLabels(ctx, pprof.Labels(ProfileLabel, name))
	pprof.SetGoroutineLabels(ctx)
	defer pprof.SetGoroutineLabels(outer)
	if o.inProcess != nil {
		o.inProcess = labelled{o.inProcess, outer}
	}
	var log zerolog.Logger
	if o.log != nil {
		log = *o.log
	} else {
		log = NewLogger(cfg, os.Stderr)
	}
	log = log.With().Str("service", name).Logger()

	// Everything below is undone in reverse order, within one deadline
	// that starts when the shutdown does.
	var deadline time.Time
	stopCtx := func() (context.Context, context.CancelFunc) {
		if deadline.IsZero() {
			deadline = time.Now().Add(cfg.ShutdownTimeout)
		}
		return context.WithDeadline(context.Background(), deadline)
	}

	var reg prometheus.Registerer
	var gatherer prometheus.Gatherer
	if o.registry != nil {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"service": name}, o.registry)
	} else {
		r := NewRegistry()
		reg, gatherer = r, r
	}

	ops := o.ops
	if ops == nil && !o.noHTTP && (o.listener != nil || cfg.HTTPAddr != HTTPOff) {
		if gatherer == nil {
			// WithRegistry: serve it if it can be gathered.
			if g, ok := o.registry.(prometheus.Gatherer); ok {
				gatherer = g
			} else {
				gatherer = prometheus.NewRegistry()
			}
		}
		ln := o.listener
		if ln == nil {
			var err error
			if ln, err = ListenOps(cfg.HTTPAddr); err != nil {
				return fmt.Errorf("service %s: %w", name, err)
			}
		}
		ops = NewOpsHandler(gatherer)
		srv := ServeOps(ln, ops, log)
		log.Info().Str("http_url", srv.URL()).Msg("serving /healthz /readyz /metrics")
		defer func() {
			ctx, cancel := stopCtx()
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				log.Warn().Err(err).Msg("ops HTTP server did not stop cleanly")
			}
		}()
	}
	ready := NewReadiness()
	remove := func() {}
	if ops != nil {
		ready.SetNotReady("connecting to NATS")
		remove = ops.Set(Check{Service: name, Ready: ready})
	}
	defer func() { remove() }()

	nc := o.conn
	if nc == nil {
		extra := []nats.Option{nats.DrainTimeout(cfg.ShutdownTimeout)}
		if o.inProcess != nil {
			extra = append(extra, nats.InProcessServer(o.inProcess))
		}
		var err error
		if nc, err = Connect(ctx, cfg.NATS, name, log, extra...); err != nil {
			return startErr(ctx, log, fmt.Errorf("service %s: %w", name, err))
		}
		defer func() {
			ctx, cancel := stopCtx()
			defer cancel()
			drain(ctx, nc, log)
		}()
	}
	if ops != nil {
		remove = ops.Set(Check{Service: name, Conn: nc, Ready: ready})
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("service %s: jetstream: %w", name, err)
	}
	if !cfg.SkipProvision {
		ready.SetNotReady("provisioning streams and buckets")
		log.Info().Int("replicas", cfg.Replicas).Msg("provisioning JetStream streams and buckets")
		if err := events.Provision(ctx, js, events.DefaultTopology(cfg.Replicas)); err != nil {
			return startErr(ctx, log, fmt.Errorf("service %s: provision JetStream: %w", name, err))
		}
	}
	unregister, err := registerConnMetrics(reg, nc)
	if err != nil {
		return fmt.Errorf("service %s: register metrics: %w", name, err)
	}
	defer unregister()

	ready.SetNotReady("starting")
	d := &Deps{
		Log: log, NC: nc, JS: js, Metrics: reg, Events: events.NewMetrics(reg),
		Ready: ready, Config: cfg,
	}
	done := make(chan error, 1)
	go func() { done <- runService(log.WithContext(ctx), svc, d) }()
	log.Info().Msg("service started")

	select {
	case err = <-done:
		ready.SetNotReady("stopped")
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			err = nil
		}
		if err != nil {
			log.Error().Err(err).Msg("service failed")
			return fmt.Errorf("service %s: %w", name, err)
		}
		if ctx.Err() == nil {
			log.Warn().Msg("service returned before shutdown")
		}
	case <-ctx.Done():
		ready.SetNotReady("shutting down")
		log.Info().Dur("timeout", cfg.ShutdownTimeout).Msg("shutting down")
		wait, cancel := stopCtx()
		defer cancel()
		select {
		case err = <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				log.Error().Err(err).Msg("service failed while stopping")
				return fmt.Errorf("service %s: %w", name, err)
			}
		case <-wait.Done():
			log.Error().Dur("timeout", cfg.ShutdownTimeout).Msg("service did not stop in time")
			return fmt.Errorf("service %s: %w (shutdown timeout %s)", name, ErrShutdownTimeout, cfg.ShutdownTimeout)
		}
	}
	log.Info().Msg("service stopped")
	return nil
}

// startErr is err, or nil when ctx was cancelled while starting: a stop
// asked for before the service ran is not a failure.
func startErr(ctx context.Context, log zerolog.Logger, err error) error {
	if ctx.Err() != nil {
		log.Info().Err(err).Msg("stopped before the service started")
		return nil
	}
	return err
}

// runService calls svc.Run, turning a panic into an error.
func runService(ctx context.Context, svc Service, d *Deps) (err error) {
	defer func() {
		if r := recover(); r != nil {
			d.Log.Error().Str("stack", string(debug.Stack())).Msg("service panicked")
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return svc.Run(ctx, d)
}

// drain drains nc, so that messages in flight are handled and publishes
// buffered are flushed, and closes it when ctx ends first.
func drain(ctx context.Context, nc *nats.Conn, log zerolog.Logger) {
	closed := nc.StatusChanged(nats.CLOSED)
	defer nc.RemoveStatusListener(closed)
	if nc.IsClosed() {
		return
	}
	if err := nc.Drain(); err != nil {
		log.Warn().Err(err).Msg("cannot drain NATS connection, closing it")
		nc.Close()
		return
	}
	select {
	case <-closed:
	case <-ctx.Done():
		log.Warn().Msg("NATS connection did not drain in time, closing it")
		nc.Close()
	}
}
