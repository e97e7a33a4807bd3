// Package endpoint is capn-node's control-plane endpoint: the process
// (process provider) or container (docker provider) that holds a cluster's
// control-plane address. It is a TCP load balancer, as the haproxy
// container of Cluster API's CAPD is: each connection it accepts goes,
// byte for byte (TLS passes through untouched), to one of the healthy
// backends — the cluster's control-plane machines' API servers — taken
// round-robin. A backend is healthy while a TCP connect to it succeeds
// (checked every Config.CheckEvery); a connection whose backend refuses it
// falls over to the next healthy one.
//
// While no backend is healthy (no control-plane machine runs an API server
// yet, or none at all) the endpoint answers as a placeholder, deciding per
// accepted connection: plain HTTP, GET /healthz 200 and every other request
// 503 saying that no Kubernetes API server runs.
package endpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Defaults of Config.
const (
	DefaultCheckEvery  = time.Second
	DefaultDialTimeout = time.Second
)

// Config configures an endpoint.
type Config struct {
	// Cluster names the cluster, for the placeholder's answers and logs.
	Cluster string
	// Backends lists the backends' host:port; it is read at start and
	// before every health check. nil: no backend ever (placeholder only).
	// An error keeps the last list.
	Backends func() ([]string, error)
	// CheckEvery is the interval of the backend list's refresh and the
	// health checks (default 1s).
	CheckEvery time.Duration
	// DialTimeout bounds a health check's and a proxied connection's
	// connect (default 1s).
	DialTimeout time.Duration
	// Log gets the backends' up and down transitions.
	Log zerolog.Logger
}

func (c Config) withDefaults() Config {
	if c.CheckEvery <= 0 {
		c.CheckEvery = DefaultCheckEvery
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	return c
}

// Serve serves the endpoint on ln until ctx ends; it closes ln and every
// connection it accepted, and returns once all its goroutines are done.
func Serve(ctx context.Context, ln net.Listener, cfg Config) error {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lb := &balancer{cfg: cfg, health: map[string]bool{}}
	lb.check(ctx) // a backend already up is used from the first connection

	placeholder := &connListener{conns: make(chan net.Conn), done: make(chan struct{}), addr: ln.Addr()}
	srv := &http.Server{Handler: Handler(cfg.Cluster), ReadHeaderTimeout: 5 * time.Second}

	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(cfg.CheckEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				lb.check(ctx)
			}
		}
	})
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Serve(placeholder) }()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()

	var acceptErr error
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, net.ErrClosed) {
				acceptErr = err
				break
			}
			// Out of file descriptors and the like: wait and go on, as
			// net/http does.
			cfg.Log.Warn().Err(err).Msg("accept")
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		wg.Go(func() { lb.handle(ctx, c, placeholder) })
	}
	cancel()
	ln.Close()
	wg.Wait()
	// The placeholder's answers are short: no grace for them.
	_ = srv.Close()
	if err := <-srvDone; err != nil && !errors.Is(err, http.ErrServerClosed) && acceptErr == nil {
		acceptErr = err
	}
	return acceptErr
}

// Handler is the placeholder's HTTP handler.
func Handler(cluster string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "ok: placeholder control-plane endpoint of cluster %s\n", cluster)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, fmt.Sprintf("placeholder control-plane endpoint of cluster %s: no Kubernetes API server runs here yet", cluster),
			http.StatusServiceUnavailable)
	})
	return mux
}

// balancer keeps the backends and their health.
type balancer struct {
	cfg Config

	mu       sync.Mutex
	backends []string        // sorted
	health   map[string]bool // by backend: its last known state
	next     int             // round-robin position
	listErr  string          // the last error of cfg.Backends, logged once
}

// check refreshes the backend list and probes every backend.
func (b *balancer) check(ctx context.Context) {
	list := b.list()
	up := make([]bool, len(list))
	var wg sync.WaitGroup
	for i, addr := range list {
		wg.Go(func() { up[i] = b.probe(ctx, addr) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // a probe cut short says nothing
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, gone := range b.backends {
		if !slices.Contains(list, gone) {
			if b.health[gone] {
				b.cfg.Log.Info().Str("backend", gone).Msg("backend removed (no longer a control-plane machine of the cluster)")
			}
			delete(b.health, gone)
		}
	}
	b.backends = list
	for i, addr := range list {
		b.setLocked(addr, up[i], "health check")
	}
}

// list reads the backends, sorted; on an error, the last list.
func (b *balancer) list() []string {
	if b.cfg.Backends == nil {
		return nil
	}
	list, err := b.cfg.Backends()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		if msg := err.Error(); msg != b.listErr {
			b.listErr = msg
			b.cfg.Log.Warn().Err(err).Msg("cannot read the backends; keeping the last list")
		}
		return slices.Clone(b.backends)
	}
	b.listErr = ""
	list = slices.Clone(list)
	slices.Sort(list)
	return slices.Compact(list)
}

func (b *balancer) probe(ctx context.Context, addr string) bool {
	d := net.Dialer{Timeout: b.cfg.DialTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// setLocked records addr's state and logs a transition. b.mu must be held.
func (b *balancer) setLocked(addr string, up bool, why string) {
	was, known := b.health[addr]
	b.health[addr] = up
	switch {
	case up && !was:
		b.cfg.Log.Info().Str("backend", addr).Str("seen_by", why).Msg("backend up")
	case !up && (was || !known):
		ev := b.cfg.Log.Info()
		if !known {
			ev = b.cfg.Log.Debug() // a new backend that is not up yet
		}
		ev.Str("backend", addr).Str("seen_by", why).Msg("backend down")
	}
}

// candidates are the healthy backends in the order to try them: the next
// in round-robin first, then the others after it.
func (b *balancer) candidates() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var healthy []string
	for _, a := range b.backends {
		if b.health[a] {
			healthy = append(healthy, a)
		}
	}
	if len(healthy) == 0 {
		return nil
	}
	start := b.next % len(healthy)
	b.next = start + 1
	return append(healthy[start:], healthy[:start]...)
}

// markDown records that a connect to addr failed.
func (b *balancer) markDown(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if slices.Contains(b.backends, addr) {
		b.setLocked(addr, false, "connection")
	}
}

// handle proxies c to a healthy backend, or gives it to the placeholder.
func (b *balancer) handle(ctx context.Context, c net.Conn, placeholder *connListener) {
	d := net.Dialer{Timeout: b.cfg.DialTimeout}
	for _, addr := range b.candidates() {
		up, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			b.markDown(addr)
			continue
		}
		proxy(ctx, c, up)
		return
	}
	if ctx.Err() != nil {
		c.Close()
		return
	}
	placeholder.give(c)
}

// proxy copies both ways until both sides are done (a side's EOF is passed
// on as a half-close), an error breaks either, or ctx ends; then it closes
// both.
func proxy(ctx context.Context, client, backend net.Conn) {
	closeBoth := func() { client.Close(); backend.Close() }
	stop := context.AfterFunc(ctx, closeBoth)
	defer stop()
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		if _, err := io.Copy(dst, src); err != nil {
			closeBoth()
			return
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			closeBoth()
		}
	}
	wg.Go(func() { pipe(backend, client) })
	pipe(client, backend)
	wg.Wait()
	closeBoth()
}

// connListener hands the connections no backend takes to the
// placeholder's HTTP server.
type connListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	addr  net.Addr
}

func (l *connListener) give(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }
