package sim

import (
	"container/heap"
	"context"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Name is the provider's name: it consumes capn.provider.sim.> and owns
// infra.sim.* in observed KV.
const Name = "sim"

// Provider is the simulated provider. Every method is safe for concurrent
// use; all state is behind one mutex, and no method blocks on I/O (the
// SDK does the NATS work, the scheduler in Run publishes heartbeats).
type Provider struct {
	opts Options
	now  func() time.Time

	mu       sync.Mutex
	machines map[string]*machine // by cluster/machine
	clusters map[string]*capnv1.InfraCluster
	lastIP   map[string]uint32 // by cluster: the last InternalIP index given out
	sched    schedule
	stamped  time.Time // the last updated time given out

	wake chan struct{}           // the scheduler's next entry moved earlier
	env  atomic.Pointer[sdk.Env] // set by Run
}

var (
	_ sdk.Provider        = (*Provider)(nil)
	_ sdk.PowerController = (*Provider)(nil)
	_ sdk.Runner          = (*Provider)(nil)
	_ sdk.Adopter         = (*Provider)(nil)
	_ sdk.Orphaner        = (*Provider)(nil)
	_ sdk.CommandHandler  = (*Provider)(nil)
)

// machine is one simulated machine.
type machine struct {
	im      *capnv1.InfraMachine // what Describe returns (cloned)
	version string               // the node's kubelet version
	// gen invalidates pending boot and heartbeat entries: it changes when
	// the machine stops, starts or reboots.
	gen      uint64
	vanishAt time.Time // zero unless it is due to vanish
}

// New returns a simulated provider with opts (see Options).
func New(opts Options) (*Provider, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	return &Provider{
		opts:     opts.withDefaults(),
		now:      time.Now,
		machines: map[string]*machine{},
		clusters: map[string]*capnv1.InfraCluster{},
		lastIP:   map[string]uint32{},
		wake:     make(chan struct{}, 1),
	}, nil
}

// Name is "sim".
func (p *Provider) Name() string { return Name }

// Capabilities: stop-start and reboot.
func (p *Provider) Capabilities() []string {
	return []string{sdk.CapabilityStopStart, sdk.CapabilityReboot}
}

// OperatingSystems implements sdk.OperatingSystemer: a simulated machine
// runs nothing, so it stands in for a machine of any os.
func (p *Provider) OperatingSystems() []string {
	return []string{sdk.OSLinux, sdk.OSWindows}
}

func key(cluster, machine string) string { return cluster + "/" + machine }

// ProviderID is the provider id of a simulated machine: sim://<cluster>/<machine>.
func ProviderID(cluster, machine string) string { return "sim://" + cluster + "/" + machine }

// CreateMachine records a new machine as Creating and schedules its boot
// after BootLatency (+ jitter); an existing one is returned as it is. A
// machine chosen by CreateFailureRate fails with a permanent error.
func (p *Provider) CreateMachine(_ context.Context, req *capnv1.CreateMachine) (*capnv1.InfraMachine, error) {
	c, name := req.GetCluster(), req.GetMachine()
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.machines[key(c, name)]; ok {
		return clone(m.im), nil
	}
	if rate := p.opts.CreateFailureRate; rate > 0 && roll(p.opts.Seed, "create", c, name) < rate {
		return nil, sdk.Permanent(fmt.Errorf("sim: injected create failure (create failure rate %g)", rate))
	}
	p.lastIP[c]++
	m := &machine{
		im: &capnv1.InfraMachine{
			Provider: Name, Cluster: c, Machine: name,
			ProviderId: ProviderID(c, name),
			Addresses: []*capnv1.Address{
				{Type: "InternalIP", Address: ipOf(p.lastIP[c])},
				{Type: "Hostname", Address: name},
			},
			State:         sdk.StateCreating.Wire(),
			Message:       message(sdk.StateCreating, req.GetVersion()),
			Updated:       p.stamp(),
			FailureDomain: req.GetTemplate().GetFailureDomain(),
		},
		version: req.GetVersion(),
		gen:     1,
	}
	p.machines[key(c, name)] = m
	p.push(entry{at: p.now().Add(p.bootDelay(c, name)), key: key(c, name), gen: m.gen, kind: evBoot})
	return clone(m.im), nil
}

// DeleteMachine forgets a machine and its pending boot and heartbeats; a
// missing machine is fine.
func (p *Provider) DeleteMachine(_ context.Context, cluster, machine string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.machines, key(cluster, machine))
	return nil
}

