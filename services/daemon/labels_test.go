package daemon

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/capn-dev/capn/events/natstest"
)

// goroutinesWith lists the goroutines (pprof's debug=1 text) whose stack
// holds fn, with their labels line.
func goroutinesWith(t *testing.T, fn string) []string {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, fn) {
			out = append(out, g)
		}
	}
	return out
}

// subscriber is a service that subscribes to its subject in Run and
// holds each delivery until it stops.
type subscriber struct {
	subject string
	got     chan struct{}
}

func (s *subscriber) Name() string { return "labelled" }

func (s *subscriber) Run(ctx context.Context, d *Deps) error {
	if _, err := d.NC.Subscribe(s.subject, func(*nats.Msg) {
		s.got <- struct{}{}
		holdDelivery(ctx)
	}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// holdDelivery keeps a delivery goroutine in a function the test finds.
func holdDelivery(ctx context.Context) { <-ctx.Done() }

// Every goroutine of a service carries service=<name> — its Run and what
// it starts, its subscriptions' deliveries — while the in-process
// server's goroutines for its connection keep the caller's labels.
func TestRunLabelsTheServiceGoroutines(t *testing.T) {
	srv := startServer(t, server.Options{})
	svc := &subscriber{subject: "labels.probe", got: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(pprof.WithLabels(context.Background(), pprof.Labels("bench", "test")))
	pprof.SetGoroutineLabels(ctx)
	defer pprof.SetGoroutineLabels(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Config{SkipProvision: true}, svc, WithInProcess(srv), WithoutHTTP()) }()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The service subscribes once it runs: publish until it hears.
	natstest.WaitFor(t, 10*time.Second, "the service's subscription", func() bool {
		if err := nc.Publish(svc.subject, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-svc.got:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	})
	want := `"service":"labelled"`
	for _, fn := range []string{"(*subscriber).Run+", "daemon.holdDelivery"} {
		gs := goroutinesWith(t, fn)
		if len(gs) != 1 || !strings.Contains(gs[0], want) || !strings.Contains(gs[0], `"bench":"test"`) {
			t.Fatalf("goroutines in %s: %q; want one labelled %s and the caller's bench:test", fn, gs, want)
		}
	}
	// The server's read loop of the service's in-process client.
	server := goroutinesWith(t, "server.(*client).readLoop")
	if len(server) == 0 {
		t.Fatal("no server read loop found")
	}
	for _, g := range server {
		if strings.Contains(g, want) {
			t.Fatalf("a server goroutine carries the service's label:\n%s", g)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
