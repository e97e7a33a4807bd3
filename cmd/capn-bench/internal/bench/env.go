package bench

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
	for _, svc := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := daemon.Config{Name: svc.Name(), LogLevel: "error", SkipProvision: true}
			if err := daemon.Run(sctx, cfg, svc, daemon.WithInProcess(srv), daemon.WithoutHTTP(), daemon.WithLogger(quiet)); err != nil {
				fmt.Printf("%s: %v\n", svc.Name(), err)
			}
		}()
	}
	return &env{srv: srv, nc: nc, js: js, stop: func() { cancel(); wg.Wait(); nc.Close(); stopSrv() }}, nil
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