// Describe returns a copy of the machine, or sdk.ErrNotFound.
func (p *Provider) Describe(_ context.Context, cluster, machine string) (*capnv1.InfraMachine, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.machines[key(cluster, machine)]
	if !ok {
		return nil, sdk.ErrNotFound
	}
	return clone(m.im), nil
}

// List returns a copy of every machine.
func (p *Provider) List(context.Context) ([]*capnv1.InfraMachine, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*capnv1.InfraMachine, 0, len(p.machines))
	for _, m := range p.machines {
		out = append(out, clone(m.im))
	}
	return out, nil
}

// stamp is now as an updated time, strictly after the last one given out,
// so that the SDK orders two states of a machine however close they are.
// p.mu must be held.
func (p *Provider) stamp() *timestamppb.Timestamp {
	t := p.now()
	if !t.After(p.stamped) {
		t = p.stamped.Add(time.Nanosecond)
	}
	p.stamped = t
	return timestamppb.New(t)
}

// bootDelay is BootLatency plus this machine's share of BootJitter.
func (p *Provider) bootDelay(cluster, machine string) time.Duration {
	return p.opts.BootLatency + spread(p.opts.BootJitter, p.opts.Seed, "boot", cluster, machine)
}

// setState changes a machine's state, message and updated time. p.mu must
// be held.
func (p *Provider) setState(m *machine, state capnv1.InfraState) {
	m.im.State, m.im.Message, m.im.Updated = state.Wire(), message(state, m.version), p.stamp()
}

// push schedules e and wakes the scheduler if e is now the first entry.
// p.mu must be held.
func (p *Provider) push(e entry) {
	heap.Push(&p.sched, e)
	if p.sched[0].at.Equal(e.at) {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

func clone(m *capnv1.InfraMachine) *capnv1.InfraMachine {
	return proto.Clone(m).(*capnv1.InfraMachine)
}

// ipOf is the simulated InternalIP number n of a cluster: 10.0.0.1 on.
// Each cluster is its own simulated network.
func ipOf(n uint32) string {
	return fmt.Sprintf("10.%d.%d.%d", byte(n>>16), byte(n>>8), byte(n))
}

// ipIndex is the inverse of ipOf (0 if addr is not one).
func ipIndex(addr string) uint32 {
	var a, b, c, d uint32
	if _, err := fmt.Sscanf(addr, "%d.%d.%d.%d", &a, &b, &c, &d); err != nil || a != 10 {
		return 0
	}
	return b<<16 | c<<8 | d
}

// The record's message carries the node's kubelet version, so that a
// restarted provider re-adopts it from observed KV (InfraMachine has no
// field for it).
var versionInMessage = regexp.MustCompile(`kubelet (\S+)`)

func message(state capnv1.InfraState, version string) string {
	v := version
	if v == "" {
		v = "unknown"
	}
	switch state {
	case sdk.StateCreating:
		return "simulated machine booting (no VM); its node will report kubelet " + v
	case sdk.StateStopped:
		return "simulated machine stopped (no VM); its node reports kubelet " + v + " when started"
	default:
		return "simulated machine running (no VM, no kubelet); its node reports kubelet " + v
	}
}

func versionOf(msg string) string {
	m := versionInMessage.FindStringSubmatch(msg)
	if m == nil || m[1] == "unknown" {
		return ""
	}
	return m[1]
}
