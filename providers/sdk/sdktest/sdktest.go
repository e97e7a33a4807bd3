// Package sdktest runs providers in tests against a real embedded
// nats-server (events/natstest) and reads back what they did: observed
// records, node heartbeats, drift reports and announcements. It never
// mocks NATS. Every helper fails the test on error and polls rather than
// sleeps.
package sdktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/daemon"
)

// Timeout is how long the Wait helpers poll by default.
const Timeout = 10 * time.Second

// Env is one embedded server with capn's topology provisioned.
type Env struct {
	T      testing.TB
	Server *natstest.Server
	JS     jetstream.JetStream
	// Pub publishes commands with source capn/test.
	Pub *events.Publisher
	// WaitTimeout is how long the Wait helpers poll (0: Timeout). A
	// provider whose infrastructure is slow to answer on a loaded machine
	// (a container's start) sets more.
	WaitTimeout time.Duration

	machines      *store.Bucket[*capnv1.InfraMachine]
	clusters      *store.Bucket[*capnv1.InfraCluster]
	announcements *store.Bucket[*capnv1.ProviderAnnouncement]

	mu      sync.Mutex
	metrics *prometheus.Registry // the last Run's
}

// New starts a server, provisions events.DefaultTopology(1) and connects.
func New(t testing.TB) *Env {
	t.Helper()
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatalf("provision: %v", err)
	}
	kv, err := js.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		t.Fatalf("observed bucket: %v", err)
	}
	return &Env{
		T: t, Server: srv, JS: js, Pub: events.NewPublisher(js, "capn/test"),
		machines:      store.NewBucket(kv, store.New[capnv1.InfraMachine]()),
		clusters:      store.NewBucket(kv, store.New[capnv1.InfraCluster]()),
		announcements: store.NewBucket(kv, store.New[capnv1.ProviderAnnouncement]()),
	}
}

// Logger is a test logger: to the test log when -v, silent otherwise.
func Logger(t testing.TB) zerolog.Logger {
	if !testing.Verbose() {
		return zerolog.Nop()
	}
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel).With().Timestamp().Logger()
}

// Run runs svc through daemon.Run (the path a deployment takes, without
// HTTP) until the returned stop is called or the test ends. stop waits for
// a clean return and fails the test otherwise; it is idempotent.
func (e *Env) Run(svc daemon.Service) (stop func()) {
	e.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := daemon.Config{Name: svc.Name(), NATS: daemon.NATSConfig{URL: e.Server.URL()}, SkipProvision: true}
	reg := prometheus.NewRegistry()
	e.mu.Lock()
	e.metrics = reg
	e.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, cfg, svc, daemon.WithoutHTTP(), daemon.WithRegistry(reg), daemon.WithLogger(Logger(e.T)))
	}()
	stopped := false
	stop = func() {
		e.T.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.T.Errorf("%s: %v", svc.Name(), err)
			}
		case <-time.After(20 * time.Second):
			e.T.Errorf("%s did not stop", svc.Name())
		}
	}
	e.T.Cleanup(stop)
	return stop
}

