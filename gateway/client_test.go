package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// TestClient drives every endpoint through the Go client the CLI uses.
func TestClient(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(e.url, client.WithToken(tokAdmin))
	if err != nil {
		t.Fatal(err)
	}

	// Watch from the start, in the background.
	watched := make(chan client.WatchEvent, 64)
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() {
		wdone <- c.Watch(wctx, client.WatchOptions{Kind: api.KindCluster}, func(ev client.WatchEvent) error {
			watched <- ev
			return nil
		})
	}()
	nextWatched := func(typ string) client.WatchEvent {
		t.Helper()
		select {
		case ev := <-watched:
			if ev.Type != typ {
				t.Fatalf("watch: %s, want %s", ev.Type, typ)
			}
			return ev
		case <-time.After(10 * time.Second):
			t.Fatalf("watch: no %s", typ)
		}
		return client.WatchEvent{}
	}
	nextWatched(api.WatchSynced)

	cl, created, err := c.Apply(ctx, []byte(demoYAML))
	if err != nil || !created || cl.GetMetadata().GetResourceVersion() == "" {
		t.Fatalf("Apply: %v %v %v", cl, created, err)
	}
	if ev := nextWatched(api.WatchAdded); ev.Cluster.GetMetadata().GetName() != "demo" || ev.ID == "" {
		t.Errorf("watched %+v", ev)
	}
	if _, created, err := c.ApplyCluster(ctx, cl); err != nil || created {
		t.Errorf("ApplyCluster of what was returned: created %v, %v", created, err)
	}
	_, _, err = c.Apply(ctx, []byte(strings.Replace(demoYAML, "replicas: 1}", "replicas: 2}", 1)))
	var ce *client.Error
	if !errors.As(err, &ce) || !client.IsInvalid(err) || ce.StatusCode != http.StatusUnprocessableEntity ||
		len(ce.Problem.Errors) != 1 || ce.Problem.Errors[0].Path != "spec.controlPlane.replicas" {
		t.Fatalf("invalid apply: %#v", err)
	}

	got, err := c.Get(ctx, "demo")
	if err != nil || got.GetSpec().GetKubernetesVersion() != "v1.34.2" {
		t.Fatalf("Get: %v %v", got, err)
	}
	if _, err := c.Get(ctx, "nope"); !client.IsNotFound(err) {
		t.Errorf("Get nope: %v", err)
	}
	if l, err := c.List(ctx, client.ListOptions{LabelSelector: "env=dev"}); err != nil || len(l) != 1 {
		t.Errorf("List: %v %v", l, err)
	}
	if l, err := c.List(ctx, client.ListOptions{LabelSelector: "env=prod"}); err != nil || len(l) != 0 {
		t.Errorf("List prod: %v %v", l, err)
	}

	if s, err := c.Scale(ctx, "demo", "md-0", 3); err != nil || s.GetSpec().GetWorkerPools()[0].GetReplicas() != 3 {
		t.Errorf("Scale: %v", err)
	}
	if _, err := c.Scale(ctx, "demo", api.ControlPlanePool, 2); statusOf(err) != http.StatusUnprocessableEntity {
		t.Errorf("Scale control plane to 2: %v", err)
	}
	if _, err := c.Upgrade(ctx, "demo", "v1.36.0"); !client.IsInvalid(err) || !strings.Contains(err.Error(), "spec.kubernetesVersion") {
		t.Errorf("Upgrade skipping a minor: %v", err)
	}
	if u, err := c.Upgrade(ctx, "demo", "v1.35.0"); err != nil || u.GetSpec().GetKubernetesVersion() != "v1.35.0" {
		t.Errorf("Upgrade: %v", err)
	}
	if p, err := c.Pause(ctx, "demo"); err != nil || !p.GetSpec().GetPaused() {
		t.Errorf("Pause: %v", err)
	}
	if p, err := c.Resume(ctx, "demo"); err != nil || p.GetSpec().GetPaused() {
		t.Errorf("Resume: %v", err)
	}

	e.put(e.desired, "machine.demo.demo-md-0", &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: "demo-md-0"}, Spec: &capnv1.MachineSpec{Pool: "md-0"}})
	e.put(e.observed, "machine.demo.demo-md-0", &capnv1.MachineStatus{Phase: "Running"})
	if ms, err := c.Machines(ctx, "demo", client.ListOptions{}); err != nil || len(ms) != 1 || ms[0].GetStatus().GetPhase() != "Running" {
		t.Errorf("Machines: %v %v", ms, err)
	}
	if m, err := c.Machine(ctx, "demo", "demo-md-0"); err != nil || m.GetSpec().GetPool() != "md-0" {
		t.Errorf("Machine: %v %v", m, err)
	}

	if _, err := c.Kubeconfig(ctx, "demo"); !client.IsNotFound(err) {
		t.Errorf("Kubeconfig before it exists: %v", err)
	}
	sealed := store.NewBucket(e.secrets, store.New[capnv1.AdminKubeconfig](), store.WithSealer(e.ring))
	if _, err := sealed.Create(ctx, "kubeconfig.demo", &capnv1.AdminKubeconfig{Kubeconfig: []byte("kind: Config\n")}); err != nil {
		t.Fatal(err)
	}
	if kc, err := c.Kubeconfig(ctx, "demo"); err != nil || string(kc) != "kind: Config\n" {
		t.Errorf("Kubeconfig: %q %v", kc, err)
	}
	reader, _ := client.New(e.url, client.WithToken(tokRead))
	if _, err := reader.Kubeconfig(ctx, "demo"); statusOf(err) != http.StatusForbidden {
		t.Errorf("Kubeconfig as a reader: %v", err)
	}

	// Timeline: list, then follow.
	pub := events.NewPublisher(e.js, "capn/machine-manager")
	e.publishFact(pub, "demo", "demo-md-0", "provisioned", "r1")
	if evs, err := c.Events(ctx, "demo", client.EventsOptions{}); err != nil || len(evs) != 1 || evs[0].Reason != "r1" {
		t.Errorf("Events: %v %v", evs, err)
	}
	followed := make(chan api.TimelineEvent, 8)
	synced := make(chan struct{})
	fctx, fcancel := context.WithCancel(ctx)
	fdone := make(chan error, 1)
	go func() {
		fdone <- c.FollowEvents(fctx, "demo", client.EventsOptions{}, func(ev api.TimelineEvent) error {
			followed <- ev
			return nil
		}, func() error { close(synced); return nil })
	}()
	<-synced
	e.publishFact(pub, "demo", "demo-md-0", "running", "r2")
	for _, want := range []string{"r1", "r2"} {
		select {
		case ev := <-followed:
			if ev.Reason != want {
				t.Errorf("followed %s, want %s", ev.Reason, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("FollowEvents: no %s", want)
		}
	}
	fcancel()
	if err := <-fdone; !errors.Is(err, context.Canceled) {
		t.Errorf("FollowEvents returned %v", err)
	}

	// Ingest through the client (batch mode).
	hb := newEvent(t, events.TypeNodeHeartbeat, "npd", "c-1", map[string]any{"cluster": "demo", "machine": "demo-md-0", "ready": true})
	if res, err := c.Ingest(ctx, hb); err != nil || res.Accepted != 1 || res.Events[0].RoutedTo != "capn.health.demo.demo-md-0.heartbeat" {
		t.Errorf("Ingest: %+v %v", res, err)
	}
	badEv := newEvent(t, "x", "y", "", nil)
	if _, err := c.Ingest(ctx, badEv); !client.IsInvalid(err) {
		t.Errorf("Ingest invalid: %v", err)
	}

	d, err := c.Delete(ctx, "demo")
	if err != nil || d.GetMetadata().GetDeletionTimestamp() == nil {
		t.Fatalf("Delete: %v %v", d, err)
	}
	if _, err := c.Scale(ctx, "demo", "md-0", 1); !client.IsConflict(err) {
		t.Errorf("Scale while deleting: %v", err)
	}

	// The watch saw every change of the cluster; stop it.
	for drained := false; !drained; {
		select {
		case <-watched:
		case <-time.After(300 * time.Millisecond):
			drained = true
		}
	}
	wcancel()
	if err := <-wdone; !errors.Is(err, context.Canceled) {
		t.Errorf("Watch returned %v", err)
	}

	// A callback's error ends the watch with it.
	stop := errors.New("enough")
	if err := c.Watch(ctx, client.WatchOptions{}, func(client.WatchEvent) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("Watch with a failing callback: %v", err)
	}
	// A refused watch ends with the problem.
	nobody, _ := client.New(e.url, client.WithToken("wrong"))
	if err := nobody.Watch(ctx, client.WatchOptions{}, func(client.WatchEvent) error { return nil }); statusOf(err) != http.StatusUnauthorized {
		t.Errorf("Watch with a bad token: %v", err)
	}
	if _, err := client.New("127.0.0.1:8080"); err == nil {
		t.Error("an address without a scheme was accepted")
	}
}

// statusOf is client.StatusCode, short.
func statusOf(err error) int { return client.StatusCode(err) }
