package agent_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/cmd/capn-node/agent"
	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/replyseal"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubeadm"
	"github.com/capn-dev/capn/services/daemon"
)

// The fetch protocol is written twice (the bootstrapper answers, the SDK
// asks); they must agree.
func TestFetchProtocolMatchesTheBootstrapper(t *testing.T) {
	pairs := [][2]string{
		{sdk.BootstrapFetchRoot, bootstrapper.FetchSubjectRoot},
		{sdk.HeaderBootstrapChecksum, bootstrapper.HeaderChecksum},
		{sdk.HeaderServiceError, bootstrapper.HeaderError},
		{sdk.HeaderServiceErrorCode, bootstrapper.HeaderErrorCode},
	}
	for _, p := range pairs {
		if p[0] != p[1] {
			t.Errorf("sdk says %q, the bootstrapper %q", p[0], p[1])
		}
	}
}

type world struct {
	t       *testing.T
	srv     *natstest.Server
	js      jetstream.JetStream
	fetches atomic.Int32
	data    *capnv1.BootstrapData
	pin     string
}

// newWorld is a server with capn's streams and a bootstrapper stand-in
// answering c1/w-0's fetches with real kubeadm worker data.
func newWorld(t *testing.T) *world {
	return newWorldFor(t, kubeadm.New(), bootstraptest.JoinWorker, nil)
}

// newWorldFor answers with the data p renders for machine m.
func newWorldFor(t *testing.T, p bootstrap.Provider, m bootstraptest.Machine, spec *capnv1.BootstrapSpec) *world {
	in, out := render(t, p, m, spec)
	return newWorldWith(t, in, out)
}

// newWorldWith answers with out, rendered from in.
func newWorldWith(t *testing.T, in bootstrap.Input, out bootstrap.Output) *world {
	srv := natstest.Start(t)
	nc, js := srv.Connect(t)
	if err := events.Provision(context.Background(), js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, srv: srv, js: js, pin: in.CACertHash,
		data: &capnv1.BootstrapData{Format: string(out.Format), Data: out.Data, Checksum: sdk.Checksum(out.Data)}}
	sub, err := nc.Subscribe(sdk.BootstrapFetchSubject("c1", "w-0"), func(m *nats.Msg) {
		w.fetches.Add(1)
		reply := nats.NewMsg(m.Reply)
		if m.Header.Get(sdk.HeaderBootstrapChecksum) != w.data.GetChecksum() {
			reply.Header.Set(sdk.HeaderServiceErrorCode, "409")
			reply.Header.Set(sdk.HeaderServiceError, "not the current checksum")
		} else {
			b, _ := proto.Marshal(w.data)
			reply.Data, _ = replyseal.Seal(m.Header.Get(sdk.HeaderBootstrapCredential), m.Subject, b)
		}
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return w
}

func (w *world) config(dataDir string) agent.Config {
	return agent.Config{
		Cluster: "c1", Machine: "w-0", Version: "v1.33.2", DataDir: dataDir,
		NATS:              daemon.NATSConfig{URL: w.srv.URL()},
		BootstrapChecksum: w.data.GetChecksum(), BootstrapCredential: "machine-credential", CACertHash: w.pin,
		HeartbeatEvery: 50 * time.Millisecond, HealthAddr: freeAddr(w.t),
	}
}

// start runs an agent until the returned stop, which checks it returned nil.
func (w *world) start(cfg agent.Config) (a *agent.Agent, stop func()) {
	w.t.Helper()
	a, err := agent.New(cfg, zerolog.Nop())
	if err != nil {
		w.t.Fatal(err)
	}
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
		case <-time.After(5 * time.Second):
			w.t.Error("the agent did not stop within 5s")
		}
	}
	w.t.Cleanup(stop)
	return a, stop
}

func (w *world) lastBeat() (*capnv1.NodeHeartbeat, string) {
	s, err := w.js.Stream(context.Background(), events.StreamHealth)
	if err != nil {
		w.t.Fatal(err)
	}
	raw, err := s.GetLastMsgForSubject(context.Background(), events.HealthSubject("c1", "w-0", agent.HeartbeatKind))
	if err != nil {
		return nil, ""
	}
	e, err := events.FromMsg(raw.Header, raw.Data)
	if err != nil {
		w.t.Fatal(err)
	}
	hb := new(capnv1.NodeHeartbeat)
	if err := events.DataAs(e, hb); err != nil {
		w.t.Fatal(err)
	}
	return hb, e.ID()
}

