package daemon

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
)

// Service is one capn program's logic; Run (or Main, or capn dev) gives it
// everything else.
type Service interface {
	// Name is the service's name: lower-case letters, digits and dashes
	// (e.g. "cluster-planner"). It labels logs, metrics and the NATS
	// connection.
	Name() string
	// Run does the service's work until ctx is cancelled, then stops and
	// returns nil (returning ctx.Err() is taken as nil too). Returning
	// early means the service cannot go on: a non-nil error is fatal and
	// ends the program with it. Run is called once; its Deps are valid
	// until it returns. It must return within Config.ShutdownTimeout of
	// ctx's cancellation.
	Run(ctx context.Context, d *Deps) error
}

// FlagProvider is a Service with settings of its own: Main registers its
// flags next to the runtime's, with the same flag > env > default order.
// The Flags' Values point into the service's own fields.
type FlagProvider interface {
	Flags() []Flag
}

// Validator is a Service whose own settings can be wrong: Main reports its
// problems together with the runtime's, so a user sees all of them at once.
// Return errors.Join of *FieldError values.
type Validator interface {
	Validate() error
}

// Deps is what a Service runs with. Everything in it is safe for
// concurrent use.
type Deps struct {
	// Log is the runtime's logger, already carrying service=<name>.
	Log zerolog.Logger
	// NC is this service's own NATS connection (capn dev too gives each
	// service its own). The runtime drains it after Run returns.
	NC *nats.Conn
	// JS is JetStream on NC.
	JS jetstream.JetStream
	// Metrics registers the service's Prometheus metrics: a registry of
	// the service's own, or in capn dev a shared one whose every metric
	// carries service=<name>. Register each collector once.
	Metrics prometheus.Registerer
	// Events are the consumer metrics (events.WithMetrics), registered on
	// Metrics.
	Events *events.Metrics
	// Ready is the service's say in /readyz. It starts not ready
	// ("starting"): call Ready.Set(true) once the service can work (e.g.
	// its caches are synced) and SetNotReady(reason) when it cannot.
	Ready *Readiness
	// Config is the runtime's configuration (after defaults).
	Config Config
}
