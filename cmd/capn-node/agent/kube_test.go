package agent_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/cmd/capn-node/agent"
	"github.com/capn-dev/capn/cmd/capn-node/kube"
	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/kubeapi/kubeapitest"
	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// fakeRuntime stands in for kube.Runtime: its readiness is the test's.
type fakeRuntime struct {
	ready   atomic.Bool
	ran     atomic.Bool
	stopped atomic.Bool
	etcd    atomic.Pointer[kube.NamedCondition]
}

func (f *fakeRuntime) Run(ctx context.Context) error {
	f.ran.Store(true)
	<-ctx.Done()
	time.Sleep(50 * time.Millisecond) //sleep-ok: a runtime whose stop takes a while, for the agent to wait on
	f.stopped.Store(true)
	return nil
}

func (f *fakeRuntime) Ready() bool { return f.ready.Load() }

func (f *fakeRuntime) EtcdConditions() []kube.NamedCondition {
	if c := f.etcd.Load(); c != nil {
		return []kube.NamedCondition{*c}
	}
	return nil
}

func (f *fakeRuntime) Condition() (kube.Condition, int) {
	if f.ready.Load() {
		return kube.Condition{Status: "True", Reason: "APIServerReady", Message: "ready"}, 2
	}
	return kube.Condition{Status: "Unknown", Reason: "Starting", Message: "starting"}, 1
}

var kubeLocalSpec = &capnv1.BootstrapSpec{Provider: "kube-local"}

// run starts a, built by the test, until the returned stop.
func (w *world) run(a *agent.Agent) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
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
				w.t.Errorf("agent: %v", err)
			}
		case <-time.After(60 * time.Second):
			// Children get SIGTERM, then SIGKILL after 10s each.
			w.t.Error("the agent did not stop within 60s")
		}
	}
	w.t.Cleanup(stop)
	return stop
}

func (w *world) lastCondition() *capnv1.NodeConditions {
	s, err := w.js.Stream(context.Background(), events.StreamHealth)
	if err != nil {
		w.t.Fatal(err)
	}
	raw, err := s.GetLastMsgForSubject(context.Background(), events.HealthSubject("c1", "w-0", agent.ConditionsKind))
	if err != nil {
		return nil
	}
	e, err := events.FromMsg(raw.Header, raw.Data)
	if err != nil {
		w.t.Fatal(err)
	}
	nc := new(capnv1.NodeConditions)
	if err := events.DataAs(e, nc); err != nil {
		w.t.Fatal(err)
	}
	return nc
}

func (w *world) waitCondition(status, reason string) *capnv1.NodeCondition {
	w.t.Helper()
	var c *capnv1.NodeCondition
	natstest.WaitFor(w.t, 5*time.Second, "condition "+status+"/"+reason, func() bool {
		nc := w.lastCondition()
		if nc == nil || len(nc.GetConditions()) == 0 {
			return false
		}
		c = nc.GetConditions()[0] // KubeControlPlane comes first
		return c.GetType() == agent.ConditionKubeControlPlane && c.GetStatus() == status && c.GetReason() == reason
	})
	return c
}

func (w *world) waitReady(want bool) {
	w.t.Helper()
	id := ""
	natstest.WaitFor(w.t, 5*time.Second, "a heartbeat with the wanted ready", func() bool {
		id = w.waitBeatAfter(id)
		hb, _ := w.lastBeat()
		return hb.GetReady() == want
	})
}

func TestAgentRunsTheKubeLocalControlPlane(t *testing.T) {
	w := newWorldFor(t, kubelocal.New(), bootstraptest.Init, kubeLocalSpec)
	cfg := w.config(t.TempDir())
	cfg.KubeBin, cfg.Address, cfg.ProviderID, cfg.KubePorts = "/opt/kube/bin", "127.0.0.9", "process://c1/w-0", "apiserver=7443"
	a, err := agent.New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeRuntime{}
	var got kube.Options
	var gotCfg *kubelocal.NodeConfig
	agent.SetNewKube(a, func(c *kubelocal.NodeConfig, o kube.Options) (agent.KubeRuntime, error) {
		got, gotCfg = o, c
		return fake, nil
	})
	stop := w.run(a)

	// Bootstrapped, but the API server does not answer yet: not ready.
	w.waitReady(false)
	if !a.Bootstrapped() || !fake.ran.Load() {
		t.Fatalf("bootstrapped %v, runtime ran %v", a.Bootstrapped(), fake.ran.Load())
	}
	if code := healthz(cfg.HealthAddr); code != http.StatusServiceUnavailable {
		t.Errorf("/healthz = %d while the control plane starts, want 503", code)
	}
	w.waitCondition("Unknown", "Starting")
	if got.BinDir != "/opt/kube/bin" || got.Address != "127.0.0.9" || got.ProviderID != "process://c1/w-0" ||
		got.Ports.APIServer != 7443 || got.Ports.EtcdClient != 2379 || got.DataDir != cfg.DataDir {
		t.Errorf("runtime options %+v", got)
	}
	if gotCfg.NodeName != "prod-1-cp-abcde" || !gotCfg.FirstControlPlane {
		t.Errorf("node config %+v", gotCfg)
	}

	fake.ready.Store(true)
	w.waitReady(true)
	w.waitCondition("True", "APIServerReady")
	if code := healthz(cfg.HealthAddr); code != http.StatusOK {
		t.Errorf("/healthz = %d with the API server ready", code)
	}
	fake.ready.Store(false)
	w.waitReady(false)

	// A leaving control plane's EtcdMemberRemoved goes out on the
	// machine's conditions subject beside KubeControlPlane, from source
	// capn-node: the machine-manager waits for it in NodeHealth.
	fake.etcd.Store(&kube.NamedCondition{Type: annotations.CondEtcdMemberRemoved,
		Condition: kube.Condition{Status: "True", Reason: "MemberRemoved", Message: "etcd member removed"}})
	natstest.WaitFor(t, 5*time.Second, "EtcdMemberRemoved=True reported", func() bool {
		nc := w.lastCondition()
		types := map[string]string{}
		for _, c := range nc.GetConditions() {
			types[c.GetType()] = c.GetStatus() + "/" + c.GetReason()
		}
		return nc.GetSource() == "capn-node" && len(types) == 2 && types[annotations.CondEtcdMemberRemoved] == "True/MemberRemoved" &&
			types[agent.ConditionKubeControlPlane] != ""
	})

	stop()
	if !fake.stopped.Load() {
		t.Error("the agent returned before its control plane stopped")
	}
}

