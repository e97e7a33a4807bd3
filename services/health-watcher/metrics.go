package healthwatcher

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a report and causes of a record write (metric labels).
const (
	outcomeApplied   = "applied"
	outcomeUnchanged = "unchanged"
	outcomeIgnored   = "ignored"
	// outcomeUntrusted: a heartbeat from a gateway token the policy does
	// not trust.
	outcomeUntrusted = "untrusted"
	// outcomeWrongProvider: a drift report not from the machine's provider.
	outcomeWrongProvider = "wrong_provider"
	causeReport          = "report"
	causeVerdict         = "verdict"
)

// metrics are the health-watcher's Prometheus metrics. A nil *metrics
// (no registry) records nothing.
type metrics struct {
	reports  *prometheus.CounterVec
	writes   *prometheus.CounterVec
	episodes *prometheus.CounterVec
	evaluate prometheus.Histogram
	renewals prometheus.Counter
	// nodeSyncs: nodesync_apply.go.
	nodeSyncs *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capn_health_reports_total",
			Help: "Health reports, by kind (heartbeat, conditions, problem, drift) and outcome (applied: the record changed; unchanged; ignored: unknown, deleting or earlier machine, or bad subject; untrusted: a heartbeat from a gateway token the health policy does not trust; wrong_provider: a drift report not from the machine's provider).",
		}, []string{"kind", "outcome"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capn_health_record_writes_total",
			Help: "KV writes of node health records, by cause (report, verdict).",
		}, []string{"cause"}),
		episodes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capn_health_unhealthy_total",
			Help: "Unhealthy episodes published (machine.unhealthy), by reason type.",
		}, []string{"reason"}),
		evaluate: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "capn_health_evaluation_seconds",
			Help:    "Time to evaluate one cluster's machines and write what changed.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "capn_health_wakes_renewed_total",
			Help: "Time-based wakes of a cluster answered without evaluating it: nothing had changed and every node the last evaluation counted on had sent a heartbeat since.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.reports, m.writes, m.episodes, m.evaluate, m.renewals)
	}
	m.nodeSyncs = nodeSyncCounter(reg)
	return m
}

func (m *metrics) report(kind, outcome string) { m.reports.WithLabelValues(kind, outcome).Inc() }
func (m *metrics) write(cause string)          { m.writes.WithLabelValues(cause).Inc() }
func (m *metrics) unhealthy(reason string)     { m.episodes.WithLabelValues(reason).Inc() }
func (m *metrics) evaluated(d time.Duration)   { m.evaluate.Observe(d.Seconds()) }
func (m *metrics) renewed()                    { m.renewals.Inc() }
