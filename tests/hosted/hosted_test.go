// Package hosted drives the hosted control-plane implementation
// (services/controlplane-hosted) through the control-plane contract, with
// the real bootstrapper handing it the cluster's PKI, on a real
// nats-server and the real Kubernetes binaries (make kube): ensure,
// supervision, adoption after a restart of the service, delete.
package hosted

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/bootstrapper"
	controlplanehosted "github.com/capn-dev/capn/services/controlplane-hosted"
	"github.com/capn-dev/capn/services/daemon"
)

// bin is a directory of every binary a hosted control plane runs, and its
// version.
type bin struct{ dir, version string }

// kubeBins are the directories of $CAPN_KUBE_BIN, else of make kube's
// cache, that hold every binary, oldest version first. Without one the
// test is skipped, or fails under CAPN_REQUIRE_KUBE=1.
func kubeBins(t *testing.T) []bin {
	t.Helper()
	var dirs []string
	if l := os.Getenv("CAPN_KUBE_BIN"); l != "" {
		dirs = filepath.SplitList(l)
	} else if home, err := os.UserHomeDir(); err == nil {
		dirs, _ = filepath.Glob(filepath.Join(home, ".cache", "capn", "kube", "k8s-*", "bin"))
	}
	var out []bin
	for _, d := range dirs {
		if strings.HasSuffix(filepath.Dir(d), ".tmp") {
			continue
		}
		ok := true
		for _, b := range controlplanehosted.Binaries {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				ok = false
			}
		}
		if !ok {
			continue
		}
		o, err := execOutput(filepath.Join(d, "kube-apiserver"), "--version")
		if f := strings.Fields(o); err == nil && len(f) == 2 {
			out = append(out, bin{d, f[1]})
		}
	}
	slices.SortFunc(out, func(a, b bin) int {
		va, _ := manifest.ParseVersion(a.version)
		vb, _ := manifest.ParseVersion(b.version)
		return va.Compare(vb)
	})
	if len(out) == 0 {
		if os.Getenv("CAPN_REQUIRE_KUBE") == "1" {
			t.Fatal("CAPN_REQUIRE_KUBE=1 but no Kubernetes binaries: build them with make kube")
		}
		t.Skip("no Kubernetes binaries (CAPN_KUBE_BIN or ~/.cache/capn/kube; make kube builds them)")
	}
	return out
}

// world is a nats-server with capn's topology, the real bootstrapper and
// the hosted service.
type world struct {
	t       *testing.T
	ns      *natstest.Server
	ring    *seal.Keyring
	bin     string
	version string
	dataDir string
	pub     *events.Publisher
	records *store.Bucket[*capnv1.ControlPlaneRecord]
	stopSvc func()
}

func newWorld(t *testing.T) *world {
	bins := kubeBins(t)
	return newWorldWith(t, bins[len(bins)-1].version, bins...)
}

// newWorldWith runs the hosted service with bins; clusters are applied at
// version.
func newWorldWith(t *testing.T, version string, bins ...bin) *world {
	var list []string
	for _, b := range bins {
		list = append(list, b.dir)
	}
	bin := strings.Join(list, string(filepath.ListSeparator))
	ns := natstest.Start(t)
	_, js := ns.Connect(t)
	ctx := context.Background()
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	key, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, ns: ns, ring: ring, bin: bin, version: version, dataDir: t.TempDir(),
		pub: events.NewPublisher(js, "capn/test-planner"), records: store.NewBucket(obs, store.New[capnv1.ControlPlaneRecord]())}
	w.run(bootstrapper.New(bootstrapper.Config{Keyring: ring}))
	w.stopSvc = w.run(controlplanehosted.New(controlplanehosted.Config{DataDir: w.dataDir, KubeBin: bin}))
	return w
}

// run runs svc on its own connection until the test ends or the returned
// stop is called.
func (w *world) run(svc daemon.Service) (stop func()) {
	nc, _ := w.ns.Connect(w.t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := zerolog.New(zerolog.NewTestWriter(w.t)).Level(zerolog.WarnLevel)
	go func() {
		done <- daemon.Run(ctx, daemon.Config{Name: svc.Name(), HTTPAddr: daemon.HTTPOff, ShutdownTimeout: 30 * time.Second},
			svc, daemon.WithConn(nc), daemon.WithoutHTTP(), daemon.WithLogger(log))
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				w.t.Errorf("%s: %v", svc.Name(), err)
			}
		case <-time.After(45 * time.Second):
			w.t.Errorf("%s did not stop", svc.Name())
		}
	}
	w.t.Cleanup(stop)
	return stop
}

