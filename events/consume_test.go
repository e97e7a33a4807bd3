package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// setup provisions capn's topology on a fresh real server.
func setup(t *testing.T) (*natstest.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv := natstest.Start(t)
	nc, js := srv.Connect(t)
	if err := events.Provision(context.Background(), js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	return srv, nc, js
}

func run(t *testing.T, c *events.Consumer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("consumer: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("consumer did not stop within 10s of cancel")
		}
	})
}

func TestProvisionIsIdempotent(t *testing.T) {
	_, _, js := setup(t)
	for range 2 {
		if err := events.Provision(context.Background(), js, events.DefaultTopology(1)); err != nil {
			t.Fatalf("second provision: %v", err)
		}
	}
	for _, b := range []string{events.BucketDesired, events.BucketObserved, events.BucketSecrets} {
		if _, err := js.KeyValue(context.Background(), b); err != nil {
			t.Errorf("bucket %s: %v", b, err)
		}
	}
}

func TestDuplicatePublishStoredOnce(t *testing.T) {
	_, _, js := setup(t)
	p := events.NewPublisher(js, "capn/test")
	subj := events.EventSubject("machine", "provisioned", "c1", "m1")
	data := &capnv1.MachineEvent{Cluster: "c1", Machine: "m1", Phase: "Provisioned"}
	first, err := p.Publish(context.Background(), subj, "dev.capn.machine.provisioned", "evt-1", data)
	if err != nil {
		t.Fatal(err)
	}
	second, err := p.Publish(context.Background(), subj, "dev.capn.machine.provisioned", "evt-1", data)
	if err != nil {
		t.Fatal(err)
	}
	if first.Duplicate || !second.Duplicate || first.Sequence != second.Sequence {
		t.Fatalf("acks: first %+v, second %+v; want second to be the duplicate of the first", first, second)
	}
	if _, err := p.Publish(context.Background(), subj, "dev.capn.machine.provisioned", "evt-2", data); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(context.Background(), events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := st.Info(context.Background())
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2 (evt-1 once, evt-2)", info.State.Msgs)
	}
}

func TestHandlerErrorRetriesWithBackoffThenSucceeds(t *testing.T) {
	_, _, js := setup(t)
	var mu sync.Mutex
	var times []time.Time
	h := events.Typed(func(ctx context.Context, m *events.Message, d *capnv1.GenerateBootstrap) error {
		mu.Lock()
		defer mu.Unlock()
		times = append(times, time.Now())
		if d.GetMachine() != "m1" {
			t.Errorf("data = %v", d)
		}
		if len(times) < 3 {
			return context.DeadlineExceeded // transient
		}
		return nil
	})
	spec := events.ConsumerSpec{Stream: events.StreamCommands, Durable: "retry", Filters: []string{"capn.cmd.bootstrap.>"},
		Backoff: []time.Duration{100 * time.Millisecond, 300 * time.Millisecond}}
	c := events.NewConsumer(js, spec, h)
	run(t, c)
	p := events.NewPublisher(js, "capn/test")
	if _, err := p.Publish(context.Background(), events.CommandSubject("bootstrap", "generate", "c1", "m1"), "dev.capn.bootstrap.generate", "cmd-1", &capnv1.GenerateBootstrap{Cluster: "c1", Machine: "m1"}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, "acked after retries", func() bool { return c.Stats().Acked == 1 })
	mu.Lock()
	defer mu.Unlock()
	if len(times) != 3 {
		t.Fatalf("handler ran %d times, want 3", len(times))
	}
	if d := times[1].Sub(times[0]); d < 90*time.Millisecond {
		t.Errorf("first retry after %s, want >= 100ms backoff", d)
	}
	if d := times[2].Sub(times[1]); d < 280*time.Millisecond {
		t.Errorf("second retry after %s, want >= 300ms backoff", d)
	}
	if s := c.Stats(); s.Naked != 2 || s.Terminated != 0 {
		t.Fatalf("stats %+v; want 2 naks, no terms", s)
	}
}

func TestUndecodableIsTerminatedAndCounted(t *testing.T) {
	_, nc, js := setup(t)
	var calls atomic.Int32
	h := events.Typed(func(ctx context.Context, m *events.Message, d *capnv1.GenerateBootstrap) error {
		calls.Add(1)
		return nil
	})
	c := events.NewConsumer(js, events.ConsumerSpec{Stream: events.StreamCommands, Durable: "poison", Filters: []string{"capn.cmd.>"}}, h)
	run(t, c)
	// Not a CloudEvent at all.
	if _, err := js.Publish(context.Background(), "capn.cmd.bootstrap.generate.c1.m1", []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	// A CloudEvent whose data is not a GenerateBootstrap.
	p := events.NewPublisher(js, "capn/test")
	if _, err := p.Publish(context.Background(), "capn.cmd.bootstrap.generate.c1.m2", "dev.capn.x", "x-1", &capnv1.MachineEvent{}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, "two terminations", func() bool { return c.Stats().Terminated == 2 })
	// The server agrees: both messages are done with, none pending or
	// redelivered, so no redelivery can come.
	_ = nc.Flush()
	cons, err := js.Consumer(context.Background(), events.StreamCommands, "poison")
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, "the server's ack floor past both messages", func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.Delivered.Consumer == 2 && info.AckFloor.Consumer == 2 && info.NumAckPending == 0 && info.NumRedelivered == 0
	})
	if s := c.Stats(); s.Terminated != 2 || s.Naked != 0 || calls.Load() != 0 {
		t.Fatalf("stats %+v calls %d; want exactly 2 terminations and no handler calls", s, calls.Load())
	}
}

