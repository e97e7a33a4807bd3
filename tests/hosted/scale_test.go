package hosted

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/keys"
	controlplanehosted "github.com/capn-dev/capn/services/controlplane-hosted"
)

// setReplicas changes the desired cluster's control-plane replicas and
// returns its revision.
func (w *world) setReplicas(name string, replicas int32) int64 {
	w.t.Helper()
	_, js := w.ns.Connect(w.t)
	des, err := js.KeyValue(context.Background(), events.BucketDesired)
	if err != nil {
		w.t.Fatal(err)
	}
	_, rev, err := store.NewBucket(des, store.New[capnv1.Cluster]()).Mutate(context.Background(), keys.Cluster(name),
		func(c *capnv1.Cluster, _ bool) (*capnv1.Cluster, error) {
			c.Spec.ControlPlane.Replicas = replicas
			return c, nil
		})
	if err != nil {
		w.t.Fatal(err)
	}
	return int64(rev)
}

// waitScaled waits for the record to answer gen with replicas API servers
// all ready, Ready True and Scaling False, and returns every Scaling
// message it saw on the way.
func (w *world) waitScaled(cluster string, gen int64, replicas int32, timeout time.Duration) []string {
	w.t.Helper()
	var seen []string
	testkit.WaitFor(w.t, timeout, fmt.Sprintf("%s at %d replicas, all ready, generation %d", cluster, replicas, gen), func() bool {
		r := w.record(cluster)
		sc := conditions.Get(r.GetConditions(), controlplanehosted.ConditionScaling)
		if sc.GetStatusValue() == capnv1.ConditionTrue && !slices.Contains(seen, sc.GetMessage()) {
			seen = append(seen, sc.GetMessage())
		}
		ready := conditions.Get(r.GetConditions(), controlplanehosted.ConditionReady)
		return r.GetObservedGeneration() == gen && r.GetReplicas() == replicas && r.GetReadyReplicas() == replicas &&
			ready.GetStatusValue() == capnv1.ConditionTrue && sc.GetStatusValue() == capnv1.ConditionFalse
	})
	return seen
}

