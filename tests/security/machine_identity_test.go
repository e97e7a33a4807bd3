package security

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// Finding 1b: every node agent shared one NATS user, so root on one
// machine could publish any machine's health (and get it rebooted, then
// replaced) and ask for any machine's bootstrap data. Each machine now
// logs in as itself through the bootstrapper's auth callout and reaches
// only its own subjects. The attack runs the real capn dev binary with
// real capn-node machines (process provider) and is root on worker a:
// it holds everything in a's directory (its bootstrap credential, its
// machine secret) and tries to act as, or against, worker b.
func TestAMachineReachesOnlyItsOwnSubjects(t *testing.T) {
	dir := t.TempDir()
	node := buildBinary(t, dir, "capn-node")
	dev := startDevBinary(t, dir, "--providers", "process", "--process-node-binary", node)
	applyYAML(t, dev, `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata: {name: ids}
spec:
  kubernetesVersion: v1.33.4
  controlPlane: {provider: process, replicas: 1}
  workerPools:
  - {name: w, provider: process, replicas: 2}
`)
	admin := dev.adminConn(t)
	js, _ := jetstream.New(admin)
	ctx := context.Background()
	observed, err := js.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	// Three machines Running: each logged in with its credential, fetched
	// its data and heartbeats as itself.
	var workers []string
	natstest.WaitFor(t, 3*time.Minute, "3 machines of cluster ids Running", func() bool {
		workers = workers[:0]
		running := 0
		keys, _ := observed.ListKeysFiltered(ctx, "machine.ids.*")
		for k := range keys.Keys() {
			e, err := observed.Get(ctx, k)
			st := new(capnv1.MachineStatus)
			if err != nil || proto.Unmarshal(e.Value(), st) != nil || st.GetPhase() != "Running" {
				continue
			}
			running++
			if m := strings.TrimPrefix(k, "machine.ids."); strings.Contains(m, "-w-") {
				workers = append(workers, m)
			}
		}
		return running == 3 && len(workers) == 2
	})
	a, b := workers[0], workers[1]
	machineDir := func(m string) string { return filepath.Join(dev.data, "process", "clusters", "ids", "machines", m) }
	read := func(path string) string {
		bs, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("what machine a holds: %v", err)
		}
		return strings.TrimSpace(string(bs))
	}
	secret := read(filepath.Join(machineDir(a), "node", "capn-node", "machine-secret"))
	credential := read(filepath.Join(machineDir(a), "bootstrap-credential"))

	login := func(user, password string, errs chan error) (*nats.Conn, error) {
		opts := []nats.Option{nats.UserInfo(user, password), nats.Timeout(5 * time.Second), nats.MaxReconnects(0)}
		if errs != nil {
			opts = append(opts, nats.CustomInboxPrefix(keys.MachineInboxPrefix("ids", a)),
				nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
		}
		return nats.Connect(dev.natsURL, opts...)
	}
	refused := func(err error) bool {
		return err != nil && (errors.Is(err, nats.ErrAuthorization) || strings.Contains(strings.ToLower(err.Error()), "authorization violation"))
	}

	// Logging in as another machine, with a's secrets, or as anyone else.
	for _, try := range []struct{ what, user, password string }{
		{"b with a's machine secret", keys.MachineUser("ids", b), secret},
		{"b with a's bootstrap credential", keys.MachineUser("ids", b), credential},
		{"a with its bootstrap credential after the join", keys.MachineUser("ids", a), credential},
		{"a with a wildcard", "machine.ids.*", secret},
		{"the old shared node user", "node", secret},
	} {
		if nc, err := login(try.user, try.password, nil); !refused(err) {
			if nc != nil {
				nc.Close()
			}
			t.Errorf("login as %s: %v; want an authorization violation", try.what, err)
		}
	}

	// Logged in as a with its machine secret: its own health goes in...
	errs := make(chan error, 16)
	nc, err := login(keys.MachineUser("ids", a), secret, errs)
	if err != nil {
		t.Fatalf("machine a's own login: %v", err)
	}
	defer nc.Close()
	mjs, _ := jetstream.New(nc)
	own := events.HealthSubject("ids", a, "conditions")
	if _, err := mjs.Publish(ctx, own, []byte("{}"), jetstream.WithMsgID("attack-own-"+a)); err != nil {
		t.Fatalf("machine a's publish of its own health: %v", err)
	}
	// ...and nothing else does: b's health (which would get b rebooted),
	// b's and its own bootstrap fetch, b's replies, every machine's health,
	// a bucket.
	violation := func(what, subject string, act func() error) {
		t.Helper()
		if err := act(); err != nil && !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("%s: %v", what, err)
		}
		_ = nc.Flush()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case err := <-errs:
				if strings.Contains(strings.ToLower(err.Error()), "permissions violation") && strings.Contains(err.Error(), subject) {
					return
				}
			case <-timeout:
				t.Errorf("%s (%s) was not refused by the server", what, subject)
				return
			}
		}
	}
	for _, p := range []struct{ what, subject string }{
		{"b's heartbeat", events.HealthSubject("ids", b, "heartbeat")},
		{"b's node conditions", events.HealthSubject("ids", b, "conditions")},
		{"a write to desired", "$KV." + events.BucketDesired + ".cluster.ids"},
		{"another cluster's health", events.HealthSubject("other", a, "heartbeat")},
	} {
		violation("publish "+p.what, p.subject, func() error { return nc.Publish(p.subject, []byte(`{"ready":false}`)) })
	}
	for _, m := range []string{b, a} {
		subject := "capn.bootstrap.fetch.ids." + m
		violation("the bootstrap fetch of "+m+" after the join", subject, func() error {
			_, err := nc.Request(subject, nil, 2*time.Second)
			return err
		})
	}
	for _, s := range []string{keys.MachineInboxPrefix("ids", b) + ".>", events.SubjectHealth + ".>", "_INBOX.>"} {
		violation("subscribe "+s, s, func() error {
			_, err := nc.SubscribeSync(s)
			return err
		})
	}
}

// applyYAML creates a cluster through capn dev's gateway with its admin token.
func applyYAML(t *testing.T, dev devBin, doc string) {
	t.Helper()
	tok, err := os.ReadFile(filepath.Join(dev.data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	res := testkit.Do(t, http.MethodPost, dev.gatewayURL+"/v1/clusters", strings.TrimSpace(string(tok)), doc, "Content-Type", "application/yaml")
	if res.Status/100 != 2 {
		t.Fatalf("apply: %d %s", res.Status, res.Body)
	}
}
