// Package embedded runs a nats-server with JetStream inside the current
// process: `capn dev` uses it as its default broker and tests use it (through
// natstest) as the real server they run against.
package embedded

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configures an embedded server. The zero value is not valid:
// StoreDir is required.
type Options struct {
	// StoreDir holds JetStream's file storage; it survives restarts.
	StoreDir string
	// Host and Port the server listens on for clients. Port -1 picks a free
	// port; DontListen serves only in-process connections.
	Host       string
	Port       int
	DontListen bool
	// ServerName is stable across restarts of the same store (JetStream
	// keys its state by it); default "capn-dev".
	ServerName string
	// ReadyTimeout bounds the wait for the server to accept connections.
	ReadyTimeout time.Duration
	// Nkeys, when set, are the only users the server accepts (each with
	// its permissions; nil permissions allow everything).
	Nkeys []*server.NkeyUser
	// AuthCallout, when set, delegates every login that is not one of its
	// AuthUsers to a callout service (capn's bootstrapper logs machines in).
	AuthCallout *server.AuthCallout
}

// Start starts the server and waits until it is ready for connections.
// The caller shuts it down with Shutdown and WaitForShutdown.
func Start(o Options) (*server.Server, error) {
	if o.StoreDir == "" {
		return nil, errors.New("embedded nats: StoreDir is required")
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.ServerName == "" {
		o.ServerName = "capn-dev"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 10 * time.Second
	}
	opts := &server.Options{
		ServerName: o.ServerName,
		Host:       o.Host,
		Port:       o.Port,
		DontListen: o.DontListen,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		NoLog:      true,
		// The default of 1 MiB is plenty for capn's messages; say so here so
		// it is a decision, not an accident.
		MaxPayload:  1 << 20,
		Nkeys:       o.Nkeys,
		AuthCallout: o.AuthCallout,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(o.ReadyTimeout) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after %s (is %s:%d in use?)", o.ReadyTimeout, o.Host, o.Port)
	}
	return s, nil
}