func (w *world) waitBeatAfter(prev string) string {
	w.t.Helper()
	var id string
	natstest.WaitFor(w.t, 5*time.Second, "a new heartbeat", func() bool {
		_, id = w.lastBeat()
		return id != "" && id != prev
	})
	return id
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func healthz(addr string) int {
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func TestAgentBootstrapsOnceThenHeartbeats(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	cfg := w.config(dir)
	a, stop := w.start(cfg)
	id := w.waitBeatAfter("")
	hb, _ := w.lastBeat()
	if !hb.GetReady() || hb.GetKubeletVersion() != "v1.33.2" || hb.GetNodeName() != "w-0" || hb.GetCluster() != "c1" {
		t.Errorf("heartbeat = %v", hb)
	}
	if !strings.HasPrefix(id, "heartbeat.c1.w-0.") {
		t.Errorf("heartbeat id = %q", id)
	}
	if !a.Bootstrapped() || healthz(cfg.HealthAddr) != http.StatusOK {
		t.Error("not bootstrapped, or /healthz does not say so")
	}
	join := filepath.Join(dir, agent.RootFS, agent.KubeadmJoinConfig)
	if fi, err := os.Stat(join); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("join config: %v %v", fi, err)
	}
	if got := agent.Applied(dir); got != cfg.BootstrapChecksum {
		t.Errorf("applied = %q", got)
	}
	cmds, _ := os.ReadFile(filepath.Join(dir, agent.StateDir, agent.CommandsFile))
	if !strings.Contains(string(cmds), "kubeadm join") {
		t.Errorf("commands not run = %q", cmds)
	}
	w.waitBeatAfter(id) // heartbeats go on
	stop()

	// A reboot: the same data dir, no second fetch, heartbeats again.
	_, stop = w.start(cfg)
	_, id = w.lastBeat()
	w.waitBeatAfter(id)
	stop()
	if n := w.fetches.Load(); n != 1 {
		t.Errorf("%d fetches, want 1", n)
	}
	boots, _ := os.ReadFile(filepath.Join(dir, agent.StateDir, agent.BootsFile))
	if strings.TrimSpace(string(boots)) != "2" {
		t.Errorf("boots = %q", boots)
	}
}

func TestAgentRefusesDataItCannotTrust(t *testing.T) {
	_, otherPin := selfSignedCA(t)
	tests := []struct {
		name   string
		mutate func(*agent.Config)
	}{
		{"another CA pinned", func(c *agent.Config) { c.CACertHash = otherPin }},
		{"a checksum that is not current", func(c *agent.Config) { c.BootstrapChecksum = "sha256:00" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			dir := t.TempDir()
			cfg := w.config(dir)
			tt.mutate(&cfg)
			cfg.FetchRetryMax = 200 * time.Millisecond
			a, stop := w.start(cfg)
			// The second fetch follows the first's failure by at least
			// 200ms: heartbeats (every 50ms) would have been due 4 times.
			natstest.WaitFor(t, 5*time.Second, "a second fetch", func() bool { return w.fetches.Load() > 1 })
			if _, id := w.lastBeat(); id != "" || a.Bootstrapped() {
				t.Fatalf("an untrusted machine reported (%q)", id)
			}
			if code := healthz(cfg.HealthAddr); code != http.StatusServiceUnavailable {
				t.Errorf("/healthz = %d, want 503", code)
			}
			if _, err := os.Stat(filepath.Join(dir, agent.RootFS)); !os.IsNotExist(err) {
				t.Errorf("files were written: %v", err)
			}
			stop()
		})
	}
}

func TestAgentRefusesAnotherMachinesDataDir(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	cfg := w.config(dir)
	_, stop := w.start(cfg)
	w.waitBeatAfter("")
	stop()
	cfg.Machine = "w-1"
	a, err := agent.New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "belongs to machine c1/w-0") {
		t.Fatalf("err = %v", err)
	}
}

// TestAgentRunsCloudConfigOnARealNode: with RunCloudConfig the agent runs
// the kubeadm worker data it fetched — its files written (here under a
// directory standing for /), its runcmd run — instead of writing it under
// rootfs. No kubeadm is on PATH here, so the join fails: the agent says
// which command failed and how, does not count the data applied, and
// fetches again. (TestRealNodesKubernetes in providers/process runs it
// on real nodes, where kubeadm joins.)
func TestAgentRunsCloudConfigOnARealNode(t *testing.T) {
	t.Setenv("PATH", "/usr/bin:/bin")
	w := newWorld(t)
	dir, root := t.TempDir(), t.TempDir()
	cfg := w.config(dir)
	cfg.RunCloudConfig = true
	a, err := agent.New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	agent.SetCloudConfigRoot(a, root)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	logPath := filepath.Join(dir, agent.CloudConfigLog)
	var log []byte
	natstest.WaitFor(t, 10*time.Second, "the cloud-config run's failed kubeadm join in its log", func() bool {
		log, _ = os.ReadFile(logPath)
		return strings.Contains(string(log), "runcmd[0] `kubeadm join")
	})
	if !strings.Contains(string(log), "kubeadm: not found") && !strings.Contains(string(log), "kubeadm: command not found") {
		t.Errorf("the log does not say kubeadm was not found:\n%s", log)
	}
	if _, err := os.Stat(filepath.Join(root, agent.KubeadmJoinConfig)); err != nil {
		t.Errorf("the join config was not written under the root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, agent.RootFS)); !os.IsNotExist(err) {
		t.Errorf("the data was written under rootfs too: %v", err)
	}
	if got := agent.Applied(dir); got != "" {
		t.Errorf("applied = %q after a failed join", got)
	}
	natstest.WaitFor(t, 10*time.Second, "a second fetch after the failed run", func() bool { return w.fetches.Load() > 1 })
	if a.Bootstrapped() {
		t.Error("bootstrapped after a failed join")
	}
}
