package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capn-dev/capn/cmd/capn/internal/dev"
	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/daemon"
)

// devProbe is a service for capn dev's tests: it hands out its Deps,
// registers a counter, says it is ready and waits for the end.
type devProbe struct {
	name  string
	deps  chan *daemon.Deps
	fail  error // returned once started
	stuck bool  // never stops
}

func newDevProbe(name string) *devProbe {
	return &devProbe{name: name, deps: make(chan *daemon.Deps, 1)}
}

func (p *devProbe) Name() string { return p.name }

func (p *devProbe) Run(ctx context.Context, d *daemon.Deps) error {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "capn_probe_started_total", Help: "Starts."})
	d.Metrics.MustRegister(c)
	c.Inc()
	d.Ready.Set(true)
	p.deps <- d
	if p.fail != nil {
		return p.fail
	}
	<-ctx.Done()
	if p.stuck {
		select {} // a bug: never returns
	}
	return nil
}

// withDevServices runs capn dev with extra services for this test.
func withDevServices(t *testing.T, services ...daemon.Service) {
	t.Helper()
	extraDevServices = services
	t.Cleanup(func() { extraDevServices = nil })
}

// devRun is one `capn dev` running in the test.
type devRun struct {
	cancel  context.CancelFunc
	done    chan int
	out     *testkit.Buffer
	natsURL string
	opsURL  string
	// gatewayURL and token are the gateway's and its admin token.
	gatewayURL, token string
	// dataDir is capn dev's data directory (its NATS credentials).
	dataDir string
}

var (
	bannerNATS = regexp.MustCompile(`\n  NATS      (nats://\S+)`)
	bannerOps  = regexp.MustCompile(`\n  ops       (http://\S+)`)
	// The gateway's URL and admin token.
	bannerGateway = regexp.MustCompile(`\n  gateway   (http://\S+)`)
)

// startDev runs capn dev on free ports with dataDir and only the sim
// provider (extra may name others) and waits for its banner.
func startDev(t *testing.T, dataDir string, extra ...string) *devRun {
	t.Helper()
	return startDevWith(t, dataDir, nil, extra...)
}

