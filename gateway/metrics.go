package gateway

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's Prometheus metrics. A nil *metrics records
// nothing.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	ingested *prometheus.CounterVec
	streams  *prometheus.GaugeVec
	corrupts *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capn_gateway_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "capn_gateway_request_duration_seconds", Help: "Time to answer an HTTP request (streams: their whole life).",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 30, 300},
		}, []string{"route"}),
		ingested: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capn_gateway_ingested_events_total", Help: "CloudEvents received on POST /v1/events by outcome: stored, duplicate, invalid, forbidden (a health report outside the token's clusters), failed.",
		}, []string{"outcome"}),
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "capn_gateway_open_streams", Help: "Server-Sent Event streams open, by kind: watch, timeline.",
		}, []string{"kind"}),
		corrupts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capn_gateway_corrupt_records_total", Help: "Stored records a list left out because they do not decode, by kind: Cluster, ClusterStatus, Machine, MachineStatus.",
		}, []string{"kind"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.ingested, m.streams, m.corrupts} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(route string, code int, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
}

func (m *metrics) ingest(outcome string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.ingested.WithLabelValues(outcome).Add(float64(n))
}

func (m *metrics) corrupt(kind string) {
	if m == nil {
		return
	}
	m.corrupts.WithLabelValues(kind).Inc()
}

// stream counts an open stream of kind until the returned func is called.
func (m *metrics) stream(kind string) func() {
	if m == nil {
		return func() {}
	}
	g := m.streams.WithLabelValues(kind)
	g.Inc()
	return g.Dec
}
