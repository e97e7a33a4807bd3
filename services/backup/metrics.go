package backup

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// metrics are the backup service's Prometheus metrics.
type metrics struct {
	backups     *prometheus.CounterVec
	lastSuccess *prometheus.GaugeVec
	duration    *prometheus.HistogramVec
	size        *prometheus.GaugeVec
	failing     prometheus.Gauge
	restores    *prometheus.CounterVec
}

// Metric names.
const (
	MetricBackups         = "capn_backups_total"
	MetricLastSuccess     = "capn_backup_last_success_timestamp_seconds"
	MetricScheduleFailing = "capn_backup_schedule_failing"
	MetricBackupDuration  = "capn_backup_duration_seconds"
	MetricBackupBytes     = "capn_backup_bytes"
	MetricRestores        = "capn_restores_total"
)

// Labels and outcomes.
const (
	labelTrigger, labelOut = "trigger", "outcome"

	outcomeSucceeded = "succeeded"
	outcomeFailed    = "failed"
	outcomeDryRun    = "dry_run"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		backups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricBackups,
			Help: "Backups taken, by trigger (api, schedule, move) and outcome (succeeded, failed)."}, []string{labelTrigger, labelOut}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricLastSuccess,
			Help: "When the last backup of a trigger succeeded (Unix seconds): alert on its age."}, []string{labelTrigger}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricBackupDuration,
			Help:    "Time to read, encode and store a backup, by trigger.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, []string{labelTrigger}),
		size: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricBackupBytes,
			Help: "Size of the last backup of a trigger, in bytes."}, []string{labelTrigger}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricScheduleFailing,
			Help: "1 while the last scheduled backup failed (observed backup.schedule's BackupSucceeded is False), else 0."}),
		restores: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRestores,
			Help: "Restores, by outcome (succeeded, failed, dry_run)."}, []string{labelOut}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.backups, m.lastSuccess, m.duration, m.size, m.failing, m.restores} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) taken(trigger string, ok bool, took time.Duration, bytes int) {
	if !ok {
		m.backups.WithLabelValues(trigger, outcomeFailed).Inc()
		return
	}
	m.backups.WithLabelValues(trigger, outcomeSucceeded).Inc()
	m.lastSuccess.WithLabelValues(trigger).SetToCurrentTime()
	m.duration.WithLabelValues(trigger).Observe(took.Seconds())
	m.size.WithLabelValues(trigger).Set(float64(bytes))
}

func (m *metrics) scheduleFailing(failing bool) {
	if failing {
		m.failing.Set(1)
	} else {
		m.failing.Set(0)
	}
}

func (m *metrics) restored(r *capnv1.RestoreReport) {
	switch {
	case r.GetError() != nil:
		m.restores.WithLabelValues(outcomeFailed).Inc()
	case r.GetDryRun():
		m.restores.WithLabelValues(outcomeDryRun).Inc()
	default:
		m.restores.WithLabelValues(outcomeSucceeded).Inc()
	}
}
