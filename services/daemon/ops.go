package daemon

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Readiness is a service's own say in /readyz: whether it can do its work
// now (e.g. its watch caches are synced). It starts not ready with reason
// "starting"; the service calls Set(true) once it is ready. Safe for
// concurrent use.
type Readiness struct {
	mu     sync.Mutex
	ready  bool
	reason string
}

// NewReadiness returns a Readiness that is not ready ("starting").
func NewReadiness() *Readiness { return &Readiness{reason: "starting"} }

// Set marks the service ready, or not ready without a particular reason.
func (r *Readiness) Set(ready bool) {
	if ready {
		r.set(true, "")
	} else {
		r.set(false, "not ready")
	}
}

// SetNotReady marks the service not ready; reason is shown by /readyz.
func (r *Readiness) SetNotReady(reason string) { r.set(false, reason) }

func (r *Readiness) set(ready bool, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ready, r.reason = ready, reason
}

// Status returns whether the service is ready and, if not, why.
func (r *Readiness) Status() (ready bool, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready, r.reason
}

// Check is what the ops endpoints know of one service.
type Check struct {
	Service string
	// Conn is the service's NATS connection; nil while it connects.
	Conn *nats.Conn
	// Ready is the service's own readiness; nil: ready when connected.
	Ready *Readiness
}

// OpsHandler serves /healthz, /readyz and /metrics for one or more
// services of a process (capn dev has one for all of them):
//
//   - GET /healthz: 200 unless a service's NATS connection is closed for
//     good (a restart is the cure); 503 then. Liveness.
//   - GET /readyz: 200 when every service is connected to NATS and said it
//     is ready; 503 with the reasons otherwise, and when no service is
//     registered. Readiness.
//   - GET /metrics: Prometheus text from the gatherer.
//
// Both health bodies are JSON: {"status":..., "services":[{"service":...,
// "nats":"CONNECTED", "ready":..., "reason":...}]}. Safe for concurrent use.
type OpsHandler struct {
	mux    *http.ServeMux
	mu     sync.Mutex
	checks map[string]*Check
}

// NewOpsHandler returns a handler that serves metrics from g and health
// from checks; more can be Set later.
func NewOpsHandler(g prometheus.Gatherer, checks ...Check) *OpsHandler {
	h := &OpsHandler{mux: http.NewServeMux(), checks: map[string]*Check{}}
	for _, c := range checks {
		h.Set(c)
	}
	h.mux.HandleFunc("GET /healthz", h.healthz)
	h.mux.HandleFunc("GET /readyz", h.readyz)
	h.mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	h.mux.HandleFunc("GET /{$}", h.index)
	return h
}

// Set adds c, or replaces the check of the same service. remove takes it
// out again unless it was replaced since.
func (h *OpsHandler) Set(c Check) (remove func()) {
	p := &c
	h.mu.Lock()
	h.checks[c.Service] = p
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.checks[c.Service] == p {
			delete(h.checks, c.Service)
		}
	}
}

func (h *OpsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// ServiceStatus is one service in a health body.
type ServiceStatus struct {
	Service string `json:"service"`
	NATS    string `json:"nats"`
	Ready   *bool  `json:"ready,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// HealthBody is the JSON body of /healthz and /readyz.
type HealthBody struct {
	Status   string          `json:"status"`
	Services []ServiceStatus `json:"services"`
}

func (h *OpsHandler) snapshot() []Check {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Check, 0, len(h.checks))
	for _, c := range h.checks {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Check) int { return cmp.Compare(a.Service, b.Service) })
	return out
}

func natsStatus(nc *nats.Conn) string {
	if nc == nil {
		return "CONNECTING"
	}
	return nc.Status().String()
}

func (h *OpsHandler) healthz(w http.ResponseWriter, _ *http.Request) {
	body := HealthBody{Status: "ok", Services: []ServiceStatus{}}
	for _, c := range h.snapshot() {
		s := ServiceStatus{Service: c.Service, NATS: natsStatus(c.Conn)}
		if c.Conn != nil && c.Conn.IsClosed() {
			body.Status = "unhealthy"
			s.Reason = "NATS connection closed"
		}
		body.Services = append(body.Services, s)
	}
	writeHealth(w, body, body.Status == "ok")
}

func (h *OpsHandler) readyz(w http.ResponseWriter, _ *http.Request) {
	body := HealthBody{Status: "ready", Services: []ServiceStatus{}}
	checks := h.snapshot()
	if len(checks) == 0 {
		body.Status = "not ready: no service registered"
	}
	for _, c := range checks {
		var reasons []string
		if c.Conn == nil || !c.Conn.IsConnected() {
			reasons = append(reasons, "NATS is "+natsStatus(c.Conn))
		}
		if c.Ready != nil {
			if ok, why := c.Ready.Status(); !ok {
				reasons = append(reasons, why)
			}
		}
		ready := len(reasons) == 0
		if !ready {
			body.Status = "not ready"
		}
		body.Services = append(body.Services, ServiceStatus{
			Service: c.Service, NATS: natsStatus(c.Conn), Ready: &ready, Reason: strings.Join(reasons, "; "),
		})
	}
	writeHealth(w, body, body.Status == "ready")
}

func writeHealth(w http.ResponseWriter, body HealthBody, ok bool) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(body) // the client went away: nothing to do
}

func (h *OpsHandler) index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "capn ops endpoints: /healthz /readyz /metrics")
	for _, c := range h.snapshot() {
		fmt.Fprintf(w, "service %s: NATS %s\n", c.Service, natsStatus(c.Conn))
	}
}
