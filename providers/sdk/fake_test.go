package sdk_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// fake is an in-memory provider for the SDK's tests (NATS is real; only
// the infrastructure is pretend). Creates are synchronous and Running at
// once. Safe for concurrent use.
type fake struct {
	mu       sync.Mutex
	machines map[string]*capnv1.InfraMachine
	clusters map[string]*capnv1.InfraCluster
	creates  map[string]int
	// createErr, when set, is returned by the n-th create call (from 1)
	// of a machine when it returns non-nil.
	createErr func(n int) error
	env       chan sdk.Env
}

func newFake() *fake {
	return &fake{
		machines: map[string]*capnv1.InfraMachine{},
		clusters: map[string]*capnv1.InfraCluster{},
		creates:  map[string]int{},
		env:      make(chan sdk.Env, 1),
	}
}

func key(c, m string) string { return c + "/" + m }

func (f *fake) Name() string           { return "fake" }
func (f *fake) Capabilities() []string { return []string{sdk.CapabilityStopStart} }

func (f *fake) EnsureCluster(_ context.Context, c string, _ map[string]string) (*capnv1.InfraCluster, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ic := f.clusters[c]
	if ic == nil {
		ic = &capnv1.InfraCluster{Ready: true, ControlPlaneEndpoint: &capnv1.Endpoint{Host: "127.0.0.1", Port: 6443}}
		f.clusters[c] = ic
	}
	return proto.Clone(ic).(*capnv1.InfraCluster), nil
}

func (f *fake) DeleteCluster(_ context.Context, c string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.clusters, c)
	return nil
}

func (f *fake) CreateMachine(_ context.Context, req *capnv1.CreateMachine) (*capnv1.InfraMachine, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := key(req.GetCluster(), req.GetMachine())
	f.creates[k]++
	if f.createErr != nil {
		if err := f.createErr(f.creates[k]); err != nil {
			return nil, err
		}
	}
	if m, ok := f.machines[k]; ok {
		return proto.Clone(m).(*capnv1.InfraMachine), nil
	}
	m := &capnv1.InfraMachine{
		Cluster: req.GetCluster(), Machine: req.GetMachine(), State: sdk.StateRunning.Wire(),
		ProviderId: fmt.Sprintf("fake://%s/%s", req.GetCluster(), req.GetMachine()),
		Updated:    timestamppb.Now(),
	}
	f.machines[k] = m
	return proto.Clone(m).(*capnv1.InfraMachine), nil
}

func (f *fake) DeleteMachine(_ context.Context, c, m string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.machines, key(c, m))
	return nil
}

func (f *fake) Describe(_ context.Context, c, m string) (*capnv1.InfraMachine, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	im, ok := f.machines[key(c, m)]
	if !ok {
		return nil, sdk.ErrNotFound
	}
	return proto.Clone(im).(*capnv1.InfraMachine), nil
}

func (f *fake) List(context.Context) ([]*capnv1.InfraMachine, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*capnv1.InfraMachine, 0, len(f.machines))
	for _, m := range f.machines {
		out = append(out, proto.Clone(m).(*capnv1.InfraMachine))
	}
	return out, nil
}

func (f *fake) Stop(_ context.Context, c, m string) error { return f.setState(c, m, sdk.StateStopped) }

func (f *fake) Start(_ context.Context, c, m string) error { return f.setState(c, m, sdk.StateRunning) }

func (f *fake) Reboot(_ context.Context, c, m string) error {
	return f.setState(c, m, sdk.StateRunning)
}

func (f *fake) setState(c, m string, state capnv1.InfraState) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	im, ok := f.machines[key(c, m)]
	if !ok {
		return sdk.ErrNotFound
	}
	if im.GetStateValue() != state {
		im.State, im.Updated = state.Wire(), timestamppb.Now()
	}
	return nil
}

// Run hands the test the SDK's Env.
func (f *fake) Run(ctx context.Context, env sdk.Env) error {
	f.env <- env
	<-ctx.Done()
	return nil
}

// outOfBand changes the fake's reality without telling the SDK.
func (f *fake) outOfBand(fn func(map[string]*capnv1.InfraMachine)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.machines)
}

func (f *fake) createCalls(c, m string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.creates[key(c, m)]
}

// noPower is a provider without PowerController.
type noPower struct{ p *fake }

func (n noPower) Name() string           { return n.p.Name() }
func (n noPower) Capabilities() []string { return nil }
func (n noPower) EnsureCluster(ctx context.Context, c string, p map[string]string) (*capnv1.InfraCluster, error) {
	return n.p.EnsureCluster(ctx, c, p)
}
func (n noPower) DeleteCluster(ctx context.Context, c string) error { return n.p.DeleteCluster(ctx, c) }
func (n noPower) CreateMachine(ctx context.Context, r *capnv1.CreateMachine) (*capnv1.InfraMachine, error) {
	return n.p.CreateMachine(ctx, r)
}
func (n noPower) DeleteMachine(ctx context.Context, c, m string) error {
	return n.p.DeleteMachine(ctx, c, m)
}
func (n noPower) Describe(ctx context.Context, c, m string) (*capnv1.InfraMachine, error) {
	return n.p.Describe(ctx, c, m)
}
func (n noPower) List(ctx context.Context) ([]*capnv1.InfraMachine, error) {
	return n.p.List(ctx)
}

// fastOptions keep the tests quick: frequent reconcile and announcements.
func fastOptions() sdk.Options {
	return sdk.Options{ReconcileEvery: 200 * time.Millisecond, AnnounceEvery: 100 * time.Millisecond, Instance: "test", MaxDeliver: 3}
}
