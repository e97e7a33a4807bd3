package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/services/daemon"
)

// env is one benchmark's capn: a fresh embedded server with capn's
// topology and the given services running as `capn dev` runs them, each
// through daemon.Run on its own in-process connection.
type env struct {
	srv  *server.Server
	nc   *nats.Conn // the benchmark's own connection
	js   jetstream.JetStream
	stop func()
}

// startEnv starts the server, provisions topo and starts svcs; Close stops
// them all and removes the server's storage.
func startEnv(ctx context.Context, topo events.Topology, svcs ...daemon.Service) (*env, error) {
	srv, stopSrv, err := startServer()
	if err != nil {
		return nil, err
	}
	return startEnvOn(ctx, srv, stopSrv, topo, svcs...)
}

// startEnvOn is startEnv on a server already started (one that listens,
// for programs of their own beside the in-process services); stopSrv
// stops it when the env closes, or at once if the env cannot start.
func startEnvOn(ctx context.Context, srv *server.Server, stopSrv func(), topo events.Topology, svcs ...daemon.Service) (*env, error) {
	nc, js, err := connect(srv, "bench")
	if err != nil {
		stopSrv()
		return nil, err
	}
	if err := events.Provision(ctx, js, topo); err != nil {
		nc.Close()
		stopSrv()
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	quiet := zerolog.New(io.Discard)
	// The services share one ops handler (as capn dev's do), served to no
	// one: its /readyz says when every service finished starting.
	ops := daemon.NewOpsHandler(prometheus.NewRegistry())
	for _, svc := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := daemon.Config{Name: svc.Name(), LogLevel: "error", SkipProvision: true}
			if err := daemon.Run(sctx, cfg, svc, daemon.WithInProcess(srv), daemon.WithoutHTTP(), daemon.WithOps(ops), daemon.WithLogger(quiet)); err != nil {
				fmt.Printf("%s: %v\n", svc.Name(), err)
			}
		}()
	}
	e := &env{srv: srv, nc: nc, js: js, stop: func() { cancel(); wg.Wait(); nc.Close(); stopSrv() }}
	if err := waitReady(ctx, time.Minute, len(svcs), func() *http.Response {
		rec := httptest.NewRecorder()
		ops.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Result()
	}); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// waitReady polls readyz until its answer is 200 and names n services
// (each of them ready), or timeout passes.
func waitReady(ctx context.Context, timeout time.Duration, n int, readyz func() *http.Response) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last daemon.HealthBody
	err := poll(ctx, 20*time.Millisecond, func() (bool, error) {
		resp := readyz()
		if resp == nil {
			return false, nil
		}
		defer resp.Body.Close()
		last = daemon.HealthBody{}
		_ = json.NewDecoder(resp.Body).Decode(&last)
		return resp.StatusCode == http.StatusOK && len(last.Services) == n, nil
	})
	if err != nil {
		return fmt.Errorf("services not ready (%s %v): %w", last.Status, last.Services, err)
	}
	return nil
}

// poll calls check at once and then every interval until it returns true
// or an error, or ctx ends (its error then).
func poll(ctx context.Context, every time.Duration, check func() (bool, error)) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if ok, err := check(); ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// freeAddr is a free loopback address for a program to listen on.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (e *env) Close() { e.stop() }

// kv opens one of capn's buckets.
func (e *env) kv(ctx context.Context, bucket string) jetstream.KeyValue {
	kv, err := e.js.KeyValue(ctx, bucket)
	if err != nil {
		panic(fmt.Sprintf("bucket %s: %v", bucket, err)) // provisioned by startEnv
	}
	return kv
}
