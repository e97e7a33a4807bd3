package addonmanager

import "github.com/prometheus/client_golang/prometheus"

// metrics are the addon-manager's Prometheus metrics. A nil *metrics (no
// registry) records nothing.
type metrics struct {
	steps     *prometheus.CounterVec
	recreated prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capn_addon_steps_total",
			Help: "Add-on steps taken on workload clusters, by step (apply, remove, forget, record) and outcome (ok, failed).",
		}, []string{"step", "outcome"}),
		recreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "capn_addon_objects_recreated_total",
			Help: "Objects of Reconcile add-on sets found deleted in a workload cluster and created again.",
		}),
	}
	reg.MustRegister(m.steps, m.recreated)
	return m
}

func (m *metrics) step(k StepKind, err error) {
	if m == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "failed"
	}
	m.steps.WithLabelValues(k.String(), outcome).Inc()
}

func (m *metrics) recreate(n int) {
	if m != nil && n > 0 {
		m.recreated.Add(float64(n))
	}
}
