package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/daemon"
)

// Service runs a Provider as a capn service (a daemon.Service named
// provider-<name>). Build it with NewService; it holds no state between
// runs, so each Run starts afresh, as a restarted process would.
type Service struct {
	p    Provider
	opts Options
}

var _ daemon.Service = (*Service)(nil)

// NewService wraps p. Options are validated by Validate (daemon.Main
// calls it) and again by Run.
func NewService(p Provider, opts Options) *Service {
	return &Service{p: p, opts: opts}
}

// Name is provider-<provider name>.
func (s *Service) Name() string { return ServiceName(s.p.Name()) }

// Validate reports every problem of the provider's name and the options.
func (s *Service) Validate() error {
	var errs []error
	if n := s.p.Name(); !providerName.MatchString(n) {
		errs = append(errs, fmt.Errorf("provider name %q: want lower-case letters, digits and '-', starting with a letter", n))
	}
	errs = append(errs, s.opts.Validate())
	return errors.Join(errs...)
}

// Run serves the provider until ctx is cancelled:
//
//  1. gives the provider its observed records (Adopter);
//  2. announces it (provider.<name>) and keeps the announcement fresh;
//  3. starts its background work (Runner), the drift reconcile and the
//     consumer of capn.provider.<name>.>, then reports ready.
//
// On cancellation it stops consuming (commands in flight are handed back
// to JetStream), waits for the rest, withdraws the announcement and
// returns nil. It returns an error when it cannot start, or when the
// provider's Runner fails.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	if err := s.Validate(); err != nil {
		return err
	}
	srv, err := newServer(ctx, s.p, s.opts.withDefaults(), d)
	if err != nil {
		return err
	}
	return srv.run(ctx, d)
}

// server is one run of a Service.
type server struct {
	p        Provider
	name     string
	opts     Options
	log      zerolog.Logger
	js       jetstream.JetStream
	obs      *observed
	pub      *events.Publisher
	locks    keyLocks
	checks   *reconcile.Queue
	drift    *prometheus.CounterVec
	passes   *prometheus.CounterVec
	commands *prometheus.CounterVec

	handlers map[string]events.Handler

	orphansMu sync.Mutex
	orphans   map[string]string // key -> provider id already reported
}

func newServer(ctx context.Context, p Provider, opts Options, d *daemon.Deps) (*server, error) {
	name := p.Name()
	kv, err := d.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		return nil, fmt.Errorf("provider %s: bucket %s: %w", name, events.BucketObserved, err)
	}
	s := &server{
		p:       p,
		name:    name,
		opts:    opts,
		log:     d.Log.With().Str("provider", name).Logger(),
		js:      d.JS,
		obs:     newObserved(name, d.JS, kv),
		pub:     events.NewPublisher(d.JS, "capn/"+ServiceName(name)),
		checks:  reconcile.NewQueue(),
		orphans: map[string]string{},
	}
	s.drift = counter(d.Metrics, "capn_provider_drift_reports_total",
		"Drift reports published, by provider and kind (Gone, Stopped, Changed, Orphan).", "provider", "kind")
	s.passes = counter(d.Metrics, MetricDriftPasses,
		"Drift reconciles that compared every observed record with the provider's List.", "provider")
	s.commands = counter(d.Metrics, MetricCommands,
		"Commands handled, by provider, kind (machine, cluster), verb (create, delete, orphan, adopt, ...) and outcome (done: acked; retry: to be redelivered).",
		"provider", "kind", "verb", "outcome")
	s.handlers = s.builtinHandlers()
	if ch, ok := p.(CommandHandler); ok {
		for typ, h := range ch.Commands() {
			if _, dup := s.handlers[typ]; dup {
				return nil, fmt.Errorf("provider %s: command %s is already handled by the SDK", name, typ)
			}
			s.handlers[typ] = h
		}
	}
	return s, nil
}

func (s *server) env() Env {
	return Env{Reporter: reporter{s}, JS: s.js, Publisher: s.pub, Log: s.log}
}

func (s *server) consumerSpec() events.ConsumerSpec {
	return events.ConsumerSpec{
		Stream:      events.StreamProviders,
		Durable:     ServiceName(s.name),
		Filters:     []string{events.Subject(events.SubjectProviders, s.name, ">")},
		Description: "commands to provider " + s.name,
		MaxDeliver:  s.opts.MaxDeliver,
	}
}

