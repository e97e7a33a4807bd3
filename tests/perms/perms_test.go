// Package perms checks the NATS permissions capn-nats-config renders
// against a real nats-server started from the rendered configuration: each
// component's user can do its job, through the same code its service runs
// (store buckets and caches, events publishers and consumers), and every
// attempt outside it is refused by the server. A denied publish returns no
// error in NATS (a request just times out), so a refusal is asserted on the
// server's verdict: the "Permissions Violation" it sends the client, which
// names the subject.
package perms

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/deploy/natsconfig/natsconfigtest"
	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/bootstrapper"
	controlplanehosted "github.com/capn-dev/capn/services/controlplane-hosted"
)

// deniedWithin bounds the wait for a refusal: the server answers a denied
// publish or subscription with its verdict at once.
const deniedWithin = 3 * time.Second

// refusedTimeout bounds a request expected to be refused: it gets no
// answer, only the server's verdict.
const refusedTimeout = 500 * time.Millisecond

// world is one server running the rendered compose deployment (one node,
// R1: permissions do not depend on the cluster) with capn's topology.
type world struct {
	t *testing.T
	c *natsconfigtest.Cluster
}

func newWorld(t *testing.T) *world {
	t.Helper()
	d := natsconfig.Compose()
	d.Servers, d.Replicas = d.Servers[:1], 1
	c := natsconfigtest.Start(t, d)
	c.Provision() // as the init user: that is its job
	return &world{t: t, c: c}
}

// actor is one connection as one user.
type actor struct {
	t    *testing.T
	user string
	nc   *nats.Conn
	js   jetstream.JetStream
	v    *natsconfigtest.Violations
}

func (w *world) as(t *testing.T, user string) *actor {
	t.Helper()
	nc, js, v := w.c.Connect(user, 0)
	return &actor{t: t, user: user, nc: nc, js: js, v: v}
}

// clean fails the test if the server refused the actor anything.
func (a *actor) clean() {
	a.t.Helper()
	// A marker no user may publish: the server answers in order and the
	// client's error callbacks run in order, so once the marker's refusal
	// has arrived every earlier refusal has too.
	marker := "capn-perms-marker." + strings.TrimPrefix(nats.NewInbox(), "_INBOX.")
	if err := a.nc.Publish(marker, nil); err != nil {
		a.t.Fatal(err)
	}
	if err := a.nc.Flush(); err != nil {
		a.t.Fatal(err)
	}
	if !a.v.Wait(marker, deniedWithin) {
		a.t.Fatalf("%s: the server never refused the marker %s", a.user, marker)
	}
	var denied []string
	for _, v := range a.v.All() {
		if !strings.Contains(v, marker) {
			denied = append(denied, v)
		}
	}
	if len(denied) > 0 {
		a.t.Errorf("%s was denied while doing its job: %s", a.user, strings.Join(denied, "; "))
	}
}

// refused asserts that the server refused subject to the actor, after op
// (which must fail, or not answer, itself).
func (a *actor) refused(subject string, op func() error) {
	a.t.Helper()
	if err := op(); err == nil {
		a.t.Errorf("%s: the operation on %s succeeded", a.user, subject)
	}
	if !a.v.Wait(subject, deniedWithin) {
		a.t.Errorf("%s: no permissions violation for %q from the server; it reported %v", a.user, subject, a.v.All())
	}
}

// refusedPublish asserts the server refuses a publish to subject: a
// plain publish, which returns no error whatever the verdict.
func (a *actor) refusedPublish(subject string) {
	a.t.Helper()
	if err := a.nc.Publish(subject, []byte("{}")); err != nil {
		a.t.Fatal(err)
	}
	if !a.v.Wait(subject, deniedWithin) {
		a.t.Errorf("%s: no permissions violation for %q from the server; it reported %v", a.user, subject, a.v.All())
	}
}

// refusedSubscribe asserts the server refuses a subscription to subject.
func (a *actor) refusedSubscribe(subject string) {
	a.t.Helper()
	a.refused(subject, func() error {
		sub, err := a.nc.SubscribeSync(subject)
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
		if err := a.nc.Flush(); err != nil {
			return err
		}
		if !a.v.Wait(subject, deniedWithin) {
			return nil
		}
		return errors.New("refused")
	})
}

// objectStore puts, gets, lists and deletes an object of the backups
// object store, as the gateway and the backup service do.
func (a *actor) objectStore(name string) { a.t.Helper(); a.objectStoreIn(events.ObjectBackups, name) }

// objectStoreIn puts, gets, lists and deletes an object of bucket.
func (a *actor) objectStoreIn(bucket, name string) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := a.js.ObjectStore(ctx, bucket)
	if err != nil {
		a.t.Errorf("%s: object store: %v", a.user, err)
		return
	}
	data := []byte(strings.Repeat("backup ", 40000)) // more than one chunk
	if _, err := o.PutBytes(ctx, name, data); err != nil {
		a.t.Errorf("%s: put %s: %v", a.user, name, err)
		return
	}
	if got, err := o.GetBytes(ctx, name); err != nil || len(got) != len(data) {
		a.t.Errorf("%s: get %s: %d bytes, %v", a.user, name, len(got), err)
	}
	if infos, err := o.List(ctx); err != nil || len(infos) == 0 {
		a.t.Errorf("%s: list: %v", a.user, err)
	}
	if err := o.Delete(ctx, name); err != nil {
		a.t.Errorf("%s: delete %s: %v", a.user, name, err)
	}
}

// kvGet is a direct get of key in bucket, the request a KV read makes.
func (a *actor) kvGet(bucket, key string) func() error {
	return func() error {
		m, err := a.nc.Request(fmt.Sprintf("$JS.API.DIRECT.GET.KV_%s.$KV.%s.%s", bucket, bucket, key), nil, refusedTimeout)
		if err != nil {
			return err
		}
		if m.Header.Get("Status") != "" {
			return fmt.Errorf("status %s", m.Header.Get("Status"))
		}
		return nil
	}
}

func (a *actor) bucket(bucket string) jetstream.KeyValue {
	a.t.Helper()
	kv, err := a.js.KeyValue(context.Background(), bucket)
	if err != nil {
		a.t.Fatalf("%s: bucket %s: %v", a.user, bucket, err)
	}
	return kv
}

// cache starts a watch cache over bucket, as every service does.
func (a *actor) cache(bucket string) {
	a.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a.t.Cleanup(cancel)
	c := store.NewCache(a.bucket(bucket), store.CacheOptions{})
	if err := c.Start(ctx); err != nil {
		a.t.Fatalf("%s: watch %s: %v", a.user, bucket, err)
	}
	a.resync(c, bucket)
}

