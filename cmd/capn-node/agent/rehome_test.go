package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/cmd/capn-node/agent"
	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/providers/process/rehome"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// lastBeatIn is the id of the last heartbeat of c1/w-0 in js ("" for none).
func lastBeatIn(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	s, err := js.Stream(context.Background(), events.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.GetLastMsgForSubject(context.Background(), events.HealthSubject("c1", "w-0", agent.HeartbeatKind))
	if err != nil {
		return ""
	}
	e, err := events.FromMsg(raw.Header, raw.Data)
	if err != nil {
		t.Fatal(err)
	}
	return e.ID()
}

// beats waits until n new heartbeats after prev arrived in js, and returns
// the last one's id.
func beats(t *testing.T, js jetstream.JetStream, prev string, n int, where string) string {
	t.Helper()
	for range n {
		natstest.WaitFor(t, 5*time.Second, "a new heartbeat at "+where, func() bool {
			id := lastBeatIn(t, js)
			if id != "" && id != prev {
				prev = id
				return true
			}
			return false
		})
	}
	return prev
}

// A bootstrapped agent moves to another NATS on a rehome request: its
// heartbeats go there and no longer to the old server, it reports the new
// connection. A withdrawn
// request brings it back to its command line's server.
func TestAgentRehomesToAnotherNATSWithoutRestarting(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	cfg := w.config(dir)
	a, _ := w.start(cfg)
	natstest.WaitFor(t, 10*time.Second, "bootstrapped", a.Bootstrapped)
	beats(t, w.js, "", 2, "the source")
	if c, err := rehome.ReadConnected(dir); err != nil || c.URL != w.srv.URL() {
		t.Fatalf("connected report %+v, %v: want %s", c, err, w.srv.URL())
	}

	target := natstest.Start(t)
	_, tjs := target.Connect(t)
	if err := events.Provision(context.Background(), tjs, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	if err := rehome.WriteConnection(dir, rehome.Connection{URL: target.URL()}); err != nil {
		t.Fatal(err)
	}
	a.Rehome()
	natstest.WaitFor(t, 10*time.Second, "the agent reports the target connection", func() bool {
		c, err := rehome.ReadConnected(dir)
		return err == nil && c.URL == target.URL()
	})
	beats(t, tjs, "", 3, "the target")
	src := lastBeatIn(t, w.js)
	beats(t, tjs, lastBeatIn(t, tjs), 3, "the target")
	if now := lastBeatIn(t, w.js); now != src {
		t.Errorf("the source still gets heartbeats after the rehome (%s after %s)", now, src)
	}
	if w.srv.NumClients() != 1 { // the test's own connection
		t.Errorf("the source still has %d clients: the agent kept its old connection", w.srv.NumClients()-1)
	}
	if hb := lastTargetBeat(t, tjs); !hb.GetReady() {
		t.Errorf("the moved node reports not ready: %v", hb)
	}

	// Withdrawn: back to the command line's server.
	if err := rehome.RemoveConnection(dir); err != nil {
		t.Fatal(err)
	}
	a.Rehome()
	natstest.WaitFor(t, 10*time.Second, "the agent reports the source connection again", func() bool {
		c, err := rehome.ReadConnected(dir)
		return err == nil && c.URL == w.srv.URL()
	})
	beats(t, w.js, src, 2, "the source again")
}

// A request naming a server that does not accept the machine (here one
// that requires a user the machine is not) leaves the agent where it is:
// it never drops a working connection for one that does not log it in.
func TestAgentStaysWhenTheNewNATSRefusesIt(t *testing.T) {
	if testing.Short() {
		t.Skip("waits agent.RehomeTimeout")
	}
	w := newWorld(t)
	dir := t.TempDir()
	a, _ := w.start(w.config(dir))
	natstest.WaitFor(t, 10*time.Second, "bootstrapped", a.Bootstrapped)
	beats(t, w.js, "", 1, "the source")

	refusing, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, Username: "someone-else", Password: "not-the-machine", NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go refusing.Start()
	t.Cleanup(refusing.Shutdown)
	if !refusing.ReadyForConnections(5 * time.Second) {
		t.Fatal("the refusing server did not start")
	}
	if err := rehome.WriteConnection(dir, rehome.Connection{URL: refusing.ClientURL()}); err != nil {
		t.Fatal(err)
	}
	a.Rehome()
	// While and after it tries (agent.RehomeTimeout), it beats at the source.
	prev := lastBeatIn(t, w.js)
	deadline := time.Now().Add(agent.RehomeTimeout + 2*time.Second)
	for time.Now().Before(deadline) {
		prev = beats(t, w.js, prev, 1, "the source while the refusing server is tried")
	}
	if c, err := rehome.ReadConnected(dir); err != nil || c.URL != w.srv.URL() {
		t.Errorf("connected report %+v, %v: want still %s", c, err, w.srv.URL())
	}
}

func lastTargetBeat(t *testing.T, js jetstream.JetStream) *capnv1.NodeHeartbeat {
	t.Helper()
	s, err := js.Stream(context.Background(), events.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.GetLastMsgForSubject(context.Background(), events.HealthSubject("c1", "w-0", agent.HeartbeatKind))
	if err != nil {
		t.Fatal(err)
	}
	e, err := events.FromMsg(raw.Header, raw.Data)
	if err != nil {
		t.Fatal(err)
	}
	hb := new(capnv1.NodeHeartbeat)
	if err := events.DataAs(e, hb); err != nil {
		t.Fatal(err)
	}
	return hb
}

// No NATS message moves an agent: the subjects it serves (its etcd
// commands, its inbox) have no rehome, whoever publishes there — here a
// client with every permission, more than another machine's credential
// has (tests/perms: a machine may publish only its own health). Only its
// data dir and a signal do, which its provider's OS user alone reaches.
func TestNoNATSMessageRehomesTheAgent(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	a, _ := w.start(w.config(dir))
	natstest.WaitFor(t, 10*time.Second, "bootstrapped", a.Bootstrapped)
	prev := beats(t, w.js, "", 1, "the source")

	target := natstest.Start(t)
	_, tjs := target.Connect(t)
	if err := events.Provision(context.Background(), tjs, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	nc, _ := w.srv.Connect(t)
	body := []byte(`{"url":"` + target.URL() + `"}`)
	for _, op := range []string{"rehome", "connect", "nats-connection"} {
		msg, err := nc.Request(keys.EtcdCommand("c1", "w-0", op), body, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		t.Logf("etcd command %q answered %d bytes", op, len(msg.Data))
	}
	if err := nc.Publish(keys.MachineInboxPrefix("c1", "w-0")+".rehome", body); err != nil {
		t.Fatal(err)
	}
	// Another machine's connection request is in its own data dir: this
	// agent's signal does not read it.
	other := t.TempDir()
	if err := rehome.WriteConnection(other, rehome.Connection{URL: target.URL()}); err != nil {
		t.Fatal(err)
	}
	a.Rehome()
	beats(t, w.js, prev, 3, "the source")
	if c, err := rehome.ReadConnected(dir); err != nil || c.URL != w.srv.URL() {
		t.Errorf("connected report %+v, %v: want still %s", c, err, w.srv.URL())
	}
	if id := lastBeatIn(t, tjs); id != "" {
		t.Errorf("the target got heartbeat %s", id)
	}
}
