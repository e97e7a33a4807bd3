package health

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/services/health-watcher"
	"github.com/capn-dev/capn/services/remediator"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// lone is the health-watcher and the remediator alone, on a cluster
// "once" (one control-plane machine, md-0 of w-0, w-1, w-2, all Running
// with their node ready) written as the planner and the machine-manager
// write it: nothing else writes a node record or wakes the remediator. The
// provider announces no reboot, so a repair is a replacement.
type lone struct {
	*harness.System
	name string
	mu   sync.Mutex
	// reconciles are when the remediator's reconciles of the cluster began.
	reconciles []time.Time
}

func newLone(t *testing.T) *lone {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	l := &lone{}
	l.System = harness.New(t, harness.Options{Services: map[string]func(*harness.Factory) daemon.Service{
		healthwatcher.Name: func(*harness.Factory) daemon.Service { return healthwatcher.New(healthwatcher.Config{}) },
		remediator.Name: func(*harness.Factory) daemon.Service {
			return remediator.New(remediator.Config{OnReconcile: func(string) {
				l.mu.Lock()
				defer l.mu.Unlock()
				l.reconciles = append(l.reconciles, time.Now())
			}})
		},
	}})
	ctx := context.Background()
	l.name = l.Apply(cluster("once", 1, 3, kernelDeadlock)).GetMetadata().GetName()
	created := timestamppb.New(time.Now().Add(-time.Minute))
	for _, m := range []struct{ name, pool, role string }{
		{"cp-0", policy.ControlPlanePool, "control-plane"}, {"w-0", "md-0", "worker"}, {"w-1", "md-0", "worker"}, {"w-2", "md-0", "worker"},
	} {
		if _, err := l.Machines.Create(ctx, keys.Machine(l.name, m.name), &capnv1.Machine{
			Metadata: &capnv1.ObjectMeta{Name: m.name, Uid: "u-" + m.name, CreationTimestamp: created},
			Spec:     &capnv1.MachineSpec{Cluster: l.name, Pool: m.pool, Role: m.role, Provider: "sim", Version: "v1.34.2"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.MachineStatuses.Create(ctx, keys.Machine(l.name, m.name), &capnv1.MachineStatus{Phase: "Running", PhaseSince: created,
			InfrastructureReadyTime: created, NodeReadyTime: created}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.ClusterStatuses.Create(ctx, keys.Cluster(l.name), &capnv1.ClusterStatus{ControlPlaneInitialized: true}); err != nil {
		t.Fatal(err)
	}
	return l
}

// start starts both services and waits until their consumers exist and
// the remediator took its first look at the cluster (its watch caches
// replay every record when it starts; it writes the pools' statuses).
func (l *lone) start(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	l.StartAll(healthwatcher.Name, remediator.Name)
	for _, c := range []struct{ stream, durable string }{
		{events.StreamHealth, healthwatcher.Name + "-health"}, {events.StreamEvents, remediator.Name + "-unhealthy"},
	} {
		natstest.WaitFor(t, 10*time.Second, "consumer "+c.durable, func() bool {
			_, err := l.JS.Consumer(ctx, c.stream, c.durable)
			return err == nil
		})
	}
	rems := store.NewBucket(l.Observed, func() *capnv1.RemediationStatus { return new(capnv1.RemediationStatus) })
	natstest.WaitFor(t, 10*time.Second, "the remediator's first look", func() bool {
		_, _, err1 := rems.Get(ctx, keys.Remediation(l.name, "md-0"))
		_, _, err2 := rems.Get(ctx, keys.Remediation(l.name, policy.ControlPlanePool))
		return err1 == nil && err2 == nil
	})
}

// replaced waits until the remediator asked for machine's replacement and
// returns when (its deletion_timestamp).
func (l *lone) replaced(t *testing.T, machine string) time.Time {
	t.Helper()
	var at time.Time
	natstest.WaitFor(t, 20*time.Second, machine+" replaced by the remediator", func() bool {
		m, _, err := l.Machines.Get(context.Background(), keys.Machine(l.name, machine))
		if err != nil || m.GetMetadata().GetDeletionTimestamp() == nil {
			return false
		}
		at = m.GetMetadata().GetDeletionTimestamp().AsTime()
		return true
	})
	return at
}

// reconciled counts the remediator's reconciles that began in (from, to].
func (l *lone) reconciled(from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, at := range l.reconciles {
		if at.After(from) && !at.After(to) {
			n++
		}
	}
	return n
}

// unhealthyEvents counts the machine.unhealthy events of machine.
func (l *lone) unhealthyEvents(t *testing.T, machine string) uint64 {
	t.Helper()
	ctx := context.Background()
	stream, err := l.JS.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	subject := events.EventSubject("machine", "unhealthy", l.name, machine)
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}

// TestOneWriteAndOneWakePerHealthChange counts what one health change
// costs: a KernelDeadlock=True report about a worker is merged into its
// record and judged in ONE write of node.<c>.<m> (the report and the
// verdict together; it was two: the report, then the verdict), one
// machine.unhealthy event is published, and the remediator is woken once
// by that write — then once more when the verdict is Settle old, and acts
// (it was four reconciles: each write and the event woke it).
func TestOneWriteAndOneWakePerHealthChange(t *testing.T) {
	const victim = "w-0"
	l := newLone(t)
	l.start(t)
	ctx := context.Background()
	watch, err := l.Observed.Watch(ctx, keys.Node(l.name, victim), jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Stop() }()
	var (
		mu     sync.Mutex
		writes []*capnv1.NodeHealth
	)
	go func() {
		for e := range watch.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			h, err := store.Decode(e.Value(), func() *capnv1.NodeHealth { return new(capnv1.NodeHealth) })
			if err != nil {
				continue
			}
			mu.Lock()
			writes = append(writes, h)
			mu.Unlock()
		}
	}()

	// One change: KernelDeadlock=True, as capn-npd-bridge reports it.
	start := time.Now()
	w := &world{t: t, pub: events.NewPublisher(l.JS, "capn/tests/health")}
	w.conditions(l.name, victim, "KernelDeadlock", "True", "DockerHung", start)
	deleted := l.replaced(t, victim)

	mu.Lock()
	got := slices.Clone(writes)
	mu.Unlock()
	if len(got) != 1 {
		t.Errorf("node.%s.%s written %d times for one condition change; want 1 (the report and its verdict together)", l.name, victim, len(got))
	}
	if len(got) == 0 {
		t.FailNow()
	}
	if last := got[len(got)-1]; last.GetHealthy() || !slices.ContainsFunc(last.GetUnhealthyReasons(), func(c *capnv1.Condition) bool { return c.GetType() == "KernelDeadlock" }) {
		t.Errorf("the record is not unhealthy for KernelDeadlock: %v", last)
	}
	if n := l.unhealthyEvents(t, victim); n != 1 {
		t.Errorf("%d machine.unhealthy events; want 1", n)
	}
	// One wake for the verdict's write, one when it is Settle old (the
	// remediator counts a burst together before it acts).
	woken := l.reconciled(start, deleted)
	if woken != 2 {
		t.Errorf("the remediator reconciled the cluster %d times from the report to the repair; want 2 (the verdict's write, then Settle later)", woken)
	}
	t.Logf("one KernelDeadlock report: %d write(s) of the record, %d remediator reconcile(s) to the repair (%s after the report)",
		len(got), woken, deleted.Sub(start).Round(time.Millisecond))
}

// TestVerdictRederivedAtStart: a record that holds a report but not its
// verdict — what a watcher that died between merging and judging would
// leave, or the first of the two writes of a version before this one —
// is judged when the watcher starts (its watch caches replay every
// record), with no new report: the verdict is written, the episode
// announced, and the remediator, started with it, repairs the machine.
// Nothing waits for the next change or the cache's resync (5 minutes).
func TestVerdictRederivedAtStart(t *testing.T) {
	const victim = "w-1"
	l := newLone(t)
	now := time.Now()
	nodes := store.NewBucket(l.Observed, func() *capnv1.NodeHealth { return new(capnv1.NodeHealth) })
	if _, err := nodes.Create(context.Background(), keys.Node(l.name, victim), &capnv1.NodeHealth{Cluster: l.name, Machine: victim,
		Healthy: true, Updated: timestamppb.New(now),
		Conditions: []*capnv1.NodeCondition{{Type: "KernelDeadlock", Status: "True", Reason: "DockerHung", Source: "test",
			LastTransitionTime: timestamppb.New(now), LastHeartbeatTime: timestamppb.New(now)}}}); err != nil {
		t.Fatal(err)
	}
	l.start(t)
	l.replaced(t, victim)
	h, _, err := nodes.Get(context.Background(), keys.Node(l.name, victim))
	if err != nil {
		t.Fatal(err)
	}
	if h.GetHealthy() || len(h.GetUnhealthyReasons()) == 0 {
		t.Errorf("the verdict was not written: %v", h)
	}
	if n := l.unhealthyEvents(t, victim); n != 1 {
		t.Errorf("%d machine.unhealthy events; want 1", n)
	}
}