// resync runs one resync of c, as every cache does every few minutes:
// its listing (metadata only) is allowed too.
func (a *actor) resync(c *store.Cache, bucket string) {
	a.t.Helper()
	sub := c.Subscribe("")
	defer sub.Unsubscribe()
	c.Resync()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ch := <-sub.C():
			if ch.Resync {
				return
			}
		case <-timeout:
			a.t.Errorf("%s: no resync of %s within 10s (violations: %v)", a.user, bucket, a.v.All())
			return
		}
	}
}

// cacheKeep starts a watch cache over bucket keeping only prefixes (a
// filtered watcher), as a service does with store.Keep.
func (a *actor) cacheKeep(bucket string, prefixes ...string) {
	a.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a.t.Cleanup(cancel)
	c := store.NewCache(a.bucket(bucket), store.Keep(store.CacheOptions{}, a.js, prefixes...))
	if err := c.Start(ctx); err != nil {
		a.t.Fatalf("%s: watch %s %v: %v", a.user, bucket, prefixes, err)
	}
	a.resync(c, bucket)
}

// put writes key with compare-and-set through store.Bucket (create, then
// update on the revision read).
func (a *actor) put(bucket, key string) {
	a.t.Helper()
	b := store.NewBucket(a.bucket(bucket), func() *emptypb.Empty { return new(emptypb.Empty) })
	if _, _, err := b.Mutate(context.Background(), key, func(*emptypb.Empty, bool) (*emptypb.Empty, error) {
		return &emptypb.Empty{}, nil
	}); err != nil {
		a.t.Errorf("%s: write %s %s: %v", a.user, bucket, key, err)
	}
}

func (a *actor) get(bucket, key string) {
	a.t.Helper()
	if _, err := a.bucket(bucket).Get(context.Background(), key); err != nil {
		a.t.Errorf("%s: read %s %s: %v", a.user, bucket, key, err)
	}
}

// publish stores a CloudEvent on subject through events.Publisher.
func (a *actor) publish(subject string) {
	a.t.Helper()
	p := events.NewPublisher(a.js, "capn/perms-test")
	if _, err := p.Publish(context.Background(), subject, "dev.capn.test", subject+"."+a.user, &emptypb.Empty{}); err != nil {
		a.t.Errorf("%s: publish %s: %v", a.user, subject, err)
	}
}

// consume creates the durable d as its service does and takes one message.
func (a *actor) consume(d natsconfig.Durable) *events.Message {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan *events.Message, 1)
	spec := events.ConsumerSpec{Stream: d.Stream, Durable: d.Name, Filters: d.Filters}
	go func() {
		_ = events.Consume(ctx, a.js, spec, func(_ context.Context, m *events.Message) error {
			select {
			case got <- m:
			default:
			}
			cancel()
			return nil
		})
	}()
	select {
	case m := <-got:
		return m
	case <-ctx.Done():
		a.t.Errorf("%s: no message through durable %s within 10s (violations: %v)", a.user, d.Name, a.v.All())
		return nil
	}
}

func durable(d natsconfig.Deployment, user, name string) natsconfig.Durable {
	for _, c := range d.Durables()[user] {
		if c.Name == name {
			return c
		}
	}
	panic("no durable " + name + " of " + user)
}

