package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
)

// probe is a test service. It registers a counter, says it is not ready
// until ready is closed, and on cancellation does what its fields say.
type probe struct {
	name    string
	ready   chan struct{}
	deps    chan *Deps
	fail    error         // returned at once
	panics  bool          // panics at once
	release chan struct{} // if set, stopping waits for it
	bye     string        // subject published to (unflushed) when stopping
	result  error         // returned after cancellation
}

func newProbe() *probe {
	return &probe{name: "probe", ready: make(chan struct{}), deps: make(chan *Deps, 1)}
}

func (p *probe) Name() string { return p.name }

func (p *probe) Run(ctx context.Context, d *Deps) error {
	p.deps <- d
	if p.fail != nil {
		return p.fail
	}
	if p.panics {
		panic("boom")
	}
	ticks := prometheus.NewCounter(prometheus.CounterOpts{Name: "capn_probe_ticks_total", Help: "Ticks."})
	d.Metrics.MustRegister(ticks)
	ticks.Add(3)
	d.Ready.SetNotReady("warming the cache")
	select {
	case <-p.ready:
		d.Ready.Set(true)
	case <-ctx.Done():
	}
	<-ctx.Done()
	if p.release != nil {
		<-p.release
	}
	if p.bye != "" {
		_ = d.NC.Publish(p.bye, []byte("bye"))
	}
	return p.result
}

type runResult chan error

func startRun(t *testing.T, ctx context.Context, cfg Config, svc Service, opts ...Option) runResult {
	t.Helper()
	log, _ := testLogger(t)
	done := make(runResult, 1)
	go func() { done <- Run(ctx, cfg, svc, append([]Option{WithLogger(log)}, opts...)...) }()
	return done
}

func (r runResult) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

func TestRunServesHealthReadinessAndMetrics(t *testing.T) {
	s := natstest.Start(t)
	ln := listen(t)
	base := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc := newProbe()
	done := startRun(t, ctx, Config{Name: "probe", NATS: NATSConfig{URL: s.URL()}}, svc, WithListener(ln))
	d := <-svc.deps

	if code, body := get(t, base+"/healthz"); code != 200 || !strings.Contains(body, `{"service":"probe","nats":"CONNECTED"}`) {
		t.Errorf("/healthz = %d %s", code, body)
	}
	natstest.WaitFor(t, 5*time.Second, "/readyz 503 with the service's reason", func() bool {
		code, body := get(t, base+"/readyz")
		return code == 503 && strings.Contains(body, "warming the cache")
	})
	close(svc.ready)
	natstest.WaitFor(t, 5*time.Second, "/readyz 200", func() bool {
		code, _ := get(t, base+"/readyz")
		return code == 200
	})
	_, metrics := get(t, base+"/metrics")
	for _, want := range []string{"capn_probe_ticks_total 3", "capn_nats_connected 1", "go_goroutines"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if _, err := d.JS.Stream(ctx, events.StreamEvents); err != nil {
		t.Errorf("Run did not provision the topology: %v", err)
	}

	cancel()
	if err := done.wait(t); err != nil {
		t.Fatalf("Run() = %v after cancel, want nil", err)
	}
	if !d.NC.IsClosed() {
		t.Error("the service's connection is still open")
	}
	if _, err := (&httpClient).Get(base + "/healthz"); err == nil {
		t.Error("the ops server still answers after Run returned")
	}
}

func TestRunShutdown(t *testing.T) {
	s := natstest.Start(t)
	tests := []struct {
		name    string
		probe   func(*probe)
		early   bool   // the service ends by itself
		wantErr string // "": nil
	}{
		{name: "stops when cancelled", probe: func(*probe) {}},
		{name: "returning ctx.Err() is a clean stop", probe: func(p *probe) { p.result = context.Canceled }},
		{name: "a fatal error is returned", probe: func(p *probe) { p.fail = errors.New("disk on fire") }, early: true,
			wantErr: "service probe: disk on fire"},
		{name: "a panic is an error", probe: func(p *probe) { p.panics = true }, early: true, wantErr: "service probe: panic: boom"},
		{name: "an error while stopping is returned", probe: func(p *probe) { p.result = errors.New("lost my keys") },
			wantErr: "service probe: lost my keys"},
		{name: "a service that does not stop", probe: func(p *probe) { p.release = make(chan struct{}) },
			wantErr: "service probe: did not stop in time (shutdown timeout 200ms)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := newProbe()
			tt.probe(svc)
			if svc.release != nil {
				defer close(svc.release)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cfg := Config{Name: "probe", NATS: NATSConfig{URL: s.URL()}, ShutdownTimeout: 200 * time.Millisecond}
			done := startRun(t, ctx, cfg, svc, WithoutHTTP())
			d := <-svc.deps
			if !tt.early {
				cancel()
			}
			err := done.wait(t)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr) {
				t.Fatalf("Run() = %v, want %q", err, tt.wantErr)
			}
			if svc.release != nil && !errors.Is(err, ErrShutdownTimeout) {
				t.Errorf("errors.Is(%v, ErrShutdownTimeout) = false", err)
			}
			natstest.WaitFor(t, 5*time.Second, "connection closed", d.NC.IsClosed)
		})
	}
}