func (w *world) apply(name string, replicas int32) int64 {
	w.t.Helper()
	_, js := w.ns.Connect(w.t)
	des, err := js.KeyValue(context.Background(), events.BucketDesired)
	if err != nil {
		w.t.Fatal(err)
	}
	rev, err := store.NewBucket(des, store.New[capnv1.Cluster]()).Create(context.Background(), keys.Cluster(name), &capnv1.Cluster{
		ApiVersion: "capn.dev/v1alpha1", Kind: "Cluster",
		Metadata: &capnv1.ObjectMeta{Name: name, CreationTimestamp: timestamppb.Now()},
		Spec: &capnv1.ClusterSpec{KubernetesVersion: w.version,
			ControlPlane: &capnv1.ControlPlaneSpec{Replicas: replicas, Type: capnv1.ControlPlaneHosted}}})
	if err != nil {
		w.t.Fatal(err)
	}
	return int64(rev)
}

// markDeleting sets the desired cluster's deletion timestamp.
func (w *world) markDeleting(name string) {
	w.t.Helper()
	_, js := w.ns.Connect(w.t)
	des, err := js.KeyValue(context.Background(), events.BucketDesired)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, _, err := store.NewBucket(des, store.New[capnv1.Cluster]()).Mutate(context.Background(), keys.Cluster(name),
		func(c *capnv1.Cluster, _ bool) (*capnv1.Cluster, error) {
			c.Metadata.DeletionTimestamp = timestamppb.Now()
			return c, nil
		}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) command(verb, cluster string, gen int64) {
	w.t.Helper()
	id := fmt.Sprintf("controlplane-%s-%d-%s", cluster, gen, verb)
	if _, err := w.pub.Publish(context.Background(), keys.ControlPlaneCommand(capnv1.ControlPlaneHosted, verb, cluster),
		"dev.capn.controlplane."+verb, id, &capnv1.ControlPlaneCommand{Cluster: cluster, Generation: gen}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) record(cluster string) *capnv1.ControlPlaneRecord {
	r, _, err := w.records.Get(context.Background(), keys.ControlPlane(cluster))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// waitReady waits for every API server of the record to answer.
func (w *world) waitReady(cluster string, timeout time.Duration) *capnv1.ControlPlaneRecord {
	w.t.Helper()
	var r *capnv1.ControlPlaneRecord
	testkit.WaitFor(w.t, timeout, cluster+"'s record initialized with every replica ready", func() bool {
		r = w.record(cluster)
		return r != nil && r.GetInitialized() && r.GetReadyReplicas() == r.GetReplicas() && r.GetReplicas() > 0
	})
	return r
}

// adminClient is capn's admin identity: a client certificate of the
// cluster CA the bootstrapper keeps (sealed) in pki.<cluster>.
func (w *world) adminClient(cluster string) *http.Client {
	w.t.Helper()
	_, js := w.ns.Connect(w.t)
	sec, err := js.KeyValue(context.Background(), events.BucketSecrets)
	if err != nil {
		w.t.Fatal(err)
	}
	p, _, err := store.NewBucket(sec, store.New[capnv1.ClusterPKI](), store.WithSealer(w.ring)).Get(context.Background(), keys.PKI(cluster))
	if err != nil {
		w.t.Fatal(err)
	}
	ca, err := pki.ParseCA(pki.KeyPair{CertPEM: []byte(p.GetCa().GetCertPem()), KeyPEM: []byte(p.GetCa().GetKeyPem())}, time.Now())
	if err != nil {
		w.t.Fatal(err)
	}
	kp, err := pki.IssueAdmin(ca, time.Now())
	if err != nil {
		w.t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		w.t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}}
}

func do(c *http.Client, method, url, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b := new(strings.Builder)
	_, _ = fmt.Fprint(b, readAll(resp))
	return resp.StatusCode, b.String(), nil
}

// children are the live processes whose command line names dir.
func children(t *testing.T, dir string) []testkit.Proc {
	var out []testkit.Proc
	for _, p := range testkit.Processes(t) {
		if strings.Contains(p.Cmdline, dir) {
			out = append(out, p)
		}
	}
	return out
}

func named(procs []testkit.Proc, exe string) []testkit.Proc {
	var out []testkit.Proc
	for _, p := range procs {
		if f := strings.Fields(p.Cmdline); len(f) > 0 && filepath.Base(f[0]) == exe {
			out = append(out, p)
		}
	}
	return out
}

// rssKiB sums VmRSS of pids.
func rssKiB(procs []testkit.Proc) (total int64) {
	for _, p := range procs {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.PID), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				total += n
			}
		}
	}
	return total
}