// TestEachUserDoesItsJob runs each component's NATS work as its user: no
// refusal anywhere.
func TestEachUserDoesItsJob(t *testing.T) {
	w := newWorld(t)
	d := w.c.D

	gw := w.as(t, natsconfig.Gateway)
	gw.cache(events.BucketDesired)
	gw.cache(events.BucketObserved)
	gw.put(events.BucketDesired, "cluster.demo")
	gw.publish(gateway.SubjectIngest + ".dev.capn.test")
	gw.publish(events.HealthSubject("demo", "m1", keys.HealthConditions))
	gw.put(events.BucketDesired, "machine.demo.m1") // hooks and capn delete machine
	gw.publish(events.EventSubject("machine", "hook", "demo", "m1"))
	gw.put(events.BucketDesired, "addonset.cni")            // capn apply of an AddonSet
	gw.put(events.BucketSecrets, "addonsecret.creds")       // capn addon-secret set
	gw.put(events.BucketSecrets, "bootstrapsecret.tls")     // capn bootstrap-secret set
	gw.put(events.BucketSecrets, "externalkubeconfig.prod") // capn external-kubeconfig set
	gw.get(events.BucketSecrets, "externalkubeconfig.prod") // ... get

	cp := w.as(t, natsconfig.ClusterPlanner)
	cp.cache(events.BucketDesired)
	cp.cache(events.BucketObserved)
	cp.put(events.BucketDesired, "machine.demo.m1")
	cp.put(events.BucketObserved, "cluster.demo")
	cp.put(events.BucketDesired, "cluster.demo") // its delete of a deleted cluster's key
	cp.publish(events.EventSubject("cluster", "ready", "demo", "_"))
	cp.publish(events.ProviderSubject("sim", "cluster", "ensure", "demo", "_"))
	cp.publish(events.ProviderSubject("sim", "cluster", "orphan", "demo", "_")) // capn move
	cp.publish(events.CommandSubject("bootstrap", "cleanup", "demo", "_"))
	cp.put(events.BucketObserved, "controlplane.demo") // the machines implementation's record
	cp.publish("capn.controlplane.hosted.ensure.demo")
	cp.publish("capn.controlplane.external.delete.demo")

	mm := w.as(t, natsconfig.MachineManager)
	mm.cache(events.BucketDesired)
	mm.cache(events.BucketObserved)
	mm.put(events.BucketObserved, "machine.demo.m1")
	mm.publish(events.CommandSubject("bootstrap", "generate", "demo", "m1"))
	mm.publish(events.ProviderSubject("sim", "machine", "create", "demo", "m1"))
	mm.publish(events.ProviderSubject("docker", "machine", "create", "demo", "m2"))
	mm.publish(events.ProviderSubject("sim", "machine", "delete", "demo", "m1"))
	mm.publish(events.ProviderSubject("sim", "machine", "orphan", "demo", "m1")) // capn move
	mm.publish(events.EventSubject("machine", "running", "demo", "m1"))

	bs := w.as(t, natsconfig.Bootstrapper)
	bs.cache(events.BucketDesired)
	bs.cache(events.BucketObserved)
	bs.cache(events.BucketSecrets)
	for _, k := range []string{"pki.demo", "kubeconfig.demo", "bootstrap.demo.m1"} {
		bs.put(events.BucketSecrets, k)
	}
	bs.put(events.BucketObserved, "secrets.demo")
	bs.get(events.BucketSecrets, "bootstrapsecret.tls") // a file's secretRef
	bs.get(events.BucketObserved, "controlplane.demo")  // a hosted or external control plane's endpoint and CA
	if m := bs.consume(durable(d, natsconfig.Bootstrapper, natsconfig.Bootstrapper)); m != nil && !strings.HasPrefix(m.Subject, "capn.cmd.bootstrap.") {
		t.Errorf("bootstrapper got %s", m.Subject)
	}
	bs.publish(events.EventSubject("bootstrap", "ready", "demo", "m1"))
	// The bootstrap fetch, the credential and the auth callout: the
	// bootstrapper answers them all (machines ask: machines_test.go).
	for _, subject := range []string{bootstrapper.FetchSubjectRoot + ".*.*", bootstrapper.CredentialSubjectRoot + ".*.*.*", natsconfig.SubjectAuthCallout} {
		sub, err := bs.nc.QueueSubscribe(subject, bootstrapper.FetchQueue, func(*nats.Msg) {})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	if err := bs.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	sim := w.as(t, natsconfig.ProviderUser("sim"))
	if m := sim.consume(durable(d, natsconfig.ProviderUser("sim"), natsconfig.ProviderUser("sim"))); m != nil && !strings.HasPrefix(m.Subject, "capn.provider.sim.") {
		t.Errorf("provider-sim got %s", m.Subject)
	}
	sim.put(events.BucketObserved, "infra.sim.demo.m1")
	sim.put(events.BucketObserved, "infra.sim.demo._")
	sim.put(events.BucketObserved, "provider.sim")
	// The SDK lists its records through a push consumer it creates by
	// name and leaves to expire (it may delete no consumer).
	lc, err := sim.js.CreatePushConsumer(context.Background(), "KV_"+events.BucketObserved, jetstream.ConsumerConfig{
		Name: "list_perms", DeliverSubject: sim.nc.NewInbox(), DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy: jetstream.AckNonePolicy, FilterSubject: "$KV.observed.infra.sim.>", InactiveThreshold: 5 * time.Second})
	if err != nil {
		t.Errorf("provider-sim: list its infra: %v", err)
	} else {
		got := make(chan string, 4)
		cc, err := lc.Consume(func(m jetstream.Msg) {
			select {
			case got <- m.Subject():
			default:
			}
		})
		if err != nil {
			t.Errorf("provider-sim: list its infra: %v", err)
		} else if s := <-got; !strings.HasPrefix(s, "$KV.observed.infra.sim.") {
			t.Errorf("provider-sim: list its infra: got %s", s)
		}
		if cc != nil {
			cc.Stop()
		}
	}
	sim.publish(events.DriftSubject("sim", "demo", "m1"))
	sim.publish(events.HealthSubject("demo", "m1", keys.HealthHeartbeat))

	dk := w.as(t, natsconfig.ProviderUser("docker"))
	if m := dk.consume(durable(d, natsconfig.ProviderUser("docker"), natsconfig.ProviderUser("docker"))); m != nil && !strings.HasPrefix(m.Subject, "capn.provider.docker.") {
		t.Errorf("provider-docker got %s", m.Subject)
	}
	dk.get(events.BucketObserved, "secrets.demo") // the CA pin
	dk.put(events.BucketObserved, "infra.docker.demo.m2")

	hw := w.as(t, natsconfig.HealthWatcher)
	hw.cache(events.BucketDesired)
	hw.cache(events.BucketObserved)
	hw.get(events.BucketSecrets, "kubeconfig.demo")         // to read real-kubernetes clusters' Nodes
	hw.get(events.BucketSecrets, "externalkubeconfig.prod") // ... and external clusters' Nodes
	hw.put(events.BucketObserved, "node.demo.m1")
	hw.consume(durable(d, natsconfig.HealthWatcher, natsconfig.HealthWatcher+"-health"))
	hw.consume(durable(d, natsconfig.HealthWatcher, natsconfig.HealthWatcher+"-heartbeats"))
	hw.consume(durable(d, natsconfig.HealthWatcher, natsconfig.HealthWatcher+"-drift"))
	hw.publish(events.EventSubject("machine", "unhealthy", "demo", "m1"))

	mm.consume(durable(d, natsconfig.MachineManager, natsconfig.MachineManager+"-bootstrap"))

	am := w.as(t, natsconfig.AddonManager)
	am.cacheKeep(events.BucketDesired, "cluster.", "addonset.")
	am.cacheKeep(events.BucketObserved, "cluster.", "addon.", "provider.")
	am.cacheKeep(events.BucketSecrets, "addonsecret.")      // the add-on secrets sets name
	am.get(events.BucketSecrets, "kubeconfig.demo")         // to reach the workload API server
	am.get(events.BucketSecrets, "externalkubeconfig.prod") // ... an external cluster's
	am.get(events.BucketSecrets, "addonsecret.creds")
	am.put(events.BucketObserved, "addon.demo.cni")
	am.publish(events.EventSubject("addon", "applied", "demo", "cni"))

	// The fleet-manager: its caches, a wave's change to a desired
	// cluster, its rollout status and its events.
	fm := w.as(t, natsconfig.FleetManager)
	fm.cacheKeep(events.BucketDesired, "cluster.", "classrev.", "rollout.")
	fm.cacheKeep(events.BucketObserved, "cluster.", "remediation.", "rollout.")
	fm.put(events.BucketDesired, "cluster.demo")
	fm.put(events.BucketObserved, "rollout.r1")
	fm.publish(events.EventSubject("rollout", "halted", "r1", "_"))

	// The gateway writes classes, their revisions and rollouts.
	gwf := w.as(t, natsconfig.Gateway)
	gwf.put(events.BucketDesired, "clusterclass.standard")
	gwf.put(events.BucketDesired, "classrev.standard.1")
	gwf.put(events.BucketDesired, "rollout.r1")

	rm := w.as(t, natsconfig.Remediator)
	rm.cache(events.BucketDesired)
	rm.cache(events.BucketObserved)
	rm.consume(durable(d, natsconfig.Remediator, natsconfig.Remediator+"-unhealthy"))
	rm.put(events.BucketDesired, "machine.demo.m1")
	rm.put(events.BucketObserved, "remediation.demo.md-0")
	rm.publish(events.EventSubject("machine", "remediation", "demo", "m1"))
	rm.publish(events.ProviderSubject("sim", "machine", "reboot", "demo", "m1"))

	// The autoscaler-provider: its caches, a pool's replicas, a machine's
	// delete-machine mark, its own status key and its timeline events.
	ap := w.as(t, natsconfig.AutoscalerProvider)
	ap.cache(events.BucketDesired)
	ap.cache(events.BucketObserved)
	ap.put(events.BucketDesired, "cluster.demo")
	ap.put(events.BucketDesired, "machine.demo.m1")
	ap.put(events.BucketObserved, "autoscaler.demo.md-0")
	ap.publish(events.EventSubject("autoscaler", "scaled-up", "demo", "_"))

	// The gateway: a kubeconfig (sealed in secrets) and a timeline through
	// an ordered consumer of CAPN_EVENTS.
	gw.get(events.BucketSecrets, "kubeconfig.demo")
	cons, err := gw.js.OrderedConsumer(context.Background(), events.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.EventSubject("*", "*", "demo", "*")}, InactiveThreshold: time.Minute})
	if err != nil {
		t.Errorf("gateway: timeline consumer: %v", err)
	} else if m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
		t.Errorf("gateway: timeline: %v", err)
	} else if !strings.HasPrefix(m.Subject(), "capn.evt.") {
		t.Errorf("gateway: timeline got %s", m.Subject())
	}

	// The backup service: each bucket read at one point, its writes,
	// adoption commands, the backups object store, and its requests.
	bk := w.as(t, natsconfig.Backup)
	if snaps, err := store.ReadSnapshots(context.Background(), bk.nc, store.SnapshotOptions{}, events.BucketObserved, events.BucketSecrets, events.BucketDesired); err != nil {
		t.Errorf("backup: read the buckets at one point: %v", err)
	} else if len(snaps[1].Entries) == 0 {
		t.Error("backup: read no secrets")
	}
	for _, k := range []string{"cluster.restored", "machine.restored.m1"} {
		bk.put(events.BucketDesired, k)
	}
	for _, k := range []string{"machine.restored.m1", "node.restored.m1", "cluster.restored", "remediation.restored.md-0", "secrets.restored", "addon.restored.cni", "backup.schedule", "maintenance.restored", "controlplane.restored"} {
		bk.put(events.BucketObserved, k)
	}
	bk.put(events.BucketSecrets, "pki.restored")
	bk.put(events.BucketSecrets, "addonsecret.restored")
	bk.put(events.BucketDesired, "addonset.restored")
	bk.put(events.BucketDesired, "kubernetesversions.restored")
	bk.publish(events.ProviderSubject("sim", "machine", "adopt", "restored", "m1"))
	bk.publish(events.ProviderSubject("docker", "cluster", "adopt", "restored", "_"))
	bk.objectStore("b1")
	// Workload clusters' etcd snapshots: their object store, commands to
	// a control-plane machine's agent, and the gateway's requests.
	bk.objectStoreIn(events.ObjectEtcdSnapshots, "demo/s1")
	if err := bk.nc.PublishRequest("capn.etcd.demo.m1.snapshot", bk.nc.NewInbox(), nil); err != nil { // core: a violation shows in clean
		t.Errorf("backup: command an agent: %v", err)
	}
	for _, subject := range []string{"capn.backup.create", "capn.backup.restore", "capn.backup.etcd-snapshot", "capn.backup.etcd-list", "capn.backup.etcd-restore"} {
		sub, err := bk.nc.QueueSubscribe(subject, "backup", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	if err := bk.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The gateway asks it, and moves files through the object store.
	for _, verb := range []string{"create", "restore", "etcd-snapshot", "etcd-list", "etcd-restore"} {
		if m, err := gw.nc.Request("capn.backup."+verb, nil, 5*time.Second); err != nil || string(m.Data) != "ok" {
			t.Errorf("gateway: ask the backup service to %s: %v", verb, err)
		}
	}
	gw.objectStore("upload-1")

	// The maintenance service: watches desired, writes desired clusters
	// (auto-patch, hibernation schedules) and its own observed records.
	// The gateway writes the Kubernetes version catalogue it reads.
	gw.put(events.BucketDesired, "kubernetesversions.default")
	mt := w.as(t, natsconfig.Maintenance)
	mt.cache(events.BucketDesired)
	mt.put(events.BucketDesired, "cluster.demo")
	mt.get(events.BucketDesired, "kubernetesversions.default")
	mt.put(events.BucketObserved, "maintenance.demo")
	mt.get(events.BucketObserved, "maintenance.demo")

	// The external control-plane implementation: watches desired
	// clusters, opens the registered kubeconfigs, writes its records and
	// consumes its commands.
	ce := w.as(t, natsconfig.ControlPlaneExternal)
	ce.cacheKeep(events.BucketDesired, "cluster.")
	ce.get(events.BucketSecrets, "externalkubeconfig.prod")
	ce.put(events.BucketObserved, "controlplane.demo")
	ce.get(events.BucketObserved, "controlplane.demo")
	// Its durable (the planner, which sends the commands, is issue 21's
	// planner part): created as its service creates it.
	ced := durable(d, natsconfig.ControlPlaneExternal, natsconfig.ControlPlaneExternal)
	if _, err := ce.js.CreateOrUpdateConsumer(context.Background(), ced.Stream, jetstream.ConsumerConfig{
		Durable: ced.Name, FilterSubject: ced.Filters[0], AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Errorf("controlplane-external: its durable: %v", err)
	}

	// The hosted control planes: read desired clusters, consume their
	// commands, read and write the control-plane records. (Their PKI
	// request is tests/security's TestHostedPKIOnlyForTheHostedServiceAndHostedClusters.)
	hc := w.as(t, natsconfig.ControlPlaneHosted)
	hc.get(events.BucketDesired, "cluster.demo")
	hc.put(events.BucketObserved, "controlplane.demo")
	hc.get(events.BucketObserved, "controlplane.demo")
	// The service's own durable, the one the deployment declares, as
	// events.Consume creates it (the planner's grant to publish the
	// commands is the planner's part of issue 21).
	if hd, hs := durable(d, natsconfig.ControlPlaneHosted, natsconfig.ControlPlaneHosted), controlplanehosted.ConsumerSpec(); true {
		if hs.Stream != hd.Stream || hs.Durable != hd.Name || !slices.Equal(hs.Filters, hd.Filters) {
			t.Errorf("controlplane-hosted consumes %v, the deployment declares %v", hs, hd)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := hc.js.CreateOrUpdateConsumer(ctx, hs.Stream, hs.Config()); err != nil {
			t.Errorf("controlplane-hosted: create its durable: %v (violations %v)", err, hc.v.All())
		}
		cancel()
	}

	for _, a := range []*actor{gw, cp, mm, bs, sim, dk, hw, rm, ap, am, bk, mt, ce, hc} {
		a.clean()
	}
	for _, v := range w.c.ServerViolations() {
		t.Errorf("server logged: %s", v)
	}
}

// TestOutsideTheJobIsRefused tries, as each user, what it must not do.
func TestOutsideTheJobIsRefused(t *testing.T) {
	w := newWorld(t)
	// Something to steal: a sim and a docker command, secrets.
	mm := w.as(t, natsconfig.MachineManager)
	mm.publish(events.ProviderSubject("sim", "machine", "create", "demo", "m1"))
	mm.publish(events.ProviderSubject("docker", "machine", "create", "demo", "m2"))
	bs := w.as(t, natsconfig.Bootstrapper)
	bs.put(events.BucketSecrets, "pki.demo")
	bs.put(events.BucketSecrets, "bootstrap.demo.m1")
	// The durables exist, as in a running deployment.
	for user, ds := range w.c.D.Durables() {
		a := w.as(t, user)
		for _, c := range ds {
			if _, err := events.EnsureConsumer(context.Background(), a.js, events.ConsumerSpec{Stream: c.Stream, Durable: c.Name, Filters: c.Filters}); err != nil {
				t.Fatalf("%s: create %s: %v", user, c.Name, err)
			}
		}
	}

	t.Run("provider reads no secrets", func(t *testing.T) {
		t.Parallel()
		sim := w.as(t, natsconfig.ProviderUser("sim"))
		sim.refused("$JS.API.STREAM.INFO.KV_secrets", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), refusedTimeout)
			defer cancel()
			_, err := sim.js.KeyValue(ctx, events.BucketSecrets)
			return err
		})
		sim.refused("$JS.API.DIRECT.GET.KV_secrets.$KV.secrets.pki.demo", sim.kvGet(events.BucketSecrets, "pki.demo"))
		sim.refused("$JS.API.DIRECT.GET.KV_secrets.$KV.secrets.bootstrap.demo.m1", sim.kvGet(events.BucketSecrets, "bootstrap.demo.m1"))
		sim.refusedPublish("$JS.API.CONSUMER.CREATE.KV_secrets.x.$KV.secrets.>")
		sim.refusedPublish("$JS.API.STREAM.MSG.GET.KV_secrets")
		sim.refusedSubscribe("$KV.secrets.>")
	})
	t.Run("provider consumes only its own commands", func(t *testing.T) {
		t.Parallel()
		sim := w.as(t, natsconfig.ProviderUser("sim"))
		// Another provider's durable: neither bind, pull nor re-create it.
		sim.refusedPublish("$JS.API.CONSUMER.MSG.NEXT.CAPN_PROVIDERS.provider-docker")
		sim.refusedPublish("$JS.API.CONSUMER.CREATE.CAPN_PROVIDERS.provider-docker.capn.provider.docker.>")
		sim.refused("$JS.API.CONSUMER.CREATE.CAPN_PROVIDERS.provider-sim.capn.provider.docker.>", func() error {
			// Its own durable re-pointed at docker's commands.
			ctx, cancel := context.WithTimeout(context.Background(), refusedTimeout)
			defer cancel()
			_, err := sim.js.CreateOrUpdateConsumer(ctx, events.StreamProviders,
				jetstream.ConsumerConfig{Durable: "provider-sim", FilterSubject: "capn.provider.docker.>", AckPolicy: jetstream.AckExplicitPolicy})
			return err
		})
		sim.refusedPublish("$JS.API.CONSUMER.CREATE.CAPN_PROVIDERS.sneaky.capn.provider.>")
		sim.refusedPublish("$JS.API.CONSUMER.CREATE.CAPN_PROVIDERS.provider-sim")
		sim.refusedPublish("$JS.API.CONSUMER.DURABLE.CREATE.CAPN_PROVIDERS.provider-docker")
		sim.refusedSubscribe("capn.provider.docker.>")
		sim.refusedSubscribe("capn.>")
		sim.refusedPublish("$JS.ACK.CAPN_PROVIDERS.provider-docker.1.1.1.1.0")
		// Nor report drift of another provider's machines (finding 5 of
		// issue 17), on its subject or the one every provider shared.
		sim.refusedPublish(events.DriftSubject("docker", "demo", "m2"))
		sim.refusedPublish("capn.evt.infra.drift.demo.m2")
		// Nor send commands, to anyone.
		sim.refusedPublish("capn.provider.docker.machine.create.demo.m3")
		sim.refusedPublish("capn.provider.sim.machine.create.demo.m3")
	})
	t.Run("provider writes only its own keys", func(t *testing.T) {
		t.Parallel()
		sim := w.as(t, natsconfig.ProviderUser("sim"))
		sim.refusedPublish("$KV.observed.infra.docker.demo.m2")
		sim.refusedPublish("$KV.observed.provider.docker")
		sim.refusedPublish("$KV.observed.machine.demo.m1")
		sim.refusedPublish("$KV.observed.node.demo.m1")
		sim.refusedPublish("$KV.desired.cluster.demo")
		sim.refused("$JS.API.DIRECT.GET.KV_observed.$KV.observed.machine.demo.m1", sim.kvGet(events.BucketObserved, "machine.demo.m1"))
		sim.refused("$JS.API.DIRECT.GET.KV_observed.$KV.observed.infra.docker.demo.m2", sim.kvGet(events.BucketObserved, "infra.docker.demo.m2"))
		sim.refusedPublish("$JS.API.CONSUMER.CREATE.KV_observed.x.$KV.observed.>")
		sim.refusedPublish("$JS.API.STREAM.INFO.KV_desired")
	})
	t.Run("no one reads another's replies", func(t *testing.T) {
		t.Parallel()
		sim := w.as(t, natsconfig.ProviderUser("sim"))
		sim.refusedSubscribe("_INBOX.>")
		sim.refusedSubscribe("_INBOX_bootstrapper.>")
		sim.refusedSubscribe(">")
		sim.refusedSubscribe(bootstrapper.FetchSubjectRoot + ".>") // answering fetches is the bootstrapper's
		// Machines' credentials are for their providers, each its own.
		sim.refusedPublish(bootstrapper.CredentialSubjectRoot + ".docker.demo.m1")
		sim.refusedSubscribe(bootstrapper.CredentialSubjectRoot + ".>")
		// Logins are the bootstrapper's to answer, and no one's to ask.
		sim.refusedSubscribe(natsconfig.SubjectAuthCallout)
		sim.refusedPublish(natsconfig.SubjectAuthCallout)
	})
	t.Run("gateway consumes no provider commands and steals no durable", func(t *testing.T) {
		t.Parallel()
		gw := w.as(t, natsconfig.Gateway)
		gw.refusedPublish("$JS.API.CONSUMER.MSG.NEXT.CAPN_PROVIDERS.provider-sim")
		gw.refusedPublish("$JS.API.CONSUMER.CREATE.CAPN_PROVIDERS.provider-sim.capn.provider.sim.>")
		gw.refused("$JS.API.CONSUMER.CREATE.CAPN_PROVIDERS.*.capn.provider.sim.>", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), refusedTimeout)
			defer cancel()
			_, err := gw.js.OrderedConsumer(ctx, events.StreamProviders, jetstream.OrderedConsumerConfig{
				FilterSubjects: []string{"capn.provider.sim.>"}, MaxResetAttempts: 1})
			return err
		})
		gw.refusedSubscribe("capn.provider.>")
		// Its timelines read CAPN_EVENTS through ordered consumers only: the
		// durables of the services are out of reach.
		for _, name := range []string{"machine-manager-bootstrap", "remediator-unhealthy", "health-watcher-drift"} {
			gw.refusedPublish("$JS.API.CONSUMER.MSG.NEXT.CAPN_EVENTS." + name)
			gw.refusedPublish("$JS.API.CONSUMER.DELETE.CAPN_EVENTS." + name)
			gw.refusedPublish("$JS.API.CONSUMER.CREATE.CAPN_EVENTS." + name)
		}
		gw.refusedPublish("$JS.API.CONSUMER.CREATE.CAPN_EVENTS.machine-manager-bootstrap.capn.evt.bootstrap.ready.>")
	})
	t.Run("only the bootstrapper writes secrets; the gateway, the health-watcher and the addon-manager read kubeconfigs only", func(t *testing.T) {
		t.Parallel()
		for _, user := range []string{natsconfig.Gateway, natsconfig.HealthWatcher, natsconfig.AddonManager} {
			a := w.as(t, user)
			a.refused("$JS.API.DIRECT.GET.KV_secrets.$KV.secrets.pki.demo", a.kvGet(events.BucketSecrets, "pki.demo"))
			a.refused("$JS.API.DIRECT.GET.KV_secrets.$KV.secrets.bootstrap.demo.m1", a.kvGet(events.BucketSecrets, "bootstrap.demo.m1"))
			a.refusedPublish("$KV.secrets.kubeconfig.demo")
			a.refusedPublish("$KV.secrets.pki.demo")
			a.refusedPublish("$KV.secrets.bootstrap.demo.m1")
		}
		for _, user := range []string{natsconfig.ClusterPlanner, natsconfig.MachineManager,
			natsconfig.Remediator, natsconfig.Init, natsconfig.ProviderUser("docker"), natsconfig.AutoscalerProvider} {
			a := w.as(t, user)
			a.refused("$JS.API.DIRECT.GET.KV_secrets.$KV.secrets.pki.demo", a.kvGet(events.BucketSecrets, "pki.demo"))
			a.refusedPublish("$KV.secrets.pki.demo")
		}
	})
	t.Run("each writes only its own key space", func(t *testing.T) {
		t.Parallel()
		for user, subjects := range map[string][]string{
			natsconfig.Gateway:        {"$KV.observed.machine.demo.m1", "$KV.observed.cluster.demo", "$KV.observed.controlplane.demo", "capn.controlplane.hosted.ensure.demo", "capn.evt.cluster.ready.demo._", "capn.evt.machine.running.demo.m1", "capn.cmd.bootstrap.generate.demo.m1"},
			natsconfig.ClusterPlanner: {"$KV.observed.machine.demo.m1", "capn.provider.sim.machine.create.demo.m1", "capn.cmd.bootstrap.generate.demo.m1", "$KV.observed.addon.demo.cni", "$KV.desired.addonset.cni"},
			natsconfig.MachineManager: {"$KV.desired.machine.demo.m1", "$KV.observed.cluster.demo", "$KV.observed.controlplane.demo", "capn.controlplane.hosted.delete.demo", "capn.evt.machine.unhealthy.demo.m1", "capn.evt.machine.hook.demo.m1", "capn.provider.sim.cluster.delete.demo._", "capn.provider.sim.machine.reboot.demo.m1"},
			natsconfig.HealthWatcher:  {"$KV.observed.machine.demo.m1", "$KV.desired.machine.demo.m1", "capn.provider.sim.machine.reboot.demo.m1", "$KV.observed.addon.demo.cni", "capn.evt.addon.applied.demo.cni"},
			natsconfig.Remediator:     {"$KV.observed.machine.demo.m1", "$KV.desired.cluster.demo", "capn.evt.machine.unhealthy.demo.m1", "capn.provider.sim.machine.delete.demo.m1"},
			// The autoscaler-provider scales through the desired cluster
			// and marks; it cannot fake another service's facts or status,
			// command a provider or a worker, or ingest.
			natsconfig.AutoscalerProvider: {"$KV.observed.cluster.demo", "$KV.observed.machine.demo.m1", "$KV.observed.infra.process.demo.m1",
				"$KV.observed.remediation.demo.md-0", "capn.evt.cluster.ready.demo._", "capn.evt.machine.running.demo.m1",
				"capn.provider.process.machine.delete.demo.m1", "capn.cmd.bootstrap.generate.demo.m1", "capn.ingest.dev.capn.test",
				"capn.health.demo.m1.heartbeat"},
			natsconfig.Bootstrapper: {"$KV.desired.cluster.demo", "$KV.observed.machine.demo.m1", "capn.provider.sim.machine.create.demo.m1", "$KV.observed.controlplane.demo", "capn.controlplane.hosted.ensure.demo"},
			natsconfig.Init:         {"$KV.desired.cluster.demo", "capn.evt.cluster.ready.demo._", "$JS.API.CONSUMER.CREATE.CAPN_PROVIDERS.provider-sim.capn.provider.sim.>", "$JS.API.STREAM.DELETE.CAPN_EVENTS", "$JS.API.STREAM.PURGE.KV_desired"},
		} {
			a := w.as(t, user)
			for _, s := range subjects {
				a.refusedPublish(s)
			}
		}
	})
	t.Run("the backup service writes no provider's record and sends no command but adopt", func(t *testing.T) {
		t.Parallel()
		bk := w.as(t, natsconfig.Backup)
		for _, s := range []string{
			"$KV.observed.infra.sim.demo.m1", "$KV.observed.infra.sim.demo._", "$KV.observed.provider.sim",
			"capn.provider.sim.machine.create.demo.m1", "capn.provider.sim.machine.delete.demo.m1",
			"capn.provider.sim.machine.orphan.demo.m1", "capn.provider.sim.cluster.delete.demo._",
			"capn.provider.sim.cluster.orphan.demo._", "capn.provider.sim.machine.reboot.demo.m1",
			"capn.cmd.bootstrap.generate.demo.m1", "capn.evt.cluster.ready.demo._",
			"$JS.API.CONSUMER.MSG.NEXT.CAPN_PROVIDERS.provider-sim", "$JS.API.STREAM.PURGE.KV_secrets",
		} {
			bk.refusedPublish(s)
		}
		bk.refusedSubscribe("capn.provider.>")
	})
	t.Run("only the backup service answers backups and reads buckets whole; only it and the gateway hold backups", func(t *testing.T) {
		t.Parallel()
		for _, user := range []string{natsconfig.Gateway, natsconfig.HealthWatcher, natsconfig.ProviderUser("sim")} {
			a := w.as(t, user)
			// Answering a restore would be reading every uploaded file.
			a.refusedSubscribe("capn.backup.restore")
			a.refusedSubscribe("capn.backup.>")
			// A batch read of a whole bucket names no key: every secret.
			a.refusedPublish("$JS.API.DIRECT.GET.KV_secrets")
		}
		for _, user := range []string{natsconfig.HealthWatcher, natsconfig.ProviderUser("sim"), natsconfig.ClusterPlanner} {
			a := w.as(t, user)
			a.refusedPublish("$JS.API.STREAM.INFO.OBJ_backups")
			a.refusedPublish("$JS.API.DIRECT.GET.OBJ_backups.$O.backups.M.x")
			a.refusedPublish("$O.backups.C.x")
			a.refusedSubscribe("$O.backups.>")
			a.refusedPublish("capn.backup.restore")
		}
		// etcd snapshots (every Secret of a workload cluster, sealed): only
		// the backup service holds them and commands the agents.
		for _, user := range []string{natsconfig.Gateway, natsconfig.HealthWatcher, natsconfig.ProviderUser("sim")} {
			a := w.as(t, user)
			a.refusedPublish("$JS.API.STREAM.INFO.OBJ_etcd-snapshots")
			a.refusedPublish("$O.etcd-snapshots.C.x")
			a.refusedSubscribe("$O.etcd-snapshots.>")
			a.refusedPublish("capn.etcd.demo.m1.restore-start")
			a.refusedSubscribe("capn.etcd.>")
		}
	})
	t.Run("the addon-manager: its records and events only; secrets it does not need are out of reach", func(t *testing.T) {
		t.Parallel()
		am := w.as(t, natsconfig.AddonManager)
		// It holds the secrets key: it must not watch or read the PKI and
		// bootstrap data it could open (the subtest above reads them by
		// key), nor write any secret, add-on secrets included.
		am.refusedPublish("$JS.API.CONSUMER.CREATE.KV_secrets.x.$KV.secrets.>")
		am.refusedPublish("$JS.API.CONSUMER.CREATE.KV_secrets.x.$KV.secrets.pki.>")
		am.refusedPublish("$JS.API.CONSUMER.CREATE.KV_secrets.x")
		am.refusedPublish("$JS.API.DIRECT.GET.KV_secrets.$KV.secrets.>")
		am.refusedPublish("$KV.secrets.addonsecret.creds")
		// Nor change what users declare, nor others' records, nor act as
		// another service.
		for _, s := range []string{"$KV.desired.addonset.cni", "$KV.desired.cluster.demo", "$KV.observed.cluster.demo", "$KV.observed.node.demo.m1",
			"capn.evt.cluster.ready.demo._", "capn.evt.machine.unhealthy.demo.m1", "capn.cmd.bootstrap.generate.demo.m1",
			"capn.provider.sim.machine.create.demo.m1", "capn.health.demo.m1.heartbeat"} {
			am.refusedPublish(s)
		}
		am.refusedSubscribe("capn.>")
		// The gateway writes add-on secrets, and no other secret.
		gw := w.as(t, natsconfig.Gateway)
		gw.refusedPublish("$KV.secrets.pki.demo")
		gw.refusedPublish("$KV.secrets.bootstrap.demo.m1")
		gw.refusedPublish("$KV.observed.addon.demo.cni")
		gw.refusedPublish("$JS.API.CONSUMER.CREATE.KV_secrets.x.$KV.secrets.>")
	})
	t.Run("only the bootstrapper reads bootstrap secrets; no service but the gateway writes them", func(t *testing.T) {
		t.Parallel()
		// The health-watcher and the addon-manager hold the secrets key:
		// a bootstrap secret (a node's credential) must stay out of their
		// reach, as must every other user's.
		for _, user := range []string{natsconfig.AddonManager, natsconfig.HealthWatcher, natsconfig.MachineManager,
			natsconfig.ClusterPlanner, natsconfig.Remediator, natsconfig.AutoscalerProvider, natsconfig.ProviderUser("docker")} {
			a := w.as(t, user)
			a.refused("$JS.API.DIRECT.GET.KV_secrets.$KV.secrets.bootstrapsecret.tls", a.kvGet(events.BucketSecrets, "bootstrapsecret.tls"))
			a.refusedPublish("$KV.secrets.bootstrapsecret.tls")
			a.refusedPublish("$JS.API.CONSUMER.CREATE.KV_secrets.x.$KV.secrets.bootstrapsecret.>")
		}
	})
	t.Run("the fleet-manager: moves clusters and records rollouts, nothing else", func(t *testing.T) {
		t.Parallel()
		fm := w.as(t, natsconfig.FleetManager)
		// It must not change what users declare besides a wave's change
		// to a cluster (no class, revision, rollout, machine or add-on
		// set), nor others' records or facts, nor any secret.
		for _, s := range []string{"$KV.desired.clusterclass.standard", "$KV.desired.classrev.standard.1", "$KV.desired.rollout.r1",
			"$KV.desired.machine.demo.m1", "$KV.desired.addonset.cni", "$KV.observed.cluster.demo", "$KV.observed.remediation.demo.md-0",
			"$KV.secrets.pki.demo", "capn.evt.cluster.ready.demo._", "capn.evt.machine.unhealthy.demo.m1",
			"capn.provider.sim.machine.create.demo.m1", "capn.cmd.bootstrap.generate.demo.m1"} {
			fm.refusedPublish(s)
		}
		fm.refused("$JS.API.DIRECT.GET.KV_secrets.$KV.secrets.kubeconfig.demo", fm.kvGet(events.BucketSecrets, "kubeconfig.demo"))
		// Nobody else writes a rollout's status or its events.
		for _, user := range []string{natsconfig.Gateway, natsconfig.ClusterPlanner, natsconfig.AddonManager} {
			a := w.as(t, user)
			a.refusedPublish("$KV.observed.rollout.r1")
			a.refusedPublish("capn.evt.rollout.halted.r1._")
		}
	})
	t.Run("the maintenance service: desired clusters and its own records only", func(t *testing.T) {
		t.Parallel()
		mt := w.as(t, natsconfig.Maintenance)
		// Not the machines a cluster plans, not the catalogue users
		// declare, not another's status, no secret, no command or event.
		for _, s := range []string{"$KV.desired.machine.demo.m1", "$KV.desired.kubernetesversions.default", "$KV.desired.addonset.cni",
			"$KV.observed.cluster.demo", "$KV.observed.machine.demo.m1", "$KV.observed.remediation.demo.md-0", "$KV.secrets.pki.demo",
			"capn.evt.cluster.ready.demo._", "capn.cmd.bootstrap.generate.demo.m1", "capn.provider.sim.machine.create.demo.m1",
			"capn.provider.sim.machine.power.demo.m1", "capn.health.demo.m1.heartbeat"} {
			mt.refusedPublish(s)
		}
		mt.refused("$JS.API.DIRECT.GET.KV_observed.$KV.observed.cluster.demo", mt.kvGet(events.BucketObserved, "cluster.demo"))
		mt.refused("$JS.API.DIRECT.GET.KV_secrets.$KV.secrets.kubeconfig.demo", mt.kvGet(events.BucketSecrets, "kubeconfig.demo"))
		mt.refusedPublish("$JS.API.CONSUMER.CREATE.KV_observed.x")
		mt.refusedPublish("$JS.API.CONSUMER.CREATE.KV_secrets.x.$KV.secrets.>")
		mt.refusedSubscribe("capn.>")
		// Nor may others write its records.
		for _, user := range []string{natsconfig.Gateway, natsconfig.ClusterPlanner, natsconfig.Remediator} {
			w.as(t, user).refusedPublish("$KV.observed.maintenance.demo")
		}
	})
	t.Run("controlplane-external: its records and the registered kubeconfigs only", func(t *testing.T) {
		t.Parallel()
		ce := w.as(t, natsconfig.ControlPlaneExternal)
		// It writes no spec, no other record, no secret (the registered
		// kubeconfigs are the gateway's to write), and sends nothing.
		for _, s := range []string{"$KV.desired.cluster.demo", "$KV.desired.machine.demo.m1", "$KV.observed.cluster.demo",
			"$KV.observed.machine.demo.m1", "$KV.secrets.externalkubeconfig.prod", "$KV.secrets.kubeconfig.demo",
			"capn.evt.cluster.ready.demo._", "capn.controlplane.hosted.ensure.demo", "capn.cmd.bootstrap.generate.demo.m1"} {
			ce.refusedPublish(s)
		}
		// Of secrets, only the registered kubeconfigs.
		for _, k := range []string{"kubeconfig.demo", "pki.demo", "bootstrap.demo.m1", "addonsecret.creds"} {
			ce.refused("$JS.API.DIRECT.GET.KV_secrets.$KV.secrets."+k, ce.kvGet(events.BucketSecrets, k))
		}
		ce.refusedPublish("$JS.API.CONSUMER.CREATE.KV_secrets.x.$KV.secrets.>")
		// Only it, the gateway and the services that talk to workload
		// clusters (the bootstrapper, the health-watcher, the
		// addon-manager: secrets/clusterkubeconfig) read a registered
		// kubeconfig; only the control-plane implementations write the records.
		for _, user := range []string{natsconfig.ClusterPlanner, natsconfig.MachineManager, natsconfig.Remediator, natsconfig.Maintenance,
			natsconfig.FleetManager, natsconfig.AutoscalerProvider, natsconfig.ProviderUser("docker")} {
			a := w.as(t, user)
			a.refused("$JS.API.DIRECT.GET.KV_secrets.$KV.secrets.externalkubeconfig.prod", a.kvGet(events.BucketSecrets, "externalkubeconfig.prod"))
		}
		// (The planner writes the machines implementation's records.)
		for _, user := range []string{natsconfig.HealthWatcher, natsconfig.AddonManager, natsconfig.Maintenance} {
			a := w.as(t, user)
			a.refusedPublish("$KV.observed.controlplane.demo")
		}
		// Readers of it never write it.
		for _, user := range []string{natsconfig.HealthWatcher, natsconfig.AddonManager} {
			w.as(t, user).refusedPublish("$KV.secrets.externalkubeconfig.prod")
		}
	})
	t.Run("the hosted control planes: their records and commands only", func(t *testing.T) {
		t.Parallel()
		hc := w.as(t, natsconfig.ControlPlaneHosted)
		// Not a cluster's spec, not another's status, no secret, no command
		// or event but its own.
		for _, s := range []string{"$KV.desired.cluster.demo", "$KV.desired.machine.demo.m1", "$KV.observed.cluster.demo",
			"$KV.observed.machine.demo.m1", "$KV.secrets.pki.demo", "capn.evt.cluster.ready.demo._",
			"capn.cmd.bootstrap.generate.demo.m1", "capn.provider.sim.machine.create.demo.m1",
			"capn.controlplane.external.ensure.demo", "capn.bootstrap.fetch.demo.m1"} {
			hc.refusedPublish(s)
		}
		hc.refused("$JS.API.DIRECT.GET.KV_secrets.$KV.secrets.pki.demo", hc.kvGet(events.BucketSecrets, "pki.demo"))
		hc.refused("$JS.API.DIRECT.GET.KV_observed.$KV.observed.cluster.demo", hc.kvGet(events.BucketObserved, "cluster.demo"))
		hc.refusedSubscribe("capn.>")
	})
	t.Run("no one but the init job manages streams", func(t *testing.T) {
		t.Parallel()
		for _, user := range []string{natsconfig.Gateway, natsconfig.Bootstrapper, natsconfig.ProviderUser("sim")} {
			a := w.as(t, user)
			a.refused("$JS.API.STREAM.CREATE.CAPN_EVIL", func() error {
				ctx, cancel := context.WithTimeout(context.Background(), refusedTimeout)
				defer cancel()
				_, err := a.js.CreateStream(ctx, jetstream.StreamConfig{Name: "CAPN_EVIL", Subjects: []string{"evil.>"}})
				return err
			})
			a.refusedPublish("$JS.API.STREAM.DELETE.KV_secrets")
			a.refusedPublish("$JS.API.STREAM.UPDATE.CAPN_EVENTS")
		}
	})
}

// TestPermissionsAreMinimal keeps the lists readable: no user has a
// subject another of its subjects already covers, and every user may
// subscribe to its own inbox and nothing of another's.
func TestPermissionsAreMinimal(t *testing.T) {
	for _, u := range natsconfig.Compose().Users() {
		for _, list := range [][]string{u.Perms.PublishAllow, u.Perms.PublishDeny, u.Perms.SubscribeAllow} {
			if !slices.IsSorted(list) {
				t.Errorf("%s: list not sorted: %v", u.Name, list)
			}
		}
		if !slices.Contains(u.Perms.SubscribeAllow, u.Inbox+".>") {
			t.Errorf("%s cannot subscribe to its inbox %s", u.Name, u.Inbox)
		}
		for _, s := range u.Perms.SubscribeAllow {
			if strings.HasPrefix(s, "_INBOX") && s != u.Inbox+".>" {
				t.Errorf("%s may subscribe to %s", u.Name, s)
			}
		}
		if slices.Contains(u.Perms.PublishAllow, ">") || slices.Contains(u.Perms.SubscribeAllow, ">") {
			t.Errorf("%s may use every subject", u.Name)
		}
	}
}
