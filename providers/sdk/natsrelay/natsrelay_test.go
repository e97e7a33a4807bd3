package natsrelay_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/providers/sdk/natsrelay"
)

// unixDialer dials the relay's socket whatever address nats.go asks for.
type unixDialer struct{ socket string }

func (d unixDialer) Dial(string, string) (net.Conn, error) { return net.Dial("unix", d.socket) }

// A client connected through the relay's socket talks to the real server
// (a request answered by a subscriber connected directly); the first
// unreachable server of the list is skipped; the socket is gone after.
func TestRelayForwardsToTheFirstServerThatAnswers(t *testing.T) {
	srv := natstest.Start(t)
	direct, _ := srv.Connect(t)
	if _, err := direct.Subscribe("ping", func(m *nats.Msg) { _ = m.Respond([]byte("pong")) }); err != nil {
		t.Fatal(err)
	}
	if err := direct.Flush(); err != nil {
		t.Fatal(err)
	}
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "nats://" + dead.Addr().String()
	dead.Close() // nothing listens there now

	socket := filepath.Join(t.TempDir(), "relay", "nats.sock")
	r, err := natsrelay.New(socket, deadURL+", "+srv.URL(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	natstest.WaitFor(t, 10*time.Second, "the socket listening", func() bool {
		c, err := net.Dial("unix", socket)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	nc, err := nats.Connect("nats://relay:4222", nats.SetCustomDialer(unixDialer{socket}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m, err := nc.Request("ping", nil, 5*time.Second)
	if err != nil || string(m.Data) != "pong" {
		t.Fatalf("request through the relay: %v, %v", m, err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v after cancel", err)
	}
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Errorf("socket left after Run: %v", err)
	}
}

func TestNewRefusesURLsWithoutAHost(t *testing.T) {
	for _, u := range []string{"", " , ", "nats://:4222"} {
		if _, err := natsrelay.New("/tmp/x.sock", u, zerolog.Nop()); err == nil || !strings.HasPrefix(err.Error(), "natsrelay: ") {
			t.Errorf("New(%q) = %v, want a natsrelay error", u, err)
		}
	}
}
