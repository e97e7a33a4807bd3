package autoscalerprovider

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests *prometheus.CounterVec
	actions  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "capn_autoscaler_requests_total",
			Help: "Calls of the cluster autoscaler's externalgrpc API, by method and gRPC code."}, []string{"method", "code"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "capn_autoscaler_actions_total",
			Help: "Changes the cluster autoscaler made to pools, by reason (ScaledUp, DeletedNodes, DecreasedTargetSize)."}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.actions)
	}
	return m
}
