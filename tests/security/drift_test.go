// Package security performs the attacks of issue 17 against real
// processes (the real nats-server, started from the rendered deployment
// or embedded; capn's real services and gateway) and checks that each is
// refused. One file per finding.
package security

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/deploy/natsconfig/natsconfigtest"
	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/health-watcher"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// simCluster is a cluster of one control-plane machine and one worker on
// the sim provider.
const simCluster = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: v1.34.2
  controlPlane:
    provider: sim
    replicas: 1
  workerPools:
  - name: md-0
    provider: sim
    replicas: 1
`

// TestProviderCannotReportAnotherProvidersDrift is finding 5 on the
// rendered deployment's nats-server: provider-sim may publish drift reports
// under its own name only, so it cannot report a docker machine gone.
func TestProviderCannotReportAnotherProvidersDrift(t *testing.T) {
	d := natsconfig.Compose()
	d.Servers, d.Replicas = d.Servers[:1], 1
	c := natsconfigtest.Start(t, d)
	c.Provision()
	nc, js, v := c.Connect(natsconfig.ProviderUser("sim"), 0)

	// Its own reports are stored.
	pub := events.NewPublisher(js, "capn/provider-sim")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pub.Publish(ctx, events.DriftSubject("sim", "demo", "m1"), events.TypeDriftReport, "own",
		&capnv1.DriftReport{Provider: "sim", Cluster: "demo", Machine: "m1", Kind: healthwatcher.DriftStopped}); err != nil {
		t.Fatalf("provider-sim: its own drift report: %v (violations %v)", err, v.All())
	}
	// Another provider's subject, and the subject every provider could
	// publish before (capn.evt.infra.drift.<cluster>.<machine>).
	for _, subject := range []string{
		events.DriftSubject("docker", "demo", "m2"),
		"capn.evt.infra.drift.demo.m2",
	} {
		if err := nc.Publish(subject, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if !v.Wait(subject, 3*time.Second) {
			t.Errorf("provider-sim published %s: no permissions violation from the server (violations %v)", subject, v.All())
		}
	}
}

// TestProviderCannotDeleteAnotherComponentsConsumer is the rest of finding
// 5 on the rendered deployment's nats-server: provider-sim cannot delete
// the consumer of the health-watcher's watch of observed KV, even knowing
// its name (here read from the server's monitoring).
func TestProviderCannotDeleteAnotherComponentsConsumer(t *testing.T) {
	d := natsconfig.Compose()
	d.Servers, d.Replicas = d.Servers[:1], 1
	c := natsconfigtest.Start(t, d)
	c.Provision()
	_, hjs, _ := c.Connect(natsconfig.HealthWatcher, 0)
	kv, err := hjs.KeyValue(context.Background(), events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	victim := ""
	natstest.WaitFor(t, 10*time.Second, "the health-watcher's consumer on KV_observed", func() bool {
		victim = observedConsumer(t, c)
		return victim != ""
	})

	nc, _, v := c.Connect(natsconfig.ProviderUser("sim"), 0)
	subject := "$JS.API.CONSUMER.DELETE.KV_" + events.BucketObserved + "." + victim
	if _, err := nc.Request(subject, nil, time.Second); err == nil {
		t.Errorf("provider-sim deleted %s's consumer %s", natsconfig.HealthWatcher, victim)
	}
	if !v.Wait(subject, 3*time.Second) {
		t.Errorf("no permissions violation for %s (violations %v)", subject, v.All())
	}
	if observedConsumer(t, c) != victim {
		t.Fatalf("the health-watcher's consumer %s is gone", victim)
	}
}

// observedConsumer is the name of a consumer of KV_observed ("" if none).
func observedConsumer(t *testing.T, c *natsconfigtest.Cluster) string {
	t.Helper()
	info, err := c.Server(0).Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range info.AccountDetails {
		for _, st := range a.Streams {
			if st.Name == "KV_"+events.BucketObserved && len(st.Consumer) > 0 {
				return st.Consumer[0].Name
			}
		}
	}
	return ""
}

// TestForgedDriftDoesNotReplaceMachine is finding 5 against the
// health-watcher: a drift report that does get published (here by a test
// connection with every permission) but not by the machine's provider —
// another provider's subject, or a report naming another provider — is
// ignored: the machine stays healthy and is not replaced.
func TestForgedDriftDoesNotReplaceMachine(t *testing.T) {
	s := harness.New(t, harness.Options{})
	s.StartAll(harness.All...)
	name := s.Apply(strings.ReplaceAll(simCluster, "%s", "victim")).GetMetadata().GetName()
	s.WaitReady(name, 60*time.Second)
	ms, err := s.Machines.List(context.Background(), "machine."+name+".")
	if err != nil || len(ms) == 0 {
		t.Fatalf("machines of %s: %v %v", name, ms, err)
	}
	victim := ms[0]
	machine := victim.Value.GetMetadata().GetName()

	pub := events.NewPublisher(s.JS, "capn/attacker")
	now := time.Now()
	forged := []struct{ subject, provider string }{
		{"capn.evt.drift.docker." + name + "." + machine, "docker"}, // another provider's subject
		{"capn.evt.drift.docker." + name + "." + machine, "sim"},    // …claiming to be sim
		{"capn.evt.drift.sim." + name + "." + machine, "docker"},    // sim's subject, naming docker
		{"capn.evt.infra.drift." + name + "." + machine, "docker"},  // the subject before the fix
	}
	for i, f := range forged {
		d := &capnv1.DriftReport{Provider: f.provider, Cluster: name, Machine: machine, Kind: healthwatcher.DriftGone,
			Message: "forged", Time: timestamppb.New(now.Add(time.Duration(i) * time.Millisecond))}
		if _, err := pub.Publish(context.Background(), f.subject, events.TypeDriftReport, "forged-"+f.subject+"-"+f.provider, d); err != nil {
			t.Fatal(err)
		}
	}
	// Every forged report the watcher consumes has been handled and acked.
	natstest.WaitFor(t, 20*time.Second, "the health-watcher acked every drift report", func() bool {
		ci, err := s.JS.Consumer(context.Background(), events.StreamEvents, healthwatcher.Name+"-drift")
		if err != nil {
			return false
		}
		info, err := ci.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream > 0
	})
	nodes := store.NewBucket(s.Observed, func() *capnv1.NodeHealth { return new(capnv1.NodeHealth) })
	h, _, err := nodes.Get(context.Background(), keys.Node(name, machine))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	if h.GetDrift() != nil || !h.GetHealthy() && len(h.GetUnhealthyReasons()) > 0 {
		t.Fatalf("forged drift taken as the machine's: drift %v, healthy %v, reasons %v", h.GetDrift(), h.GetHealthy(), h.GetUnhealthyReasons())
	}
	// The machine is still there, the same incarnation, and healthy.
	cur, _, err := s.Machines.Get(context.Background(), victim.Key)
	if err != nil || cur.GetMetadata().GetUid() != victim.Value.GetMetadata().GetUid() || cur.GetMetadata().GetDeletionTimestamp() != nil {
		t.Fatalf("machine %s replaced or being deleted after forged drift: %v %v", machine, cur.GetMetadata(), err)
	}
}