func TestAgentWithoutKubeBinOnlyBootstraps(t *testing.T) {
	w := newWorldFor(t, kubelocal.New(), bootstraptest.Init, kubeLocalSpec)
	cfg := w.config(t.TempDir())
	_, stop := w.start(cfg)
	w.waitReady(true)
	if nc := w.lastCondition(); nc != nil {
		t.Errorf("a condition was sent without a control plane: %v", nc)
	}
	stop()
}

func TestConfigKubeFlags(t *testing.T) {
	w := newWorld(t)
	cfg := w.config(t.TempDir())
	cfg.KubeBin, cfg.Address, cfg.KubePorts, cfg.EtcdLearnerTimeout = "bin", "localhost", "apiserver=70000", -time.Second
	_, err := agent.New(cfg, zerolog.Nop())
	for _, want := range []string{"--kube-bin", "--address", "--kube-ports", "apiserver=70000: want a port 1-65535", "--etcd-learner-timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to name %s", err, want)
		}
	}
}

// TestAgentWithRealBinaries runs the agent as the process provider starts
// it — --kube-bin, --address, --provider-id — on kube-local data for the
// first control plane: its heartbeats turn ready once the real API server
// answers, and nothing is left running once it stops. It needs the
// binaries of make kube in $CAPN_KUBE_BIN (skipped without, failed under
// CAPN_REQUIRE_KUBE=1); cmd/capn-node/kube's TestControlPlane checks the
// cluster itself.
func TestAgentWithRealBinaries(t *testing.T) {
	bin, why := kubeapitest.Newest("kube-apiserver")
	if bin == "" {
		if os.Getenv("CAPN_REQUIRE_KUBE") == "1" {
			t.Fatalf("%s, and CAPN_REQUIRE_KUBE=1: build them with make kube", why)
		}
		t.Skipf("%s: build the binaries with make kube", why)
	}
	version, err := kube.BinaryVersion(t.Context(), filepath.Join(bin, "kube-apiserver"))
	if err != nil {
		t.Fatal(err)
	}
	// A preCommand before the control plane, and a postCommand that asks
	// the API server it started (with the admin kubeconfig the agent
	// issued): the commands run around the real control plane.
	spec := &capnv1.BootstrapSpec{Provider: "kube-local",
		PreCommands:  []string{`echo pre > "$CAPN_ROOT/pre-ran"`},
		PostCommands: []string{filepath.Join(bin, "kubectl") + ` --kubeconfig "$CAPN_ROOT/etc/kubernetes/admin.conf" get --raw /readyz > "$CAPN_ROOT/readyz"`}}
	in := bootstraptest.NewInput(t, bootstraptest.Init, spec, nil, nil)
	in.KubernetesVersion = version
	out, err := kubelocal.New().Render(in)
	if err != nil {
		t.Fatal(err)
	}
	w := newWorldWith(t, in, out)
	cfg := w.config(t.TempDir())
	cfg.Version = version
	cfg.KubeBin, cfg.Address, cfg.ProviderID = bin, "127.0.0.1", "process://c1/w-0"
	var ports []string
	for _, name := range []string{"etcd-client", "etcd-peer", "apiserver", "controller-manager", "scheduler"} {
		_, port, _ := strings.Cut(freeAddr(t), ":")
		ports = append(ports, name+"="+port)
	}
	cfg.KubePorts = strings.Join(ports, ",")
	a, err := agent.New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	stop := w.run(a)
	natstest.WaitFor(t, 3*time.Minute, "a ready heartbeat", func() bool {
		hb, _ := w.lastBeat()
		return hb.GetReady()
	})
	t.Logf("heartbeat ready %s after the agent started", time.Since(began).Round(time.Millisecond))
	w.waitCondition("True", "APIServerReady")
	w.commandsCondition("True", "Succeeded")
	for file, want := range map[string]string{"pre-ran": "pre\n", "readyz": "ok"} {
		if b, _ := os.ReadFile(filepath.Join(cfg.DataDir, agent.RootFS, file)); strings.TrimSpace(string(b)) != strings.TrimSpace(want) {
			t.Errorf("%s: %q, want %q", file, b, want)
		}
	}
	began = time.Now()
	stop()
	t.Logf("the agent and its control plane stopped in %s", time.Since(began).Round(time.Millisecond))
	// Every child names the data dir in its arguments (other tests may
	// run the same binaries meanwhile).
	for _, p := range cmdlines(t) {
		if strings.Contains(p, cfg.DataDir) {
			t.Errorf("left running after the agent stopped: %s", p)
		}
	}
}

// cmdlines lists the command lines of the running processes (zombies
// have none).
func cmdlines(t *testing.T) []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc")
	}
	var out []string
	for _, e := range entries {
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && len(b) > 0 {
			out = append(out, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}
