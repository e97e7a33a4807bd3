package dev

import (
	"fmt"
	"net"
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events/embedded"
)

// startNATS starts the embedded server with its store under dataDir,
// listening as cfg says.
func startNATS(cfg Config, dataDir string, log zerolog.Logger, auth *devAuth) (*server.Server, error) {
	opts := embedded.Options{StoreDir: filepath.Join(dataDir, "jetstream"), ServerName: devName, Nkeys: auth.nkeys, AuthCallout: auth.callout}
	if cfg.NATSListen == natsListenNone {
		opts.DontListen = true
	} else {
		host, port, err := splitListen(cfg.NATSListen)
		if err != nil {
			return nil, err
		}
		// nats-server fails to listen silently (it waits for readiness
		// until a timeout), so try the address first for a clear error.
		ln, err := net.Listen("tcp", cfg.NATSListen)
		if err != nil {
			return nil, fmt.Errorf("NATS cannot listen on %s (change it with --nats-listen or CAPN_NATS_LISTEN, or \"none\" for in-process only): %w", cfg.NATSListen, err)
		}
		ln.Close()
		if port == 0 {
			port = server.RANDOM_PORT // 0 means 4222 to nats-server
		}
		opts.Host, opts.Port = host, port
	}
	log.Info().Str("store_dir", opts.StoreDir).Msg("starting NATS with JetStream")
	srv, err := embedded.Start(opts)
	if err != nil {
		return nil, err
	}
	return srv, nil
}
