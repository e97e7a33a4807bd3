package remediator

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var errMissingNames = errors.New("machine.unhealthy without cluster or machine")

// metrics are the remediator's Prometheus metrics.
type metrics struct {
	actions *prometheus.CounterVec
	latency *prometheus.HistogramVec
	blocks  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capn_remediation_actions_total",
			Help: "Repairs started, by action (reboot, replace).",
		}, []string{"action"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "capn_remediation_latency_seconds",
			Help: "Health event to repair command: from when the health input that made a machine unhealthy reached capn " +
				"(or the policy's timeout ran out) to the reboot command or the replacement, by action.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 18),
		}, []string{"action"}),
		blocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capn_remediation_blocked_total",
			Help: "Times a pool's remediation became blocked, by reason (TooManyUnhealthy, MaxInFlight, ControlPlaneQuorum, ...).",
		}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.actions, m.latency, m.blocks)
	}
	return m
}

// acted counts a repair and, when the health time of its episode is known,
// observes its latency.
func (m *metrics) acted(action string, healthAt, now time.Time) {
	m.actions.WithLabelValues(action).Inc()
	if !healthAt.IsZero() {
		m.latency.WithLabelValues(action).Observe(max(now.Sub(healthAt), 0).Seconds())
	}
}

func (m *metrics) blocked(reason string) { m.blocks.WithLabelValues(reason).Inc() }
