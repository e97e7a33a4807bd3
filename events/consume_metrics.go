package events

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of every consumer in a process.
type Metrics struct {
	outcomes *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers consumer metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capn_events_handled_total",
			Help: "Messages handled, by consumer and outcome (ack, nak, term, dead_letter, panic).",
		}, []string{"consumer", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "capn_events_handler_seconds",
			Help:    "Time spent in handlers, by consumer.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"consumer"}),
	}
	if reg != nil {
		reg.MustRegister(m.outcomes, m.duration)
	}
	return m
}

// count counts one outcome of consumer; a nil m counts nothing.
func (m *Metrics) count(consumer, outcome string) {
	if m != nil {
		m.outcomes.WithLabelValues(consumer, outcome).Inc()
	}
}

// timed observes how long each call of the handler takes.
func (m *Metrics) timed(consumer string) middleware {
	return func(next Handler) Handler {
		if m == nil {
			return next
		}
		return func(ctx context.Context, msg *Message) error {
			start := time.Now()
			defer func() { m.duration.WithLabelValues(consumer).Observe(time.Since(start).Seconds()) }()
			return next(ctx, msg)
		}
	}
}