func (s *server) run(ctx context.Context, d *daemon.Deps) error {
	if err := s.adopt(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// The first announcement is a create: if a stop cut its wait for the
	// ack short, it could still land after withdraw looked and found
	// nothing. So it is not cut short (the bucket's timeout bounds it).
	// Like the adopt read, it is retried while JetStream cannot answer (a
	// new cluster may still be electing the bucket's leader).
	defer s.withdraw()
	err := events.Retry(ctx, s.log, "announce the provider", events.DefaultSetupRetryFirst, events.DefaultSetupRetryMax,
		func(ctx context.Context) error { return s.announce(context.WithoutCancel(ctx)) })
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("provider %s: announce: %w", s.name, err)
	}

	spec := s.consumerSpec()
	if _, err := events.EnsureConsumer(ctx, s.js, spec); err != nil {
		return fmt.Errorf("provider %s: %w", s.name, err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	goRun := func(what string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(runCtx); err != nil && runCtx.Err() == nil {
				errc <- fmt.Errorf("provider %s: %s: %w", s.name, what, err)
				cancel()
			}
		}()
	}
	if r, ok := s.p.(Runner); ok {
		goRun("run", func(ctx context.Context) error { return r.Run(ctx, s.env()) })
	}
	goRun("announce", func(ctx context.Context) error { s.keepAnnouncing(ctx); return nil })
	goRun("drift", func(ctx context.Context) error { s.runDrift(ctx); return nil })
	consumer := events.NewConsumer(s.js, spec, s.handle,
		events.WithConcurrency(s.opts.Concurrency), events.WithLogger(s.log), events.WithMetrics(d.Events))
	goRun("consume", consumer.Run)

	if d.Ready != nil {
		d.Ready.Set(true)
	}
	s.log.Info().Int("concurrency", s.opts.Concurrency).Dur("reconcile_every", s.opts.ReconcileEvery).
		Strs("capabilities", s.capabilities()).Msg("provider serving")
	<-runCtx.Done()
	if d.Ready != nil {
		d.Ready.SetNotReady("stopping")
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// adopt hands an Adopter its observed records.
func (s *server) adopt(ctx context.Context) error {
	a, ok := s.p.(Adopter)
	if !ok {
		return nil
	}
	var rec infraRecords
	err := events.Retry(ctx, s.log, "read the observed records to adopt", events.DefaultSetupRetryFirst, events.DefaultSetupRetryMax,
		func(ctx context.Context) (err error) { rec, err = s.obs.list(ctx); return err })
	if err != nil {
		return fmt.Errorf("provider %s: read observed records: %w", s.name, err)
	}
	s.logBad(rec)
	machines := make([]*capnv1.InfraMachine, 0, len(rec.machines))
	for _, e := range rec.machines {
		machines = append(machines, e.Value)
	}
	clusters := make([]*capnv1.InfraCluster, 0, len(rec.clusters))
	for _, e := range rec.clusters {
		clusters = append(clusters, e.Value)
	}
	s.log.Info().Int("machines", len(machines)).Int("clusters", len(clusters)).Msg("adopting observed infrastructure")
	if err := a.Adopt(ctx, machines, clusters); err != nil {
		return fmt.Errorf("provider %s: adopt: %w", s.name, err)
	}
	return nil
}

// logBad logs the records that do not decode (they are skipped).
func (s *server) logBad(rec infraRecords) {
	if len(rec.bad) > 0 {
		s.log.Error().Err(errors.Join(rec.bad...)).Int("records", len(rec.bad)).Msg("skipping observed records that do not decode")
	}
}

// withdraw deletes the announcement at a clean shutdown, unless another
// replica announced since.
func (s *server) withdraw() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := s.unannounce(ctx); err != nil {
		s.log.Warn().Err(err).Msg("cannot withdraw the announcement; it goes stale")
	}
}

// MetricDriftPasses counts the drift reconciles that compared every
// observed record with List (label provider): a test waits on it for a
// pass, rather than for ReconcileEvery.
const MetricDriftPasses = "capn_provider_drift_passes_total"

// MetricCommands counts the commands a provider handled (labels provider,
// kind, verb, outcome): what an operator reads to see that a move
// orphaned machines and deleted none.
const MetricCommands = "capn_provider_commands_total"

// counter registers a counter on reg, or returns the one registered
// before under the same name (a provider restarted in one process).
func counter(reg prometheus.Registerer, name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing
			}
		}
	}
	return c
}
