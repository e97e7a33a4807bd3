// Package natsrelay forwards a unix socket to capn's NATS server, for
// machines that cannot reach the address NATS listens on: capn's NATS may
// listen on 127.0.0.1 only (capn dev, tests), which neither a container on
// a bridge network (the docker provider bind-mounts the socket's
// directory) nor a real node in a network namespace of its own (the
// process provider's node mode) reaches. A unix socket exposes it to them
// without listening on any other address.
package natsrelay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Relay forwards connections made to a unix socket to capn's NATS server
// over TCP, byte for byte (TLS, if any, runs end to end through it).
type Relay struct {
	socket  string
	targets []string // host:port, tried in order
	log     zerolog.Logger
}

// New is a relay listening on socket (made by Run) that forwards to the
// servers of natsURL (comma-separated, tried in order; port 4222 when a
// URL names none).
func New(socket, natsURL string, log zerolog.Logger) (*Relay, error) {
	var targets []string
	for _, u := range strings.Split(natsURL, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		pu, err := url.Parse(u)
		if err != nil || pu.Hostname() == "" {
			return nil, fmt.Errorf("natsrelay: NATS url %q: want scheme://host:port", u)
		}
		port := pu.Port()
		if port == "" {
			port = "4222"
		}
		targets = append(targets, net.JoinHostPort(pu.Hostname(), port))
	}
	if len(targets) == 0 {
		return nil, errors.New("natsrelay: no NATS url to forward to")
	}
	return &Relay{socket: socket, targets: targets, log: log}, nil
}

// Run serves until ctx ends, then closes every relayed connection and
// removes the socket.
func (r *Relay) Run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(r.socket), 0o755); err != nil {
		return err
	}
	_ = os.Remove(r.socket) // a previous run's
	ln, err := net.Listen("unix", r.socket)
	if err != nil {
		return fmt.Errorf("natsrelay: %w", err)
	}
	// A container's root may be remapped (user namespaces): anyone on
	// this host may connect, as anyone may to a NATS port on 127.0.0.1.
	if err := os.Chmod(r.socket, 0o666); err != nil {
		ln.Close()
		return err
	}
	r.log.Info().Str("socket", r.socket).Strs("nats", r.targets).Msg("NATS relay listening")
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
	)
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = struct{}{}
		} else {
			delete(conns, c)
		}
	}
	go func() {
		<-ctx.Done()
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn().Err(err).Msg("relay accept failed")
			}
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.serve(ctx, c, track)
		}()
	}
	wg.Wait()
	_ = os.Remove(r.socket)
	return nil
}

// serve pipes one client connection to the first NATS server that answers.
func (r *Relay) serve(ctx context.Context, client net.Conn, track func(net.Conn, bool)) {
	track(client, true)
	defer track(client, false)
	defer client.Close()
	var server net.Conn
	var err error
	for _, t := range r.targets {
		d := net.Dialer{Timeout: 5 * time.Second}
		if server, err = d.DialContext(ctx, "tcp", t); err == nil {
			break
		}
	}
	if err != nil {
		r.log.Warn().Err(err).Msg("relay cannot reach NATS")
		return
	}
	track(server, true)
	defer track(server, false)
	defer server.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Half-close is not needed by NATS: end both directions.
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	<-done
}