// etcdMembers lists the etcd members of the control plane in dir with the
// etcdctl beside the binaries, as the API servers' etcd client.
func etcdMembers(t *testing.T, w *world, dir string) []string {
	t.Helper()
	bins := kubeBins(t)
	ctl := filepath.Join(bins[len(bins)-1].dir, "etcdctl")
	var st struct {
		Members []struct {
			EtcdClient int `json:"etcdClient"`
		} `json:"members"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	pki := filepath.Join(dir, "pki")
	out, err := execOutput(ctl, fmt.Sprintf("--endpoints=https://127.0.0.1:%d", st.Members[0].EtcdClient),
		"--cacert="+filepath.Join(pki, "etcd", "ca.crt"), "--cert="+filepath.Join(pki, "apiserver-etcd-client.crt"),
		"--key="+filepath.Join(pki, "apiserver-etcd-client.key"), "-w", "json", "member", "list")
	if err != nil {
		t.Fatalf("etcdctl member list: %v: %s", err, out)
	}
	var list struct {
		Members []struct {
			Name      string `json:"name"`
			IsLearner bool   `json:"isLearner"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range list.Members {
		n := m.Name
		if m.IsLearner {
			n += " (learner)"
		}
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// reader reads a ConfigMap through the endpoint every 100 ms until stop.
type reader struct {
	reqs, errs atomic.Int64
	mu         sync.Mutex
	firstErrs  []string
	stop, done chan struct{}
	once       sync.Once
}

func startReader(admin *http.Client, url string) *reader {
	r := &reader{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-tk.C:
			}
			r.reqs.Add(1)
			if code, body, err := do(admin, http.MethodGet, url, ""); err != nil || code != http.StatusOK {
				r.errs.Add(1)
				r.mu.Lock()
				if len(r.firstErrs) < 5 {
					r.firstErrs = append(r.firstErrs, fmt.Sprintf("%s: %d %v %.120s", time.Now().UTC().Format("15:04:05.0"), code, err, body))
				}
				r.mu.Unlock()
			}
		}
	}()
	return r
}

// take returns the counts so far and resets them.
func (r *reader) take() (reqs, errs int64, first []string) {
	r.mu.Lock()
	first, r.firstErrs = r.firstErrs, nil
	r.mu.Unlock()
	return r.reqs.Swap(0), r.errs.Swap(0), first
}

func (r *reader) close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

// 1 → 3 → 1 on a live hosted control plane: etcd members added one at a
// time (learner, promoted), then the API servers; back down, the API
// servers first, then the etcd members; the ConfigMap written at 1 is
// read throughout by a client through the endpoint every 100 ms; delete
// leaves nothing.
func TestHostedScaleOneToThreeAndBack(t *testing.T) {
	testkit.RequireLinux(t)
	if testing.Short() {
		t.Skip("three etcd members and API servers; skipped with -short")
	}
	w := newWorld(t)
	gen := w.apply("hs", 1)
	w.command(keys.ControlPlaneEnsure, "hs", gen)
	rec := w.waitReady("hs", 3*time.Minute)
	dir := filepath.Join(w.dataDir, "hs")
	endpoint := fmt.Sprintf("https://127.0.0.1:%d", rec.GetEndpoint().GetPort())
	admin := w.adminClient("hs")
	if code, body, err := do(admin, http.MethodPost, endpoint+"/api/v1/namespaces/default/configmaps",
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kept"},"data":{"k":"v"}}`); err != nil || code != http.StatusCreated {
		t.Fatalf("create a ConfigMap: %d %s %v", code, body, err)
	}
	kept := endpoint + "/api/v1/namespaces/default/configmaps/kept"
	rd := startReader(admin, kept)
	defer rd.close()

	// 1 → 3.
	gen = w.setReplicas("hs", 3)
	began := time.Now()
	w.command(keys.ControlPlaneEnsure, "hs", gen)
	seen := w.waitScaled("hs", gen, 3, 6*time.Minute)
	tookUp := time.Since(began)
	upReqs, upErrs, upFirst := rd.take()
	t.Logf("Scaling messages seen going up: %q", seen)
	if len(seen) == 0 {
		t.Errorf("the record never said Scaling True going up")
	}
	if got := etcdMembers(t, w, dir); !slices.Equal(got, []string{"etcd-0", "etcd-1", "etcd-2"}) {
		t.Fatalf("etcd members after 1 → 3: %v", got)
	}
	procs := children(t, dir)
	apis := named(procs, "kube-apiserver")
	if len(named(procs, "etcd")) != 3 || len(apis) != 3 {
		t.Fatalf("processes after 1 → 3: %v", procs)
	}
	for _, p := range apis {
		if i := strings.Index(p.Cmdline, "--etcd-servers="); i < 0 || strings.Count(strings.Fields(p.Cmdline[i:])[0], "https://") != 3 {
			t.Fatalf("an API server not on the three etcd members: %s", p.Cmdline)
		}
	}
	if code, body, err := do(admin, http.MethodGet, kept, ""); err != nil || code != http.StatusOK || !strings.Contains(body, `"k":"v"`) {
		t.Fatalf("the ConfigMap after 1 → 3: %d %s %v", code, body, err)
	}

	// 3 → 1.
	gen = w.setReplicas("hs", 1)
	began = time.Now()
	w.command(keys.ControlPlaneEnsure, "hs", gen)
	seen = w.waitScaled("hs", gen, 1, 6*time.Minute)
	tookDown := time.Since(began)
	downReqs, downErrs, downFirst := rd.take()
	t.Logf("Scaling messages seen going down: %q", seen)
	if got := etcdMembers(t, w, dir); !slices.Equal(got, []string{"etcd-0"}) {
		t.Fatalf("etcd members after 3 → 1: %v", got)
	}
	testkit.WaitFor(t, 30*time.Second, "one etcd and one API server left", func() bool {
		procs := children(t, dir)
		return len(named(procs, "etcd")) == 1 && len(named(procs, "kube-apiserver")) == 1
	})
	for _, gone := range []string{"etcd-1", "etcd-2", "pki/etcd/server-1.crt", "pki/etcd/peer-2.key"} {
		if _, err := os.Stat(filepath.Join(dir, gone)); !os.IsNotExist(err) {
			t.Errorf("%s after 3 → 1: %v", gone, err)
		}
	}
	if code, body, err := do(admin, http.MethodGet, kept, ""); err != nil || code != http.StatusOK {
		t.Fatalf("the ConfigMap after 3 → 1: %d %s %v", code, body, err)
	}
	rd.close()

	t.Logf("FIGURES: scale 1 → 3 in %s (reader: %d requests, %d errors %q); 3 → 1 in %s (reader: %d requests, %d errors %q)",
		tookUp.Round(100*time.Millisecond), upReqs, upErrs, upFirst, tookDown.Round(100*time.Millisecond), downReqs, downErrs, downFirst)
	if upErrs > upReqs/20 || downErrs > downReqs/20 {
		t.Errorf("reads failed during the scale: %d of %d up, %d of %d down", upErrs, upReqs, downErrs, downReqs)
	}

	w.markDeleting("hs")
	w.command(keys.ControlPlaneDelete, "hs", gen)
	testkit.WaitFor(t, time.Minute, "the record deleted", func() bool { return w.record("hs") == nil })
	testkit.WaitFor(t, 30*time.Second, "every process gone", func() bool { return len(children(t, dir)) == 0 })
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("data dir %s after delete: %v", dir, err)
	}
}

