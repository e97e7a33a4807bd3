// Package natstest gives tests a real nats-server with JetStream, embedded
// in the test process with its store in a temporary directory. It never
// mocks NATS: everything a test does goes through the real server.
package natstest

import (
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events/embedded"
	"github.com/capn-dev/capn/internal/testkit"
)

// Server is a running embedded server that a test can restart.
type Server struct {
	t        testing.TB
	storeDir string
	port     int
	*server.Server
}

// Start runs a server on 127.0.0.1 on a free port with its store in
// t.TempDir(); it is shut down when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, storeDir: t.TempDir(), port: -1}
	s.start()
	// Keep the port so that a restart comes back where clients reconnect.
	s.port = s.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { s.Stop() })
	return s
}

func (s *Server) start() {
	s.t.Helper()
	srv, err := embedded.Start(embedded.Options{StoreDir: s.storeDir, Port: s.port, ServerName: "natstest"})
	if err != nil {
		s.t.Fatalf("start nats-server: %v", err)
	}
	s.Server = srv
}

// Stop shuts the server down (idempotent).
func (s *Server) Stop() {
	if s.Server != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart stops the server and starts it again on the same port and store,
// as a crashed or upgraded server would come back.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// URL is the client URL.
func (s *Server) URL() string { return s.ClientURL() }

// Connect opens a client connection that retries forever on disconnect and
// is closed when the test ends.
func (s *Server) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.URL(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond),
		nats.Name(t.Name()))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

// WaitFor polls cond every 10ms until it returns true or timeout passes,
// then fails the test with msg. Poll, don't sleep. It is testkit.WaitFor,
// here for the tests and helpers that may import only the events plumbing
// (the provider conformance suite and the SDK's, tests/arch).
func WaitFor(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, timeout, msg, cond)
}

// Poll calls check at once and then every interval until it returns nil;
// once timeout has passed it returns check's last error. It is
// testkit.Poll, here for the same helpers as WaitFor.
func Poll(timeout, every time.Duration, check func() error) error {
	return testkit.Poll(timeout, every, check)
}
