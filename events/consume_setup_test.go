package events_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func publishGenerate(t *testing.T, p *events.Publisher, machine string) {
	t.Helper()
	if _, err := p.Publish(context.Background(), events.CommandSubject("bootstrap", "generate", "c1", machine), "dev.capn.bootstrap.generate",
		"cmd-"+machine, &capnv1.GenerateBootstrap{Cluster: "c1", Machine: machine}); err != nil {
		t.Fatal(err)
	}
}

// A consumer started before its stream exists (the init job has not
// provisioned yet, or the cluster is electing leaders) keeps trying, with
// a log line per attempt and waits doubling up to the cap, and consumes
// once the stream is there.
func TestRunWaitsForTheStream(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	logs := &testkit.Buffer{}
	spec := events.ConsumerSpec{Stream: events.StreamCommands, Durable: "late", Filters: []string{"capn.cmd.bootstrap.>"}}
	c := events.NewConsumer(js, spec, func(context.Context, *events.Message) error { return nil },
		events.WithLogger(zerolog.New(logs)), events.WithSetupRetry(20*time.Millisecond, 100*time.Millisecond))
	run(t, c)

	const retrying = "cannot set the consumer up; retrying"
	natstest.WaitFor(t, 10*time.Second, "five failed attempts logged", func() bool { return len(logs.Lines(retrying)) >= 5 })
	if err := events.Provision(context.Background(), js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	publishGenerate(t, events.NewPublisher(js, "capn/test"), "m1")
	natstest.WaitFor(t, 10*time.Second, "the message consumed once the stream exists", func() bool { return c.Stats().Acked == 1 })

	attempts := logs.Lines(retrying)
	for i, rec := range attempts {
		if n, _ := rec["attempt"].(float64); int(n) != i+1 {
			t.Errorf("log line %d: attempt %v, want %d", i, rec["attempt"], i+1)
		}
		if rec["consumer"] != "late" || rec["stream"] != events.StreamCommands || rec["error"] == nil {
			t.Errorf("log line %d names no consumer, stream or error: %v", i, rec)
		}
		want := min(20*time.Millisecond<<i, 100*time.Millisecond)
		if d, _ := rec["retry_in"].(float64); time.Duration(d)*time.Millisecond != want {
			t.Errorf("attempt %d: retry_in %vms, want %s", i+1, rec["retry_in"], want)
		}
	}
	if got := logs.Lines("set the consumer up: done"); len(got) != 1 {
		t.Errorf("%d 'set the consumer up: done' lines, want 1", len(got))
	}
}

// Cancelling a consumer that is still trying to set up returns nil at once.
func TestRunStopsRetryingWhenTheContextEnds(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	spec := events.ConsumerSpec{Stream: "NOPE", Durable: "never"}
	logs := &testkit.Buffer{}
	c := events.NewConsumer(js, spec, func(context.Context, *events.Message) error { return nil },
		events.WithLogger(zerolog.New(logs)), events.WithSetupRetry(time.Hour, time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	natstest.WaitFor(t, 10*time.Second, "the first failed attempt logged, its hour's wait begun", func() bool {
		return len(logs.Lines("cannot set the consumer up; retrying")) == 1
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v after cancel, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run kept retrying after its context ended")
	}
}

// A consumer whose durable is deleted under it (as a lost node's may be)
// sets it up again and keeps consuming. An ack still in flight when the
// durable goes leaves its message in the work queue, so the new durable
// may handle m1 again (at least once): the test counts handled machines,
// not acks.
func TestRunSetsUpAgainWhenTheConsumerIsDeleted(t *testing.T) {
	_, _, js := setup(t)
	logs := &testkit.Buffer{}
	var mu sync.Mutex
	handled := map[string]int{}
	seen := func(machine string) int {
		mu.Lock()
		defer mu.Unlock()
		return handled[machine]
	}
	spec := events.ConsumerSpec{Stream: events.StreamCommands, Durable: "again", Filters: []string{"capn.cmd.bootstrap.>"}}
	h := events.Typed(func(_ context.Context, _ *events.Message, d *capnv1.GenerateBootstrap) error {
		mu.Lock()
		defer mu.Unlock()
		handled[d.GetMachine()]++
		return nil
	})
	c := events.NewConsumer(js, spec, h,
		events.WithLogger(zerolog.New(logs)), events.WithSetupRetry(20*time.Millisecond, 100*time.Millisecond))
	run(t, c)
	p := events.NewPublisher(js, "capn/test")
	publishGenerate(t, p, "m1")
	natstest.WaitFor(t, 10*time.Second, "the first message handled", func() bool { return seen("m1") == 1 })
	if err := js.DeleteConsumer(context.Background(), events.StreamCommands, "again"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, "the consumer set up again", func() bool {
		return len(logs.Lines("consumer's message stream ended; setting it up again")) > 0
	})
	publishGenerate(t, p, "m2")
	natstest.WaitFor(t, 10*time.Second, "the second message handled", func() bool { return seen("m2") == 1 })
}
