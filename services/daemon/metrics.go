package daemon

import (
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// NewRegistry returns a Prometheus registry with the Go runtime and
// process collectors, for a program's /metrics.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// registerConnMetrics registers gauges and counters read from nc on
// demand. unregister takes them out again.
func registerConnMetrics(reg prometheus.Registerer, nc *nats.Conn) (unregister func(), err error) {
	stat := func(f func(nats.Statistics) uint64) func() float64 {
		return func() float64 { return float64(f(nc.Stats())) }
	}
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "capn_nats_connected",
			Help: "1 while the service's NATS connection is connected, else 0.",
		}, func() float64 {
			if nc.IsConnected() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "capn_nats_reconnects_total",
			Help: "Times the service's NATS connection reconnected.",
		}, stat(func(s nats.Statistics) uint64 { return s.Reconnects })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "capn_nats_in_msgs_total",
			Help: "Messages the service's NATS connection received.",
		}, stat(func(s nats.Statistics) uint64 { return s.InMsgs })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "capn_nats_out_msgs_total",
			Help: "Messages the service's NATS connection sent.",
		}, stat(func(s nats.Statistics) uint64 { return s.OutMsgs })),
	}
	var done []prometheus.Collector
	unregister = func() {
		for _, c := range done {
			reg.Unregister(c)
		}
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			unregister()
			return func() {}, err
		}
		done = append(done, c)
	}
	return unregister, nil
}