func TestRunReportsShuttingDownAndDrains(t *testing.T) {
	s := natstest.Start(t)
	watcher, _ := s.Connect(t)
	bye, err := watcher.SubscribeSync("probe.bye")
	if err != nil {
		t.Fatal(err)
	}
	_ = watcher.Flush()
	ln := listen(t)
	base := "http://" + ln.Addr().String()
	svc := newProbe()
	svc.release, svc.bye = make(chan struct{}), "probe.bye"
	close(svc.ready)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := startRun(t, ctx, Config{Name: "probe", NATS: NATSConfig{URL: s.URL()}}, svc, WithListener(ln))
	<-svc.deps
	natstest.WaitFor(t, 5*time.Second, "ready", func() bool { code, _ := get(t, base+"/readyz"); return code == 200 })
	cancel()
	natstest.WaitFor(t, 5*time.Second, "/readyz says shutting down", func() bool {
		code, body := get(t, base+"/readyz")
		return code == 503 && strings.Contains(body, "shutting down")
	})
	close(svc.release)
	if err := done.wait(t); err != nil {
		t.Fatal(err)
	}
	if _, err := bye.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("the publish made while stopping was lost: %v", err)
	}
}

func TestRunStartErrors(t *testing.T) {
	s := natstest.Start(t)
	busy := listen(t)
	defer busy.Close()
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{name: "invalid config", cfg: Config{Name: "probe", LogLevel: "loud", NATS: NATSConfig{URL: s.URL()}},
			want: []string{"service probe: invalid config", `--log-level (CAPN_LOG_LEVEL) "loud"`}},
		{name: "HTTP port in use", cfg: Config{Name: "probe", HTTPAddr: busy.Addr().String(), NATS: NATSConfig{URL: s.URL()}},
			want: []string{"listen on " + busy.Addr().String(), "--http-addr or CAPN_HTTP_ADDR", "address already in use"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := startRun(t, context.Background(), tt.cfg, newProbe()).wait(t)
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Run() = %v, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestRunWithSharedOpsAndRegistry(t *testing.T) {
	s := natstest.Start(t)
	reg := prometheus.NewRegistry()
	ops := NewOpsHandler(reg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var dones []runResult
	var conns []*nats.Conn
	for _, name := range []string{"alpha", "beta"} {
		svc := newProbe()
		svc.name = name
		close(svc.ready)
		dones = append(dones, startRun(t, ctx, Config{Name: name, NATS: NATSConfig{URL: s.URL()}}, svc, WithOps(ops), WithRegistry(reg)))
		conns = append(conns, (<-svc.deps).NC)
	}
	if conns[0] == conns[1] {
		t.Error("two services share a connection")
	}
	natstest.WaitFor(t, 5*time.Second, "both ready", func() bool { code, _ := serve(ops, "/readyz"); return code == 200 })
	_, metrics := serve(ops, "/metrics")
	for _, want := range []string{`capn_probe_ticks_total{service="alpha"} 3`, `capn_probe_ticks_total{service="beta"} 3`, `capn_nats_connected{service="beta"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
	cancel()
	for _, d := range dones {
		if err := d.wait(t); err != nil {
			t.Error(err)
		}
	}
	if code, body := serve(ops, "/readyz"); code != 503 || strings.Contains(body, "alpha") {
		t.Errorf("stopped services still in /readyz: %d %s", code, body)
	}
}