// Counter is the sum of the counter name over all its labels in the
// metrics of the service the last Run started (a restarted service counts
// from 0); 0 before it registered the counter.
func (e *Env) Counter(name string) float64 {
	e.T.Helper()
	e.mu.Lock()
	reg := e.metrics
	e.mu.Unlock()
	if reg == nil {
		return 0
	}
	fams, err := reg.Gather()
	if err != nil {
		e.T.Fatalf("gather metrics: %v", err)
	}
	var n float64
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// target is what every provider command names.
type target interface {
	proto.Message
	GetCluster() string
}

// Send publishes a command of kind and verb to provider with event id id.
// The subject's cluster and object come from msg (GetMachine, or "_" for a
// cluster command).
func (e *Env) Send(provider, kind, verb, id string, msg target) {
	e.T.Helper()
	object := events.ClusterObject
	if m, ok := msg.(interface{ GetMachine() string }); ok && kind == sdk.KindMachine {
		object = m.GetMachine()
	}
	subject := events.ProviderSubject(provider, kind, verb, msg.GetCluster(), object)
	if _, err := e.Pub.Publish(context.Background(), subject, sdk.CommandType(kind, verb), id, msg); err != nil {
		e.T.Fatalf("send %s: %v", subject, err)
	}
}

// Machine reads infra.<provider>.<cluster>.<machine>; ok is false when it
// does not exist.
func (e *Env) Machine(provider, cluster, machine string) (*capnv1.InfraMachine, bool) {
	e.T.Helper()
	m, _, err := e.machines.Get(context.Background(), sdk.InfraKey(provider, cluster, machine))
	if errors.Is(err, store.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		e.T.Fatalf("read machine: %v", err)
	}
	return m, true
}

// Cluster reads infra.<provider>.<cluster>._.
func (e *Env) Cluster(provider, cluster string) (*capnv1.InfraCluster, bool) {
	e.T.Helper()
	c, _, err := e.clusters.Get(context.Background(), sdk.InfraClusterKey(provider, cluster))
	if errors.Is(err, store.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		e.T.Fatalf("read cluster: %v", err)
	}
	return c, true
}

// Announcement reads provider.<provider>.
func (e *Env) Announcement(provider string) (*capnv1.ProviderAnnouncement, bool) {
	e.T.Helper()
	a, _, err := e.announcements.Get(context.Background(), sdk.AnnouncementKey(provider))
	if errors.Is(err, store.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		e.T.Fatalf("read announcement: %v", err)
	}
	return a, true
}

// Keys lists observed keys under prefix.
func (e *Env) Keys(prefix string) []string {
	e.T.Helper()
	keys, err := e.machines.Keys(context.Background(), prefix)
	if err != nil {
		e.T.Fatalf("keys %s: %v", prefix, err)
	}
	return keys
}

// WaitMachine polls until the machine's record exists and cond holds, and
// returns it.
func (e *Env) WaitMachine(provider, cluster, machine string, what string, cond func(*capnv1.InfraMachine) bool) *capnv1.InfraMachine {
	e.T.Helper()
	var got *capnv1.InfraMachine
	natstest.WaitFor(e.T, e.waitTimeout(), fmt.Sprintf("%s/%s %s", cluster, machine, what), func() bool {
		m, ok := e.Machine(provider, cluster, machine)
		if ok && cond(m) {
			got = m
			return true
		}
		return false
	})
	return got
}

// WaitState waits for the machine's state.
func (e *Env) WaitState(provider, cluster, machine string, state capnv1.InfraState) *capnv1.InfraMachine {
	e.T.Helper()
	return e.WaitMachine(provider, cluster, machine, "state "+state.Wire(), func(m *capnv1.InfraMachine) bool {
		return m.GetStateValue() == state
	})
}

// WaitNoMachine waits until the machine's record is gone.
func (e *Env) WaitNoMachine(provider, cluster, machine string) {
	e.T.Helper()
	natstest.WaitFor(e.T, e.waitTimeout(), fmt.Sprintf("%s/%s record deleted", cluster, machine), func() bool {
		_, ok := e.Machine(provider, cluster, machine)
		return !ok
	})
}

func (e *Env) waitTimeout() time.Duration {
	if e.WaitTimeout > 0 {
		return e.WaitTimeout
	}
	return Timeout
}

// WaitDrained waits until every command in the providers work queue was
// acked or terminated.
func (e *Env) WaitDrained() {
	e.T.Helper()
	natstest.WaitFor(e.T, e.waitTimeout(), "provider commands handled", func() bool {
		return e.Pending(events.StreamProviders) == 0
	})
}

// Pending is the number of messages left in a stream.
func (e *Env) Pending(stream string) uint64 {
	e.T.Helper()
	s, err := e.JS.Stream(context.Background(), stream)
	if err != nil {
		e.T.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		e.T.Fatalf("stream %s info: %v", stream, err)
	}
	return info.State.Msgs
}

// Last returns the last event on subject in stream decoded into msg, with
// its CloudEvent id; ok is false when there is none.
func (e *Env) Last(stream, subject string, msg proto.Message) (id string, ok bool) {
	e.T.Helper()
	s, err := e.JS.Stream(context.Background(), stream)
	if err != nil {
		e.T.Fatalf("stream %s: %v", stream, err)
	}
	raw, err := s.GetLastMsgForSubject(context.Background(), subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", false
	}
	if err != nil {
		e.T.Fatalf("last message on %s: %v", subject, err)
	}
	ev, err := events.FromMsg(raw.Header, raw.Data)
	if err != nil {
		e.T.Fatalf("decode event on %s: %v", subject, err)
	}
	if err := events.DataAs(ev, msg); err != nil {
		e.T.Fatalf("decode data on %s: %v", subject, err)
	}
	return ev.ID(), true
}

// Count is the number of messages stored on subject (wildcards allowed).
func (e *Env) Count(stream, subject string) uint64 {
	e.T.Helper()
	s, err := e.JS.Stream(context.Background(), stream)
	if err != nil {
		e.T.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		e.T.Fatalf("stream %s info: %v", stream, err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// LastDrift returns the last drift report of a machine (from any provider).
func (e *Env) LastDrift(cluster, machine string) (*capnv1.DriftReport, bool) {
	e.T.Helper()
	d := new(capnv1.DriftReport)
	_, ok := e.Last(events.StreamEvents, sdk.DriftSubject("*", cluster, machine), d)
	return d, ok
}

// WaitDrift waits for a drift report of kind for a machine.
func (e *Env) WaitDrift(cluster, machine, kind string) *capnv1.DriftReport {
	e.T.Helper()
	var got *capnv1.DriftReport
	natstest.WaitFor(e.T, e.waitTimeout(), fmt.Sprintf("drift %s of %s/%s", kind, cluster, machine), func() bool {
		d, ok := e.LastDrift(cluster, machine)
		if ok && d.GetKind() == kind {
			got = d
			return true
		}
		return false
	})
	return got
}

// LastHeartbeat returns the last node heartbeat of a machine and its event id.
func (e *Env) LastHeartbeat(cluster, machine string) (*capnv1.NodeHeartbeat, string, bool) {
	e.T.Helper()
	hb := new(capnv1.NodeHeartbeat)
	id, ok := e.Last(events.StreamHealth, events.HealthSubject(cluster, machine, "heartbeat"), hb)
	return hb, id, ok
}

// AnswerCredentials stands in for the bootstrapper's answer to provider's
// bootstrap credential requests (sdk.BootstrapCredential): every machine
// of the provider gets credential. Use it for a NodeAgentProvider run
// without a bootstrapper.
func (e *Env) AnswerCredentials(provider, credential string) {
	e.T.Helper()
	nc, _ := e.Server.Connect(e.T)
	sub, err := nc.Subscribe(events.Subject(sdk.BootstrapCredentialRoot, provider, "*", "*"), func(m *nats.Msg) {
		_ = m.Respond([]byte(credential))
	})
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() { _ = sub.Unsubscribe() })
}