// startDevWith is startDev with environment variables (XDG_CONFIG_HOME,
// HOME: never the real ones).
func startDevWith(t *testing.T, dataDir string, vars map[string]string, extra ...string) *devRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e, _, stderr := testEnv(vars)
	r := &devRun{cancel: cancel, done: make(chan int, 1), out: stderr, dataDir: dataDir}
	args := append([]string{"dev", "--data-dir", dataDir, "--nats-listen", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--gateway-addr", "127.0.0.1:0", "--autoscaler-listen", "127.0.0.1:0", "--log-format", "json", "--providers", "sim"}, extra...)
	go func() { r.done <- run(ctx, e, args) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	natstest.WaitFor(t, 20*time.Second, "the banner", func() bool {
		select {
		case code := <-r.done:
			r.done <- code
			t.Fatalf("capn dev exited with %d:\n%s", code, r.out)
		default:
		}
		return strings.Contains(r.out.String(), "Press Ctrl-C to stop.")
	})
	r.natsURL = bannerNATS.FindStringSubmatch(r.out.String())[1]
	r.opsURL = bannerOps.FindStringSubmatch(r.out.String())[1]
	r.gatewayURL = bannerGateway.FindStringSubmatch(r.out.String())[1]
	tok, err := os.ReadFile(filepath.Join(dataDir, dev.AdminTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	r.token = strings.TrimSpace(string(tok))
	// The banner lands in logs people paste into bug reports: it shows
	// where the token is and enough of it to tell it apart, never all of it.
	wantToken := "\n  token     " + r.token[:8] + "…   (admin; the whole token: cat " + filepath.Join(dataDir, dev.AdminTokenFile) + ")\n"
	if !strings.Contains(r.out.String(), wantToken) || strings.Contains(r.out.String(), r.token) {
		t.Fatalf("the banner shows the whole admin token, or lacks %q:\n%s", wantToken, r.out)
	}
	if !strings.Contains(r.out.String(), "\n  dashboard capn dashboard ") {
		t.Fatalf("the banner does not say how to open the dashboard:\n%s", r.out)
	}
	return r
}

// stop cancels capn dev as Ctrl-C does and returns its exit code.
func (r *devRun) stop(t *testing.T) int {
	t.Helper()
	r.cancel()
	select {
	case code := <-r.done:
		r.done <- code // for the cleanup
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("capn dev did not stop:\n%s", r.out)
		return -1
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// buildNode builds capn-node into a temporary directory and returns its path.
func buildNode(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "capn-node")
	if out, err := exec.Command("go", "build", "-o", bin, "../../../capn-node").CombinedOutput(); err != nil {
		t.Fatalf("go build capn-node: %v\n%s", err, out)
	}
	return bin
}

func TestDevEndToEnd(t *testing.T) {
	dataDir := t.TempDir()
	alpha, beta := newDevProbe("alpha"), newDevProbe("beta")
	withDevServices(t, alpha, beta)
	// Every provider: sim and process run; docker, whose image does not
	// exist (or whose daemon does not answer), does not, and says why.
	noImage := "capn-node:absent-" + strconv.Itoa(os.Getpid())
	first := startDev(t, dataDir, "--providers", "sim,process,docker", "--process-node-binary", buildNode(t), "--docker-image", noImage)
	for _, want := range []string{"capn dev is running", "data dir  " + dataDir,
		"services  cluster-planner, machine-manager, bootstrapper, health-watcher, remediator, addon-manager, fleet-manager, backup, maintenance, controlplane-external, controlplane-hosted, autoscaler-provider, provider-sim, provider-process, gateway, alpha, beta",
		"\n  providers sim, process\n  autoscaler 127.0.0.1:0 once a cluster asks for autoscaling (mutual TLS; cluster-autoscaler --cloud-provider=externalgrpc --cloud-config=" +
			filepath.Join(dataDir, "autoscaler", "clients", "<cluster>", "cloud-config") + ")\n  off       docker provider: ",
		"\n              turn on: make images IMAGES=capn-node (with a Docker daemon running)\n",
		"\n            Kubernetes on process machines: no --kube-bin, so their control planes are placeholders\n" +
			`              turn on: make kube, then bin/capn dev --kube-bin "$(hack/kube.sh --print-path)"` + "\n" +
			"            hosted control planes: no --kube-bin, so a cluster with controlPlane.type hosted waits (Ready False, BinariesMissing)\n" +
			`              turn on: make kube, then bin/capn dev --kube-bin "$(hack/kube.sh --print-path)"` + "\nPress Ctrl-C"} {
		if !strings.Contains(first.out.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, first.out)
		}
	}

	if code, body := get(t, first.opsURL+"/healthz"); code != 200 {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	natstest.WaitFor(t, 10*time.Second, "/readyz 200 for capn-dev, alpha and beta", func() bool {
		code, body := get(t, first.opsURL+"/readyz")
		return code == 200 && strings.Contains(body, `"service":"alpha"`) && strings.Contains(body, `"service":"beta"`) &&
			strings.Contains(body, `"service":"capn-dev"`)
	})
	_, metrics := get(t, first.opsURL+"/metrics")
	for _, want := range []string{`capn_probe_started_total{service="alpha"} 1`, `capn_probe_started_total{service="beta"} 1`, `capn_nats_connected{service="alpha"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// Each service has its own connection to the same server.
	da, db := <-alpha.deps, <-beta.deps
	ida, _ := da.NC.GetClientID()
	idb, _ := db.NC.GetClientID()
	if da.NC == db.NC || ida == idb || da.NC.ConnectedServerId() != db.NC.ConnectedServerId() {
		t.Errorf("alpha and beta share a connection or see different servers: client ids %d %d", ida, idb)
	}

	// The nats CLI's view: TCP on the printed URL, with the context file
	// capn dev writes.
	nc := contextConn(t, dataDir, first.natsURL)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "E2E", Subjects: []string{"e2e.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := js.Publish(ctx, fmt.Sprintf("e2e.%d", i), []byte("kept")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, events.EventSubject("test", "happened", "c1", events.ClusterObject), []byte("fact")); err != nil {
		t.Fatal(err)
	}
	if _, err := da.JS.Stream(ctx, "E2E"); err != nil {
		t.Errorf("a service does not see the stream over its in-process connection: %v", err)
	}
	// The providers that run announce themselves; docker's absence is
	// logged with its reason.
	observed, err := js.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"sim", "process"} {
		natstest.WaitFor(t, 10*time.Second, p+" provider's announcement", func() bool {
			_, err := observed.Get(ctx, "provider."+p)
			return err == nil
		})
	}
	if !strings.Contains(first.out.String(), `"provider":"docker"`) || !strings.Contains(first.out.String(), "the docker provider is not running: ") {
		t.Errorf("no log line says why docker does not run:\n%s", first.out)
	}
	if fi, err := os.Stat(filepath.Join(dataDir, "process")); err != nil || !fi.IsDir() {
		t.Errorf("the process provider's state dir is not under the data dir: %v", err)
	}
	nc.Close()

	// A second capn dev on the same data dir is refused while this one runs.
	e, _, stderr := testEnv(nil)
	code := run(ctx, e, []string{"dev", "--data-dir", dataDir, "--nats-listen", "none", "--http-addr", "127.0.0.1:0"})
	wantLock := fmt.Sprintf("capn dev: data dir %s is in use by another capn dev (pid %d)", dataDir, os.Getpid())
	if code != 1 || !strings.Contains(stderr.String(), wantLock) {
		t.Errorf("second capn dev: exit %d, stderr:\n%s\nwant 1 and %q", code, stderr, wantLock)
	}

	if code := first.stop(t); code != 0 {
		t.Fatalf("capn dev exited with %d after Ctrl-C:\n%s", code, first.out)
	}
	if !strings.HasSuffix(first.out.String(), "capn dev: stopped\n") || !da.NC.IsClosed() || !db.NC.IsClosed() {
		t.Errorf("unclean stop: connections closed %v %v; output:\n%s", da.NC.IsClosed(), db.NC.IsClosed(), first.out)
	}

	// The next start reuses the data dir: what the first one stored is there.
	second := startDev(t, dataDir)
	nc = contextConn(t, dataDir, second.natsURL)
	defer nc.Close()
	js, _ = jetstream.New(nc)
	for stream, want := range map[string]uint64{"E2E": 3, events.StreamEvents: 1} {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatalf("stream %s is gone after a restart: %v", stream, err)
		}
		if got := s.CachedInfo().State.Msgs; got != want {
			t.Errorf("stream %s has %d messages after a restart, want %d", stream, got, want)
		}
	}
	// A cluster asks for autoscaling: the autoscaler-provider listens and
	// writes the cluster's cloud config (docs/autoscaling.md).
	desired, err := js.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	asked, err := store.Encode(&capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "as1"}, Spec: &capnv1.ClusterSpec{
		WorkerPools: []*capnv1.WorkerPool{{Name: "md-0", Provider: "sim", Replicas: 1, Autoscaling: &capnv1.Autoscaling{Min: 1, Max: 3}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := desired.Put(ctx, "cluster.as1", asked); err != nil {
		t.Fatal(err)
	}
	cloudConfig := filepath.Join(dataDir, dev.AutoscalerDir, "clients", "as1", "cloud-config")
	natstest.WaitFor(t, 20*time.Second, "as1's autoscaler cloud config", func() bool {
		b, err := os.ReadFile(cloudConfig)
		return err == nil && strings.Contains(string(b), `address: "127.0.0.1:`) && !strings.Contains(string(b), `:0"`)
	})
	if code := second.stop(t); code != 0 {
		t.Fatalf("second run exited with %d:\n%s", code, second.out)
	}
}

func TestDevPortsInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "NATS", args: []string{"--nats-listen", addr, "--http-addr", "127.0.0.1:0"},
			want: "capn dev: NATS cannot listen on " + addr + ` (change it with --nats-listen or CAPN_NATS_LISTEN, or "none" for in-process only)`},
		{name: "ops HTTP", args: []string{"--nats-listen", "none", "--http-addr", addr},
			want: "capn dev: listen on " + addr + " for /healthz /readyz /metrics (change it with --http-addr or CAPN_HTTP_ADDR)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _, stderr := testEnv(nil)
			code := run(context.Background(), e, append([]string{"dev", "--data-dir", t.TempDir(), "--gateway-addr", "127.0.0.1:0"}, tt.args...))
			if code != 1 || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant 1 and %q", code, stderr, tt.want)
			}
		})
	}
}

// TestDevProvidersNeedTCP: with NATS in process only, the process and
// docker providers, whose machines connect over TCP, do not run, and the
// banner and the log say why.
func TestDevProvidersNeedTCP(t *testing.T) {
	probe := newDevProbe("probe")
	withDevServices(t, probe)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, _, stderr := testEnv(nil)
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, e, []string{"dev", "--data-dir", t.TempDir(), "--nats-listen", "none", "--http-addr", "off",
			"--gateway-addr", "127.0.0.1:0", "--log-format", "json", "--providers", "sim,process,docker"})
	}()
	<-probe.deps
	natstest.WaitFor(t, 20*time.Second, "the banner", func() bool { return strings.Contains(stderr.String(), "Press Ctrl-C to stop.") })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	out := stderr.String()
	for _, want := range []string{
		"services  cluster-planner, machine-manager, bootstrapper, health-watcher, remediator, addon-manager, fleet-manager, backup, maintenance, controlplane-external, controlplane-hosted, autoscaler-provider, provider-sim, gateway, probe\n",
		"\n  providers sim\n  autoscaler 127.0.0.1:8086 once a cluster asks for autoscaling (mutual TLS; ",
		"\n  off       process provider: its node agents (capn-node processes) connect over TCP and NATS is in-process only (--nats-listen none)\n" +
			"              turn on: restart capn dev without --nats-listen none\n" +
			"            docker provider: its machines reach NATS through a relay to a TCP listener and NATS is in-process only (--nats-listen none)\n" +
			"              turn on: restart capn dev without --nats-listen none\n" +
			"            Kubernetes on process machines: no --kube-bin, so their control planes are placeholders\n" +
			`              turn on: make kube, then bin/capn dev --kube-bin "$(hack/kube.sh --print-path)"` + "\n" +
			"            hosted control planes: no --kube-bin, so a cluster with controlPlane.type hosted waits (Ready False, BinariesMissing)\n",
		`"message":"the process provider is not running: its node agents`,
		`"message":"the docker provider is not running: its machines reach NATS`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestDevServiceTrouble(t *testing.T) {
	tests := []struct {
		name    string
		service *devProbe
		cancel  bool
		want    string
	}{
		{name: "a failing service stops capn dev", service: &devProbe{name: "flaky", fail: errors.New("cannot cope")},
			want: "capn dev: service flaky: cannot cope"},
		{name: "a service that does not stop is named", service: &devProbe{name: "stuck", stuck: true}, cancel: true,
			want: "capn dev: services did not stop within 200ms: stuck"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.service.deps = make(chan *daemon.Deps, 1)
			withDevServices(t, tt.service)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			e, _, stderr := testEnv(nil)
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, e, []string{"dev", "--data-dir", t.TempDir(), "--nats-listen", "none",
					"--http-addr", "127.0.0.1:0", "--gateway-addr", "127.0.0.1:0", "--shutdown-timeout", "200ms"})
			}()
			<-tt.service.deps
			if tt.cancel {
				cancel()
			}
			select {
			case code := <-done:
				if code != 1 || !strings.Contains(stderr.String(), tt.want) {
					t.Errorf("exit %d, stderr:\n%s\nwant 1 and %q", code, stderr, tt.want)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("capn dev did not end:\n%s", stderr)
			}
		})
	}
}

// TestDevGatewayAndClientConfig: capn dev serves the gateway with the
// admin token it prints, keeps the token across restarts and writes the
// client configs.
func TestDevGatewayAndClientConfig(t *testing.T) {
	dataDir, xdg := t.TempDir(), t.TempDir()
	vars := map[string]string{"XDG_CONFIG_HOME": xdg}
	first := startDevWith(t, dataDir, vars)
	for _, want := range []string{"  client    " + filepath.Join(dataDir, dev.ClientConfigFile), filepath.Join(xdg, "capn", "config.yaml") + " (the default, written)"} {
		if !strings.Contains(first.out.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, first.out)
		}
	}
	natstest.WaitFor(t, 10*time.Second, "the gateway answers", func() bool {
		code, _ := get(t, first.gatewayURL+"/healthz")
		return code == 200
	})
	e, stdout, stderr := testEnv(map[string]string{"XDG_CONFIG_HOME": xdg})
	if code := run(t.Context(), e, []string{"get", "clusters"}); code != 0 {
		t.Fatalf("capn get clusters with the default config: exit %d\n%s", code, stderr)
	}
	if stdout.String() != "" || !strings.Contains(stderr.String(), "No resources found.") {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}
	if code := first.stop(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	second := startDevWith(t, dataDir, vars)
	if second.token != first.token {
		t.Errorf("the admin token changed across a restart: %s → %s", first.token, second.token)
	}
	if !strings.Contains(second.out.String(), "(the default, updated with this token)") && !strings.Contains(second.out.String(), "left as it is: it points at") {
		t.Errorf("second banner:\n%s", second.out)
	}
}