// stateMembers reads the members' etcd phases from state.json.
func stateMembers(dir string) ([]string, bool) {
	var st struct {
		Members []struct {
			Etcd string `json:"etcd"`
		} `json:"members"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil || json.Unmarshal(b, &st) != nil {
		return nil, false
	}
	out := make([]string, len(st.Members))
	for i, m := range st.Members {
		out[i] = m.Etcd
	}
	return out, true
}

// The service stopped once the second etcd member is added (state.json
// says so) and started again: it adopts the two members and the API
// server, and the redelivered ensure finishes 1 → 3. Then 3 → 1 stopped
// once the third member is removed: the restart adopts two members (one
// API server) and finishes.
func TestHostedScaleResumesAfterRestart(t *testing.T) {
	testkit.RequireLinux(t)
	if testing.Short() {
		t.Skip("three etcd members and API servers; skipped with -short")
	}
	w := newWorld(t)
	gen := w.apply("hr", 1)
	w.command(keys.ControlPlaneEnsure, "hr", gen)
	rec := w.waitReady("hr", 3*time.Minute)
	dir := filepath.Join(w.dataDir, "hr")
	endpoint := fmt.Sprintf("https://127.0.0.1:%d", rec.GetEndpoint().GetPort())
	admin := w.adminClient("hr")
	if code, body, err := do(admin, http.MethodPost, endpoint+"/api/v1/namespaces/default/configmaps",
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kept"},"data":{"k":"v"}}`); err != nil || code != http.StatusCreated {
		t.Fatalf("create a ConfigMap: %d %s %v", code, body, err)
	}
	gen = w.setReplicas("hr", 3)
	began := time.Now()
	w.command(keys.ControlPlaneEnsure, "hr", gen)
	testkit.WaitFor(t, 3*time.Minute, "the second etcd member added (state.json)", func() bool {
		m, ok := stateMembers(dir)
		return ok && len(m) >= 2 && m[1] == ""
	})
	w.stopSvc()
	if left := children(t, dir); len(left) > 0 {
		t.Fatalf("processes left after the service stopped: %v", left)
	}
	stoppedAt := time.Since(began)
	w.stopSvc = w.run(controlplanehosted.New(controlplanehosted.Config{DataDir: w.dataDir, KubeBin: w.bin}))
	w.waitScaled("hr", gen, 3, 6*time.Minute)
	t.Logf("FIGURES: 1 → 3 with a restart of the service after the second etcd member (at %s): done in %s",
		stoppedAt.Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
	if got := etcdMembers(t, w, dir); !slices.Equal(got, []string{"etcd-0", "etcd-1", "etcd-2"}) {
		t.Fatalf("etcd members: %v", got)
	}
	if code, body, err := do(admin, http.MethodGet, endpoint+"/api/v1/namespaces/default/configmaps/kept", ""); err != nil || code != http.StatusOK {
		t.Fatalf("the ConfigMap: %d %s %v", code, body, err)
	}

	// 3 → 1, stopped once the third member is gone.
	gen = w.setReplicas("hr", 1)
	began = time.Now()
	w.command(keys.ControlPlaneEnsure, "hr", gen)
	testkit.WaitFor(t, 3*time.Minute, "the third etcd member removed (state.json)", func() bool {
		m, ok := stateMembers(dir)
		return ok && len(m) == 2
	})
	w.stopSvc()
	if left := children(t, dir); len(left) > 0 {
		t.Fatalf("processes left after the service stopped: %v", left)
	}
	stoppedAt = time.Since(began)
	w.stopSvc = w.run(controlplanehosted.New(controlplanehosted.Config{DataDir: w.dataDir, KubeBin: w.bin}))
	w.waitScaled("hr", gen, 1, 6*time.Minute)
	t.Logf("FIGURES: 3 → 1 with a restart of the service after the third etcd member's removal (at %s): done in %s",
		stoppedAt.Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
	if got := etcdMembers(t, w, dir); !slices.Equal(got, []string{"etcd-0"}) {
		t.Fatalf("etcd members: %v", got)
	}
	testkit.WaitFor(t, 30*time.Second, "one etcd and one API server left", func() bool {
		procs := children(t, dir)
		return len(named(procs, "etcd")) == 1 && len(named(procs, "kube-apiserver")) == 1
	})
	if code, body, err := do(admin, http.MethodGet, endpoint+"/api/v1/namespaces/default/configmaps/kept", ""); err != nil || code != http.StatusOK {
		t.Fatalf("the ConfigMap after 3 → 1: %d %s %v", code, body, err)
	}
}