func TestHostedControlPlaneLifecycle(t *testing.T) {
	testkit.RequireLinux(t)
	w := newWorld(t)
	gen := w.apply("h1", 1)
	began := time.Now()
	w.command(keys.ControlPlaneEnsure, "h1", gen)
	rec := w.waitReady("h1", 3*time.Minute)
	tookReady := time.Since(began)
	dir := filepath.Join(w.dataDir, "h1")

	if rec.GetImplementation() != capnv1.ControlPlaneHosted || rec.GetVersion() != w.version || rec.GetReplicas() != 1 ||
		rec.GetObservedGeneration() != gen || rec.GetEndpoint().GetHost() != "127.0.0.1" || rec.GetEndpoint().GetPort() == 0 {
		t.Fatalf("record: %v", rec)
	}
	if !strings.Contains(rec.GetCaCertificatePem(), "BEGIN CERTIFICATE") {
		t.Fatalf("record without the cluster CA: %q", rec.GetCaCertificatePem())
	}
	endpoint := fmt.Sprintf("https://%s:%d", rec.GetEndpoint().GetHost(), rec.GetEndpoint().GetPort())
	admin := w.adminClient("h1")
	code, body, err := do(admin, http.MethodPost, endpoint+"/api/v1/namespaces/default/configmaps",
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kept"},"data":{"k":"v"}}`)
	if err != nil || code != http.StatusCreated {
		t.Fatalf("create a ConfigMap through the endpoint as capn's admin: %d %s %v", code, body, err)
	}
	// Someone without a certificate of the cluster CA is not let in.
	anon := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if code, _, err := do(anon, http.MethodGet, endpoint+"/api/v1/namespaces/default/configmaps/kept", ""); err != nil || code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Fatalf("an anonymous client read the ConfigMap: %d %v", code, err)
	}
	procs := children(t, dir)
	for _, exe := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if len(named(procs, exe)) != 1 {
			t.Fatalf("want one %s under %s, have %v", exe, dir, procs)
		}
	}
	// Let the components settle, then measure.
	testkit.WaitFor(t, time.Minute, "the controller-manager to hold its lease", func() bool {
		code, _, _ := do(admin, http.MethodGet, endpoint+"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager", "")
		return code == http.StatusOK
	})
	all := children(t, dir)
	var each []string
	for _, exe := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		each = append(each, fmt.Sprintf("%s %d", exe, rssKiB(named(all, exe))/1024))
	}
	t.Logf("FIGURES: ensure to initialized %s; RSS of one hosted control plane (1 replica) %d MiB (%s)",
		tookReady.Round(100*time.Millisecond), rssKiB(all)/1024, strings.Join(each, ", "))

	// kill -9 the API server: the supervisor starts another, and the
	// endpoint answers again.
	old := named(children(t, dir), "kube-apiserver")[0].PID
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 2*time.Minute, "a new kube-apiserver answering", func() bool {
		now := named(children(t, dir), "kube-apiserver")
		if len(now) != 1 || now[0].PID == old {
			return false
		}
		code, _, _ := do(admin, http.MethodGet, endpoint+"/api/v1/namespaces/default/configmaps/kept", "")
		return code == http.StatusOK
	})
	w.waitReady("h1", time.Minute)

	// Restart the service: its processes stop with it; the new one adopts
	// the data dir — same endpoint, same etcd data.
	w.stopSvc()
	if left := children(t, dir); len(left) > 0 {
		t.Fatalf("processes left after the service stopped: %v", left)
	}
	w.stopSvc = w.run(controlplanehosted.New(controlplanehosted.Config{DataDir: w.dataDir, KubeBin: w.bin}))
	testkit.WaitFor(t, 2*time.Minute, "the adopted control plane to serve the ConfigMap at the same endpoint", func() bool {
		code, _, _ := do(admin, http.MethodGet, endpoint+"/api/v1/namespaces/default/configmaps/kept", "")
		return code == http.StatusOK
	})
	after := w.waitReady("h1", time.Minute)
	if after.GetEndpoint().GetPort() != rec.GetEndpoint().GetPort() {
		t.Fatalf("endpoint moved from %d to %d", rec.GetEndpoint().GetPort(), after.GetEndpoint().GetPort())
	}

	// delete (the cluster is deleting, as the planner sends it): the
	// processes, the data dir and the record are gone; an ensure of the
	// deleting cluster does nothing.
	before := named(children(t, dir), "kube-apiserver")
	w.markDeleting("h1")
	w.command(keys.ControlPlaneEnsure, "h1", gen+1)
	w.command(keys.ControlPlaneDelete, "h1", gen)
	testkit.WaitFor(t, time.Minute, "the record deleted", func() bool { return w.record("h1") == nil })
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("data dir %s after delete: %v", dir, err)
	}
	testkit.WaitFor(t, 30*time.Second, "every process gone", func() bool { return len(children(t, dir)) == 0 })
	for _, p := range before {
		if testkit.Alive(t, p.PID) {
			t.Fatalf("kube-apiserver %d alive after delete", p.PID)
		}
	}
}
