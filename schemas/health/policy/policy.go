// Package policy turns a cluster's health policy (capn.v1alpha1.HealthPolicy,
// set for the whole cluster and overridden per worker pool) into effective
// values with capn's defaults, and evaluates the max-unhealthy threshold.
//
// It is the one reading of the policy that the health-watcher (which judges
// machines) and the remediator (which guards repairs) share, so both always
// agree on a default. It is pure: no I/O, no clock, no service internals —
// a contract package like schemas/, which is why a second service may
// import it.
package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// ControlPlanePool is the pool name of control-plane machines (their
// MachineSpec.pool). The control plane takes the cluster-wide policy.
const ControlPlanePool = "control-plane"

// The words of an unhealthy verdict, which the health-watcher writes (each
// reason's Type on NodeHealth) and the remediator ranks. A failed node
// condition is reported under its own type (e.g. KernelDeadlock).
const (
	ReasonInfrastructureGone = "InfrastructureGone"
	ReasonNodeStartupTimeout = "NodeStartupTimeout"
	ReasonMachineFailed      = "MachineFailed"
	// ConditionReady is the node's Ready condition, derived from
	// heartbeats; ReasonNodeStatusUnknown is its reason once they stop.
	ConditionReady          = "Ready"
	ReasonNodeStatusUnknown = "NodeStatusUnknown"
)

// Condition is one unhealthy condition: a node condition of Type at Status
// for at least Timeout makes the machine unhealthy (Cluster API's
// MachineHealthCheck unhealthyConditions).
type Condition struct {
	Type    string
	Status  string
	Timeout time.Duration
}

// Policy is the effective health policy of one pool.
type Policy struct {
	// UnhealthyConditions: node conditions (including Ready, which the
	// health-watcher derives from heartbeats) that make a machine unhealthy.
	UnhealthyConditions []Condition
	// NodeStartupTimeout: how long after its infrastructure became ready a
	// machine's node may take to report for the first time. 0 disables.
	NodeStartupTimeout time.Duration
	// HeartbeatGrace: how long a node may stay silent before its Ready
	// condition counts as Unknown.
	HeartbeatGrace time.Duration
	// MaxUnhealthy is the circuit breaker: no repair while more machines of
	// the pool are unhealthy than it allows.
	MaxUnhealthy Threshold
	// MaxInFlight: repairs of the pool that may be under way at once.
	MaxInFlight int
	// TrustedSources are the gateway tokens (by name) whose reports may
	// make a machine unhealthy (see Trusts).
	TrustedSources []string
}

// Trusts reports whether a condition of source may make a machine
// unhealthy. Every source but a gateway token's is trusted: the machine
// itself (whatever its NATS reports call themselves — NATS permissions
// bind a machine to its own subjects), the Node read from the workload
// cluster, and the health-watcher's own Ready. A gateway token's
// ("ingest:<token>", IngestSource) is trusted when TrustedSources names it.
func (p Policy) Trusts(source string) bool {
	token, ok := strings.CutPrefix(source, IngestSourcePrefix)
	return !ok || slices.Contains(p.TrustedSources, token)
}

// IngestSourcePrefix starts the source of a health report that came
// through the gateway's ingest: ingest:<token name>.
const IngestSourcePrefix = "ingest:"

// IngestSource is the source the health-watcher records for a report the
// gateway ingested with the token named token.
func IngestSource(token string) string { return IngestSourcePrefix + token }

// Ingested reports whether source is that of a report ingested through the
// gateway (IngestSource).
func Ingested(source string) bool { return strings.HasPrefix(source, IngestSourcePrefix) }

// ExtensionReporter is the CloudEvents extension attribute the gateway sets
// on every health event it ingests: the name of the token that sent it
// (whatever the event said). The health-watcher records such a report with
// source IngestSource(reporter). A report without it came over NATS, from
// the machine the subject names.
const ExtensionReporter = "capnreporter"

// Defaults are what an unset field of the policy becomes.
type Defaults struct {
	UnhealthyConditions []Condition
	NodeStartupTimeout  time.Duration
	// MinNodeStartupTimeout raises a shorter (non-zero) startup timeout to
	// itself. The gateway refuses less than 30s; tests lower this floor.
	MinNodeStartupTimeout time.Duration
	HeartbeatGrace        time.Duration
	MaxUnhealthy          string
	MaxInFlight           int
}

// Built-in defaults (Cluster API's MachineHealthCheck and its usual
// unhealthy conditions, with capn's 40% circuit breaker).
const (
	DefaultNodeStartupTimeout    = 10 * time.Minute
	DefaultMinNodeStartupTimeout = 30 * time.Second
	DefaultHeartbeatGrace        = 2 * time.Minute
	DefaultMaxUnhealthy          = "40%"
	DefaultMaxInFlight           = 1
	DefaultConditionTimeout      = 5 * time.Minute
)

// Default returns capn's defaults: Ready=Unknown or Ready=False for 5
// minutes is unhealthy, nodes have 10 minutes to start, a node silent for 2
// minutes is Unknown, at most 40% of a pool unhealthy, one repair at a time.
func Default() Defaults {
	return Defaults{
		UnhealthyConditions: []Condition{
			{Type: "Ready", Status: "Unknown", Timeout: DefaultConditionTimeout},
			{Type: "Ready", Status: "False", Timeout: DefaultConditionTimeout},
		},
		NodeStartupTimeout:    DefaultNodeStartupTimeout,
		MinNodeStartupTimeout: DefaultMinNodeStartupTimeout,
		HeartbeatGrace:        DefaultHeartbeatGrace,
		MaxUnhealthy:          DefaultMaxUnhealthy,
		MaxInFlight:           DefaultMaxInFlight,
	}
}

