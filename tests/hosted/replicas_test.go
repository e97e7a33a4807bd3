package hosted

import (
	"fmt"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/schemas/keys"
)

// Three replicas: three etcd members and three API servers behind one
// endpoint; one API server killed leaves the endpoint answering, and the
// record counts it out and back in.
func TestHostedThreeReplicas(t *testing.T) {
	testkit.RequireLinux(t)
	if testing.Short() {
		t.Skip("three etcd members and API servers; skipped with -short")
	}
	w := newWorld(t)
	gen := w.apply("h3", 3)
	began := time.Now()
	w.command(keys.ControlPlaneEnsure, "h3", gen)
	rec := w.waitReady("h3", 5*time.Minute)
	took := time.Since(began)
	dir := filepath.Join(w.dataDir, "h3")
	procs := children(t, dir)
	if rec.GetReplicas() != 3 || len(named(procs, "etcd")) != 3 || len(named(procs, "kube-apiserver")) != 3 {
		t.Fatalf("record %v, processes %v", rec, procs)
	}
	t.Logf("FIGURES: 3 replicas: ensure to initialized %s; RSS %d MiB", took.Round(100*time.Millisecond), rssKiB(procs)/1024)

	endpoint := fmt.Sprintf("https://127.0.0.1:%d", rec.GetEndpoint().GetPort())
	admin := w.adminClient("h3")
	victim := named(procs, "kube-apiserver")[0].PID
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// SIGKILL is asynchronous: until the process is gone its listening
	// socket may still accept a connection the kernel then resets (EOF).
	testkit.WaitFor(t, 10*time.Second, "the killed API server gone", func() bool {
		return syscall.Kill(victim, 0) != nil
	})
	// The endpoint passes to the others at once.
	if code, body, err := do(admin, http.MethodGet, endpoint+"/api/v1/namespaces/default", ""); err != nil || code != http.StatusOK {
		t.Fatalf("the endpoint with one API server killed: %d %s %v", code, body, err)
	}
	testkit.WaitFor(t, 2*time.Minute, "the killed API server replaced and every replica ready again", func() bool {
		now := named(children(t, dir), "kube-apiserver")
		if len(now) != 3 {
			return false
		}
		for _, p := range now {
			if p.PID == victim {
				return false
			}
		}
		r := w.record("h3")
		return r.GetReadyReplicas() == 3
	})
	w.markDeleting("h3")
	w.command(keys.ControlPlaneDelete, "h3", gen)
	testkit.WaitFor(t, time.Minute, "the record deleted", func() bool { return w.record("h3") == nil })
	testkit.WaitFor(t, 30*time.Second, "every process gone", func() bool { return len(children(t, dir)) == 0 })
}
