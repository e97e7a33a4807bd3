package perms

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/deploy/natsconfig/natsconfigtest"
	"github.com/capn-dev/capn/events"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// loginWithin bounds a machine's login: the callout answers at once.
const loginWithin = 10 * time.Second

// TestMachinesReachOnlyTheirOwnSubjects is issue 17's points 1 and 4 live
// on the rendered 3-node deployment (finding 1b): the real bootstrapper,
// configured by its rendered env file and connected to nats-1, answers the
// auth callout of every node; machines a and b of cluster c1 get their
// bootstrap data the way a deployment makes it. Holding everything a
// holds (its bootstrap credential, then its machine secret), logged in as
// a on nats-2 and nats-3, the attacker cannot log in as b, publish b's
// health (point 4: it would get b rebooted or replaced), ask for b's
// bootstrap data or read b's replies (point 1); a does its own job, and
// the static users are not the callout's business.
func TestMachinesReachOnlyTheirOwnSubjects(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node JetStream cluster: skipped with -short")
	}
	c := natsconfigtest.Start(t, natsconfig.Compose())
	c.Provision()
	c.StartBootstrapper(0)
	ms := c.WantMachines("c1", "a", "b")
	a, b := ms["a"], ms["b"]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	login := func(m natsconfigtest.Machine, password string, node int) (*actor, error) {
		t.Helper()
		lctx, lcancel := context.WithTimeout(ctx, loginWithin)
		defer lcancel()
		nc, js, v, err := c.ConnectMachine(lctx, m, password, node)
		if err != nil {
			return nil, err
		}
		return &actor{t: t, user: m.User(), nc: nc, js: js, v: v}, nil
	}

	// a's own job, with its bootstrap credential: fetch its data (which
	// holds its machine secret) and report its own health.
	withCred, err := login(a, a.Credential, 1)
	if err != nil {
		t.Fatalf("a cannot log in with its bootstrap credential: %v", err)
	}
	data, err := natsconfigtest.Fetch(ctx, withCred.nc, a)
	if err != nil || data.GetMachineSecret() == "" {
		t.Fatalf("a's fetch of its own data: %v (machine secret %v)", err, data.GetMachineSecret() != "")
	}
	withSecret, err := login(a, data.GetMachineSecret(), 2)
	if err != nil {
		t.Fatalf("a cannot log in with its machine secret: %v", err)
	}
	for _, m := range []*actor{withCred, withSecret} {
		heartbeat(ctx, m, "a")
	}

	t.Run("no login as another machine", func(t *testing.T) {
		for _, l := range []struct {
			what, user, password string
		}{
			{"b with a's credential", b.User(), a.Credential},
			{"b with a's machine secret", b.User(), data.GetMachineSecret()},
			{"every machine of c1, with a's credential", "machine.c1.*", a.Credential},
			{"the old shared node user, with a's credential", "node", a.Credential},
		} {
			cfg := c.MachineNATSConfig(a, l.password, 2)
			cfg.User = l.user
			lctx, lcancel := context.WithTimeout(ctx, loginWithin)
			_, _, _, err := c.ConnectWith(lctx, cfg)
			lcancel()
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
				t.Errorf("login as %s: %v, want an authorization violation", l.what, err)
			}
		}
	})

	t.Run("no other machine's health", func(t *testing.T) { // point 4
		for _, m := range in(t, withCred, withSecret) {
			m.refusedPublish(events.HealthSubject("c1", "b", "heartbeat"))
			m.refusedPublish(events.HealthSubject("c1", "b", "conditions"))
			m.refusedPublish(events.HealthSubject("c2", "a", "conditions")) // another cluster's a
		}
	})

	t.Run("no other machine's bootstrap data or replies", func(t *testing.T) { // point 1
		for _, m := range in(t, withCred, withSecret) {
			m.refused(b.FetchSubject(), func() error {
				rctx, rcancel := context.WithTimeout(ctx, refusedTimeout)
				defer rcancel()
				_, err := natsconfigtest.Fetch(rctx, m.nc, natsconfigtest.Machine{Cluster: "c1", Name: "b", Checksum: b.Checksum, Credential: a.Credential})
				return err
			})
			m.refusedSubscribe(keys.MachineInboxPrefix("c1", "b") + ".>")
			m.refusedSubscribe("_INBOX.>")
			m.refusedSubscribe(natsconfig.SubjectBootstrapFetch + ".>") // answering fetches is the bootstrapper's
		}
		// Its own fetch only until its join, and only with its credential.
		withSecret := in(t, withSecret)[0]
		withSecret.refused(a.FetchSubject(), func() error {
			rctx, rcancel := context.WithTimeout(ctx, refusedTimeout)
			defer rcancel()
			_, err := natsconfigtest.Fetch(rctx, withSecret.nc, a)
			return err
		})
	})

	// etcd snapshots (issue 22): a's agent answers the backup service's
	// etcd commands to a (a snapshot is many replies to one request), and
	// nothing of another machine's or cluster's: it cannot read b's or
	// another cluster's commands (a restore's chunks are a snapshot), send
	// one, ask the backup service for a snapshot or restore, or touch the
	// snapshots' object store.
	t.Run("etcd: its own commands only; no other cluster's snapshots", func(t *testing.T) {
		bk, _, _ := c.Connect(natsconfig.Backup, 1)
		for _, m := range in(t, withCred, withSecret) {
			sub, err := m.nc.Subscribe(keys.EtcdCommand("c1", "a", "*"), func(msg *nats.Msg) {
				for i := range 3 {
					_ = msg.Respond([]byte{byte('0' + i)})
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			inbox := bk.NewInbox()
			replies, err := bk.SubscribeSync(inbox)
			if err != nil {
				t.Fatal(err)
			}
			// a is on another server than the backup service: its interest
			// reaches nats-1 a moment after its flush (no responders until).
			var got []byte
			deadline := time.Now().Add(10 * time.Second)
			for len(got) < 3 {
				if len(got) == 0 {
					if err := bk.PublishRequest(keys.EtcdCommand("c1", "a", "snapshot"), inbox, nil); err != nil {
						t.Fatal(err)
					}
				}
				r, err := replies.NextMsg(5 * time.Second)
				if err == nil && r.Header.Get("Status") == "503" && time.Now().Before(deadline) {
					continue
				}
				if err == nil && r.Header.Get("Status") != "" {
					err = errors.New("status " + r.Header.Get("Status"))
				}
				if err != nil {
					t.Errorf("%s: the backup service got %q of a's 3 replies: %v (violations %v)", m.user, got, err, m.v.All())
					break
				}
				got = append(got, r.Data...)
			}
			if string(got) != "012" {
				t.Errorf("%s: a's replies to its own etcd command: %q, want %q", m.user, got, "012")
			}
			_ = replies.Unsubscribe()
			_ = sub.Unsubscribe()
			m.refusedSubscribe(keys.EtcdCommand("c1", "b", "*"))
			m.refusedSubscribe(keys.EtcdCommand("c2", "a", "restore-chunk"))
			m.refusedSubscribe(natsconfig.SubjectEtcd + ".>")
			m.refusedPublish(keys.EtcdCommand("c1", "b", "restore-prepare"))
			m.refusedPublish(keys.EtcdCommand("c2", "x", "snapshot"))
			m.refusedPublish(keys.BackupRequest("etcd-snapshot"))
			m.refusedPublish(keys.BackupRequest("etcd-restore"))
			m.refusedPublish(keys.BackupRequest("etcd-list"))
			m.refusedPublish("$JS.API.STREAM.INFO.OBJ_" + events.ObjectEtcdSnapshots)
			m.refusedPublish("$JS.API.DIRECT.GET.OBJ_" + events.ObjectEtcdSnapshots + ".$O." + events.ObjectEtcdSnapshots + ".M.x")
			m.refusedPublish("$O." + events.ObjectEtcdSnapshots + ".C.x")
			m.refusedSubscribe("$O." + events.ObjectEtcdSnapshots + ".>")
		}
	})

	// CA rotation (issue 22): a phase's command carries the cluster's
	// signing CA key. a's agent reads and answers its own certificates
	// commands from the backup service, and cannot read another machine's
	// or cluster's (it would get their CA key), send one, or ask for a
	// rotation.
	t.Run("pki: its own certificates commands only", func(t *testing.T) {
		bk, _, _ := c.Connect(natsconfig.Backup, 1)
		for _, m := range in(t, withCred, withSecret) {
			sub, err := m.nc.Subscribe(keys.PKICommand("c1", "a", "*"), func(msg *nats.Msg) {
				_ = msg.Respond(append([]byte("a got "), msg.Data...))
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			var got []byte
			deadline := time.Now().Add(10 * time.Second)
			for {
				r, err := bk.Request(keys.PKICommand("c1", "a", "ca-phase"), []byte("key"), 5*time.Second)
				if errors.Is(err, nats.ErrNoResponders) && time.Now().Before(deadline) {
					continue // a's interest reaches the backup user's server a moment later
				}
				if err != nil {
					t.Errorf("%s: the backup service's command to a: %v (violations %v)", m.user, err, m.v.All())
					break
				}
				got = r.Data
				break
			}
			if string(got) != "a got key" {
				t.Errorf("%s: a's answer to its own certificates command: %q", m.user, got)
			}
			_ = sub.Unsubscribe()
			m.refusedSubscribe(keys.PKICommand("c1", "b", "*"))
			m.refusedSubscribe(keys.PKICommand("c1", "b", "ca-phase"))
			m.refusedSubscribe(keys.PKICommand("c2", "a", "ca-phase"))
			m.refusedSubscribe(natsconfig.SubjectPKI + ".>")
			m.refusedSubscribe(natsconfig.SubjectPKI + ".c1.*.ca-phase")
			m.refusedPublish(keys.PKICommand("c1", "b", "ca-phase"))
			m.refusedPublish(keys.PKICommand("c1", "a", "ca-phase"))
			m.refusedPublish(keys.BackupRequest("rotate-ca"))
		}
	})

	t.Run("nothing else", func(t *testing.T) {
		for _, m := range in(t, withCred, withSecret) {
			m.refusedPublish("$KV.desired.machine.c1.b")
			m.refusedPublish("$KV.observed.node.c1.a")
			m.refusedPublish(natsconfig.SubjectBootstrapCredential + ".sim.c1.b")
			m.refusedSubscribe(events.SubjectHealth + ".>")
		}
	})

	// The static users are the callout's auth_users: each logs in on its
	// nkey at once, with its own permissions, never a machine's (the sim
	// provider heartbeats for every simulated machine, b included).
	t.Run("static users are not the callout's business", func(t *testing.T) {
		for _, u := range c.D.Users() {
			start := time.Now()
			nc, _, _ := c.Connect(u.Name, 2)
			if err := nc.Flush(); err != nil || time.Since(start) > 2*time.Second {
				t.Errorf("%s: logged in in %s (%v)", u.Name, time.Since(start), err)
			}
		}
		nc, js, v := c.Connect(natsconfig.ProviderUser("sim"), 2)
		heartbeat(ctx, &actor{t: t, user: natsconfig.ProviderUser("sim"), nc: nc, js: js, v: v}, "b")
	})

	for _, v := range c.ServerViolations() {
		if !strings.Contains(v, "machine.c1.a") {
			t.Errorf("a node logged a violation of someone else: %s", v)
		}
	}
}

// in is actors as they act in test t (a subtest).
func in(t *testing.T, actors ...*actor) []*actor {
	out := make([]*actor, len(actors))
	for i, a := range actors {
		c := *a
		c.t = t
		out[i] = &c
	}
	return out
}

// heartbeat publishes machine's heartbeat as m and waits for JetStream's
// acknowledgement: it is stored, and nothing was refused.
func heartbeat(ctx context.Context, m *actor, machine string) {
	m.t.Helper()
	p := events.NewPublisher(m.js, "capn/node/c1/"+machine)
	hb := &capnv1.NodeHeartbeat{Cluster: "c1", Machine: machine, Ready: true, Time: timestamppb.Now()}
	id := "heartbeat.c1." + machine + "." + m.user + "." + time.Now().Format("150405.000000000")
	if _, err := p.Publish(ctx, events.HealthSubject("c1", machine, "heartbeat"), events.TypeNodeHeartbeat, id, hb); err != nil {
		m.t.Errorf("%s: heartbeat of %s: %v (violations %v)", m.user, machine, err, m.v.All())
	}
	m.clean()
}
