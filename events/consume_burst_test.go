package events_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// A consumer with BatchEvery takes what is pending in one fetch: 300
// messages waiting when it starts are handled from one burst (without
// BatchEvery they come 16 to a pull request, 2 per handler), and nothing
// is fetched again before BatchEvery.
func TestBurstConsumerTakesWhatIsPendingAtOnce(t *testing.T) {
	_, _, js := setup(t)
	p := events.NewPublisher(js, "capn/test")
	for i := range 300 {
		publishGenerate(t, p, fmt.Sprintf("m%d", i))
	}
	h := events.Typed(func(context.Context, *events.Message, *capnv1.GenerateBootstrap) error { return nil })
	c := events.NewConsumer(js, events.ConsumerSpec{Stream: events.StreamCommands, Durable: "bursts",
		Filters: []string{"capn.cmd.bootstrap.>"}, BatchEvery: time.Hour}, h, events.WithConcurrency(8))
	run(t, c)
	natstest.WaitFor(t, 10*time.Second, "300 messages acked", func() bool { return c.Stats().Acked == 300 })
	if s := c.Stats(); s.Bursts != 1 || s.Naked != 0 {
		t.Fatalf("stats %+v; want the 300 from 1 burst, no naks", s)
	}
}

// Between bursts a consumer with BatchEvery still gets new messages, a
// failed one is tried again after its backoff, and a deleted consumer is
// set up again, as without BatchEvery.
func TestBurstConsumerRetriesAndSetsUpAgain(t *testing.T) {
	_, _, js := setup(t)
	logs := &testkit.Buffer{}
	var mu sync.Mutex
	handled := map[string]int{}
	seen := func(machine string) int {
		mu.Lock()
		defer mu.Unlock()
		return handled[machine]
	}
	h := events.Typed(func(_ context.Context, _ *events.Message, d *capnv1.GenerateBootstrap) error {
		mu.Lock()
		defer mu.Unlock()
		handled[d.GetMachine()]++
		if d.GetMachine() == "m3" && handled["m3"] == 1 {
			return context.DeadlineExceeded // transient
		}
		return nil
	})
	spec := events.ConsumerSpec{Stream: events.StreamCommands, Durable: "bursts", Filters: []string{"capn.cmd.bootstrap.>"},
		BatchEvery: 50 * time.Millisecond, Backoff: []time.Duration{100 * time.Millisecond}}
	c := events.NewConsumer(js, spec, h, events.WithConcurrency(4),
		events.WithLogger(zerolog.New(logs)), events.WithSetupRetry(20*time.Millisecond, 100*time.Millisecond))
	run(t, c)
	p := events.NewPublisher(js, "capn/test")
	for i := range 10 {
		publishGenerate(t, p, fmt.Sprintf("m%d", i))
	}
	natstest.WaitFor(t, 10*time.Second, "10 acked, m3 on its second delivery", func() bool {
		return c.Stats().Acked == 10 && seen("m3") == 2
	})
	if s := c.Stats(); s.Naked != 1 || s.Terminated != 0 {
		t.Fatalf("stats %+v; want 1 nak, no terms", s)
	}
	if err := js.DeleteConsumer(context.Background(), events.StreamCommands, "bursts"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, "the consumer set up again", func() bool {
		return len(logs.Lines("consumer's message stream ended; setting it up again")) > 0
	})
	publishGenerate(t, p, "m10")
	natstest.WaitFor(t, 10*time.Second, "a message after the set-up handled", func() bool { return seen("m10") == 1 })
}
