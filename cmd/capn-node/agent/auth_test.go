package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/capn-dev/capn/cmd/capn-node/agent"
	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/services/daemon"
)

// A machine authenticates to NATS with its nkey seed file (what a
// deployment with NATS users gives its node agents).
func TestAgentAuthenticatesWithAnNKey(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "nats.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		Nkeys: []*server.NkeyUser{{Nkey: pub}}, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	opt, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	if err := events.Provision(context.Background(), js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	// Without the seed the agent is refused: Run says so at once.
	w := &world{t: t, js: js}
	cfg := agent.Config{Cluster: "c1", Machine: "w-0", Version: "v1.33.2", DataDir: t.TempDir(),
		NATS: daemon.NATSConfig{URL: srv.ClientURL()}, BootstrapChecksum: "sha256:00", HeartbeatEvery: 50 * time.Millisecond}
	a, _ := agent.New(cfg, nopLog())
	if err := a.Run(context.Background()); err == nil {
		t.Fatal("an agent without credentials ran")
	}
	// With it, it connects and asks for its bootstrap data.
	asked := make(chan struct{}, 1)
	sub, _ := nc.Subscribe("capn.bootstrap.fetch.c1.w-0", func(m *nats.Msg) {
		select {
		case asked <- struct{}{}:
		default:
		}
	})
	defer sub.Unsubscribe()
	cfg.NATS.NKeySeedFile = seedFile
	cfg.DataDir = t.TempDir()
	w.start(cfg)
	natstest.WaitFor(t, 10*time.Second, "a bootstrap fetch over the authenticated connection", func() bool {
		select {
		case <-asked:
			return true
		default:
			return false
		}
	})
}