// Fill returns d with its zero fields taken from Default(): what a
// service's configuration of the defaults means.
func (d Defaults) Fill() Defaults {
	def := Default()
	if len(d.UnhealthyConditions) == 0 {
		d.UnhealthyConditions = def.UnhealthyConditions
	}
	if d.NodeStartupTimeout <= 0 {
		d.NodeStartupTimeout = def.NodeStartupTimeout
	}
	if d.MinNodeStartupTimeout <= 0 {
		d.MinNodeStartupTimeout = def.MinNodeStartupTimeout
	}
	if d.HeartbeatGrace <= 0 {
		d.HeartbeatGrace = def.HeartbeatGrace
	}
	if d.MaxUnhealthy == "" {
		d.MaxUnhealthy = def.MaxUnhealthy
	}
	if d.MaxInFlight <= 0 {
		d.MaxInFlight = def.MaxInFlight
	}
	return d
}

// Resolve returns the effective policy of pool in cluster: the defaults,
// overridden field by field by the cluster's spec.health, then by the
// pool's health (worker pools only; a pool not in the spec, such as one
// being removed, takes the cluster's). A field is "set" when it is
// non-nil (durations), non-empty (lists, strings) or non-zero (counts);
// node_startup_timeout set to 0 disables the startup check.
//
// An unparsable max_unhealthy (the gateway refuses it, so only a hand-made
// record has one) keeps the inherited value and is reported in the error;
// the returned policy is always usable.
func Resolve(c *capnv1.Cluster, pool string, d Defaults) (Policy, error) {
	var errs []error
	p := Policy{
		UnhealthyConditions: slices.Clone(d.UnhealthyConditions),
		NodeStartupTimeout:  d.NodeStartupTimeout,
		HeartbeatGrace:      d.HeartbeatGrace,
		MaxInFlight:         d.MaxInFlight,
	}
	th, err := ParseThreshold(d.MaxUnhealthy)
	if err != nil {
		errs = append(errs, fmt.Errorf("default max unhealthy: %w", err))
		th = Threshold{kind: percent, a: 40}
	}
	p.MaxUnhealthy = th
	errs = append(errs, p.apply(c.GetSpec().GetHealth(), "cluster"))
	if pool != ControlPlanePool {
		for _, wp := range c.GetSpec().GetWorkerPools() {
			if wp.GetName() == pool {
				errs = append(errs, p.apply(wp.GetHealth(), "pool "+pool))
			}
		}
	}
	if p.NodeStartupTimeout > 0 && p.NodeStartupTimeout < d.MinNodeStartupTimeout {
		p.NodeStartupTimeout = d.MinNodeStartupTimeout
	}
	if p.HeartbeatGrace <= 0 {
		p.HeartbeatGrace = DefaultHeartbeatGrace
	}
	if p.MaxInFlight <= 0 {
		p.MaxInFlight = DefaultMaxInFlight
	}
	return p, errors.Join(errs...)
}

// apply overrides p with the fields set in h.
func (p *Policy) apply(h *capnv1.HealthPolicy, where string) error {
	if h == nil {
		return nil
	}
	if len(h.GetUnhealthyConditions()) > 0 {
		p.UnhealthyConditions = p.UnhealthyConditions[:0:0]
		for _, c := range h.GetUnhealthyConditions() {
			p.UnhealthyConditions = append(p.UnhealthyConditions, Condition{
				Type: c.GetType(), Status: c.GetStatus(), Timeout: c.GetTimeout().AsDuration(),
			})
		}
	}
	if h.NodeStartupTimeout != nil {
		p.NodeStartupTimeout = max(h.GetNodeStartupTimeout().AsDuration(), 0)
	}
	if g := h.GetHeartbeatGrace().AsDuration(); g > 0 {
		p.HeartbeatGrace = g
	}
	if h.GetMaxInFlight() > 0 {
		p.MaxInFlight = int(h.GetMaxInFlight())
	}
	if len(h.GetTrustedSources()) > 0 {
		p.TrustedSources = slices.Clone(h.GetTrustedSources())
	}
	if s := h.GetMaxUnhealthy(); s != "" {
		th, err := ParseThreshold(s)
		if err != nil {
			return fmt.Errorf("%s max unhealthy: %w", where, err)
		}
		p.MaxUnhealthy = th
	}
	return nil
}

// Pools lists the pools of c that have machines: the control plane and
// every worker pool, in spec order.
func Pools(c *capnv1.Cluster) []string {
	out := []string{ControlPlanePool}
	for _, wp := range c.GetSpec().GetWorkerPools() {
		out = append(out, wp.GetName())
	}
	return out
}

// Replicas is the number of machines pool should have (0 for a pool that
// is not in the spec).
func Replicas(c *capnv1.Cluster, pool string) int {
	if pool == ControlPlanePool {
		return int(c.GetSpec().GetControlPlane().GetReplicas())
	}
	for _, wp := range c.GetSpec().GetWorkerPools() {
		if wp.GetName() == pool {
			return int(wp.GetReplicas())
		}
	}
	return 0
}

// ExtensionHealthTime is the CloudEvents extension attribute of a
// machine.unhealthy event (MachineUnhealthy) that carries when the health
// input that made the machine unhealthy reached capn — or, for a verdict
// that time alone brought, when the policy's timeout ran out — in RFC 3339.
// The health-watcher sets it; the remediator measures its repair latency
// from it. It lives here, with the policy both services read, so neither
// imports the other.
const ExtensionHealthTime = "capnhealthtime"
