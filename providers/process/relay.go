package process

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

// relay forwards connections made to a unix socket to capn's NATS server
// over TCP, byte for byte (TLS, if any, runs end to end through it), as
// the docker provider's does: real nodes (node mode) run in network
// namespaces of their own, which capn's NATS on 127.0.0.1 (capn dev,
// tests) is not in, and a unix socket in the state dir exposes it to their
// agents without listening on any other address.
type relay struct {
	socket  string
	targets []string // host:port, tried in order
	log     zerolog.Logger
}

func newRelay(dir, natsURL string, log zerolog.Logger) (*relay, error) {
	var targets []string
	for _, u := range strings.Split(natsURL, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		pu, err := url.Parse(u)
		if err != nil || pu.Hostname() == "" {
			return nil, fmt.Errorf("process: relay: NATS url %q: want scheme://host:port", u)
		}
		port := pu.Port()
		if port == "" {
			port = "4222"
		}
		targets = append(targets, net.JoinHostPort(pu.Hostname(), port))
	}
	if len(targets) == 0 {
		return nil, errors.New("process: relay: no NATS url to forward to")
	}
	return &relay{socket: filepath.Join(dir, relaySocket), targets: targets, log: log}, nil
}

// run serves until ctx ends, then closes every relayed connection and
// removes the socket.
func (r *relay) run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(r.socket), 0o755); err != nil {
		return err
	}
	_ = os.Remove(r.socket) // a previous run's
	ln, err := net.Listen("unix", r.socket)
	if err != nil {
		return fmt.Errorf("process: relay: %w", err)
	}
	// Anyone on this
	// host may connect, as anyone may to a NATS port on 127.0.0.1.
	if err := os.Chmod(r.socket, 0o666); err != nil {
		ln.Close()
		return err
	}
	r.log.Info().Str("socket", r.socket).Strs("nats", r.targets).Msg("NATS relay for real nodes listening")
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
func (r *relay) serve(ctx context.Context, client net.Conn, track func(net.Conn, bool)) {
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
