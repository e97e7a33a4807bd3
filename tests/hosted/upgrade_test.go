package hosted

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// An upgrade restarts the API servers one at a time on the new version's
// binaries: with three, a client reading through the endpoint every
// 100 ms keeps being answered; the record's version is the lowest until
// the last one moved. Needs two versions built (make kube
// KUBE_VERSIONS="v1.36.5 v1.37.2").
func TestHostedUpgradeOneAPIServerAtATime(t *testing.T) {
	testkit.RequireLinux(t)
	bins := kubeBins(t)
	if len(bins) < 2 {
		t.Skipf("one Kubernetes version built (%s): an upgrade needs two", bins[0].version)
	}
	from, to := bins[len(bins)-2], bins[len(bins)-1]
	w := newWorldWith(t, from.version, from, to)
	gen := w.apply("up", 3)
	w.command(keys.ControlPlaneEnsure, "up", gen)
	rec := w.waitReady("up", 5*time.Minute)
	if rec.GetVersion() != from.version {
		t.Fatalf("version %s, want %s", rec.GetVersion(), from.version)
	}
	endpoint := fmt.Sprintf("https://127.0.0.1:%d", rec.GetEndpoint().GetPort())
	admin := w.adminClient("up")

	// A reader through the endpoint for the whole upgrade.
	var reqs, errs atomic.Int64
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			reqs.Add(1)
			if code, _, err := do(admin, http.MethodGet, endpoint+"/api/v1/namespaces/default", ""); err != nil || code != http.StatusOK {
				errs.Add(1)
			}
		}
	}()

	_, js := w.ns.Connect(t)
	des, err := js.KeyValue(context.Background(), events.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	_, rev, err := store.NewBucket(des, store.New[capnv1.Cluster]()).Mutate(context.Background(), keys.Cluster("up"),
		func(c *capnv1.Cluster, _ bool) (*capnv1.Cluster, error) {
			c.Spec.KubernetesVersion = to.version
			return c, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	w.command(keys.ControlPlaneEnsure, "up", int64(rev))
	testkit.WaitFor(t, 5*time.Minute, "every API server on "+to.version, func() bool {
		r := w.record("up")
		return r.GetVersion() == to.version && r.GetObservedGeneration() == int64(rev) && r.GetReadyReplicas() == 3
	})
	took := time.Since(began)
	close(stop)
	<-readerDone
	dir := filepath.Join(w.dataDir, "up")
	for _, p := range named(children(t, dir), "kube-apiserver") {
		if !strings.HasPrefix(p.Cmdline, filepath.Join(to.dir, "kube-apiserver")) {
			t.Errorf("kube-apiserver %d runs %s, want %s's", p.PID, strings.Fields(p.Cmdline)[0], to.dir)
		}
	}
	t.Logf("FIGURES: upgrade %s → %s of 3 API servers in %s; reader through the endpoint: %d requests, %d errors",
		from.version, to.version, took.Round(100*time.Millisecond), reqs.Load(), errs.Load())
	if errs.Load() > reqs.Load()/20 {
		t.Errorf("%d of %d reads failed during the upgrade", errs.Load(), reqs.Load())
	}
}