func TestPanicDoesNotKillConsumer(t *testing.T) {
	_, _, js := setup(t)
	var n atomic.Int32
	h := func(ctx context.Context, m *events.Message) error {
		if n.Add(1) == 1 {
			panic("boom")
		}
		return nil
	}
	spec := events.ConsumerSpec{Stream: events.StreamCommands, Durable: "panicky", Filters: []string{"capn.cmd.>"}, Backoff: []time.Duration{50 * time.Millisecond}}
	c := events.NewConsumer(js, spec, h)
	run(t, c)
	p := events.NewPublisher(js, "capn/test")
	for i, id := range []string{"a", "b"} {
		if _, err := p.Publish(context.Background(), events.CommandSubject("w", "v", "c", id), "t", id, &capnv1.MachineEvent{Machine: id}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	natstest.WaitFor(t, 5*time.Second, "both acked after the panic", func() bool { return c.Stats().Acked == 2 })
	if s := c.Stats(); s.Panics != 1 {
		t.Fatalf("stats %+v, want 1 panic", s)
	}
}

func TestMaxDeliverDeadLetters(t *testing.T) {
	_, _, js := setup(t)
	h := func(ctx context.Context, m *events.Message) error { return context.DeadlineExceeded }
	spec := events.ConsumerSpec{Stream: events.StreamCommands, Durable: "dead", Filters: []string{"capn.cmd.>"}, MaxDeliver: 3, Backoff: []time.Duration{20 * time.Millisecond}}
	c := events.NewConsumer(js, spec, h)
	run(t, c)
	p := events.NewPublisher(js, "capn/test")
	if _, err := p.Publish(context.Background(), events.CommandSubject("w", "v", "c", "x"), "t", "x", nil); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, "dead-lettered", func() bool { return c.Stats().DeadLettered == 1 })
	if s := c.Stats(); s.Naked != 2 {
		t.Fatalf("stats %+v; want 2 naks before the third, final delivery", s)
	}
}

func TestLongHandlerKeptInProgress(t *testing.T) {
	_, _, js := setup(t)
	var n atomic.Int32
	h := func(ctx context.Context, m *events.Message) error {
		n.Add(1)
		select {
		case <-time.After(1500 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}
	spec := events.ConsumerSpec{Stream: events.StreamCommands, Durable: "slow", Filters: []string{"capn.cmd.>"}, AckWait: 500 * time.Millisecond}
	c := events.NewConsumer(js, spec, h, events.WithConcurrency(2))
	run(t, c)
	p := events.NewPublisher(js, "capn/test")
	if _, err := p.Publish(context.Background(), events.CommandSubject("w", "v", "c", "slow"), "t", "slow", nil); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, "acked", func() bool { return c.Stats().Acked == 1 })
	if s := c.Stats(); n.Load() != 1 || s.InProgress == 0 {
		t.Fatalf("handler ran %d times (want 1, no redelivery past AckWait), stats %+v", n.Load(), s)
	}
}

// A handler's log lines, and the settlement's, carry the message's
// correlation fields: subject, stream_seq, delivery, event_id, event_type.
func TestHandlerLogsCarryTheMessage(t *testing.T) {
	_, _, js := setup(t)
	logs := &testkit.Buffer{}
	h := func(ctx context.Context, m *events.Message) error {
		zerolog.Ctx(ctx).Info().Str("cluster", "c").Msg("handled")
		return errors.New("try again")
	}
	spec := events.ConsumerSpec{Stream: events.StreamCommands, Durable: "logs", Filters: []string{"capn.cmd.>"}, MaxDeliver: 1}
	c := events.NewConsumer(js, spec, h, events.WithLogger(zerolog.New(logs)))
	run(t, c)
	subj := events.CommandSubject("w", "v", "c", "m")
	if _, err := events.NewPublisher(js, "capn/test").Publish(context.Background(), subj, "dev.capn.test", "evt-log", nil); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, "dead-lettered", func() bool { return c.Stats().DeadLettered == 1 })
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) < 2 {
		t.Fatalf("want the handler's line and the settlement's, got:\n%s", logs.String())
	}
	for _, l := range lines[:2] {
		var got map[string]any
		if err := json.Unmarshal([]byte(l), &got); err != nil {
			t.Fatal(err)
		}
		if got["subject"] != subj || got["stream_seq"] != 1.0 || got["delivery"] != 1.0 || got["event_id"] != "evt-log" || got["event_type"] != "dev.capn.test" {
			t.Errorf("line without the message's fields: %s", l)
		}
	}
}
