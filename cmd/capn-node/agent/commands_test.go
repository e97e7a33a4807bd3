package agent_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/capn-dev/capn/cmd/capn-node/agent"
	"github.com/capn-dev/capn/cmd/capn-node/kube"
	"github.com/capn-dev/capn/events/natstest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubeadm"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// commandsCondition waits for the agent's BootstrapCommands condition
// with status and reason on the machine's conditions subject.
func (w *world) commandsCondition(status, reason string) *capnv1.NodeCondition {
	w.t.Helper()
	var c *capnv1.NodeCondition
	natstest.WaitFor(w.t, 20*time.Second, "BootstrapCommands "+status+"/"+reason, func() bool {
		c = nil
		for _, x := range w.lastCondition().GetConditions() {
			if x.GetType() == agent.ConditionBootstrapCommands {
				c = x
			}
		}
		return c != nil && c.GetStatus() == status && c.GetReason() == reason
	})
	return c
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestAgentRunsKubeadmCommands: on a process machine the kubeadm data's
// files are written first (mode, owner), then the preCommands run in
// order in the machine's root, the join is not run (no kubeadm), then the
// postCommands; the machine reports ready only once all ran, with the
// last output in its condition and every line in the command log.
func TestAgentRunsKubeadmCommands(t *testing.T) {
	spec := &capnv1.BootstrapSpec{
		Provider: "kubeadm",
		Files: []*capnv1.File{
			{Path: "/etc/app/config", Content: "greeting=hello\n", Permissions: "0640", Owner: "nobody:nogroup"},
			{Path: "/etc/app/root-only", Content: "x", Owner: "root:root", Permissions: "0600"},
		},
		PreCommands: []string{
			`grep -q greeting=hello "$CAPN_ROOT/etc/app/config" && echo "pre-0 in $(pwd)" > "$CAPN_ROOT/order"`,
			`echo "pre-1 $CAPN_CLUSTER/$CAPN_MACHINE" >> order; echo 'to stderr' >&2`,
		},
		PostCommands:   []string{`test ! -e /run/cluster-api/bootstrap-success.complete && echo post-0 >> order && echo "the last line"`},
		CommandTimeout: durationpb.New(30 * time.Second),
	}
	w := newWorldFor(t, kubeadm.New(), bootstraptest.JoinWorker, spec)
	dir := t.TempDir()
	cfg := w.config(dir)
	a, stop := w.start(cfg)
	c := w.commandsCondition("True", "Succeeded")
	w.waitReady(true)
	if !strings.Contains(c.GetMessage(), "ran 2 preCommands and 1 postCommands") || !strings.Contains(c.GetMessage(), "postCommands[0]") ||
		!strings.HasSuffix(c.GetMessage(), "stdout (last 1 lines): the last line") {
		t.Errorf("condition message %q", c.GetMessage())
	}
	root := filepath.Join(dir, agent.RootFS)
	order, _ := os.ReadFile(filepath.Join(root, "order"))
	if want := "pre-0 in " + root + "\npre-1 c1/w-0\npost-0\n"; string(order) != want {
		t.Errorf("the commands ran as\n%s\nwant\n%s", order, want)
	}
	fi, err := os.Stat(filepath.Join(root, "etc/app/config"))
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("config: %v %v", fi, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if os.Geteuid() == 0 && (st.Uid != 65534 || st.Gid != 65534) {
		t.Errorf("owner %d:%d, want nobody:nogroup (65534)", st.Uid, st.Gid)
	}
	log, _ := os.ReadFile(filepath.Join(dir, agent.CommandsLog))
	for _, line := range []string{"preCommands[1] stderr: to stderr\n", "postCommands[0] stdout: the last line\n"} {
		if !strings.Contains(string(log), line) {
			t.Errorf("command log lacks %q:\n%s", line, log)
		}
	}
	notRun, _ := os.ReadFile(filepath.Join(dir, agent.StateDir, agent.CommandsFile))
	if !strings.HasPrefix(string(notRun), "kubeadm join --config") || strings.Count(string(notRun), "\n") != 1 {
		t.Errorf("commands not run: %q, want the join alone", notRun)
	}
	if !a.Bootstrapped() || healthz(cfg.HealthAddr) != http.StatusOK {
		t.Error("not bootstrapped, or /healthz does not say so")
	}
	stop()

	// A restart runs nothing again and is ready at once.
	if err := os.Remove(filepath.Join(root, "order")); err != nil {
		t.Fatal(err)
	}
	_, stop = w.start(cfg)
	w.waitReady(true)
	stop()
	if exists(filepath.Join(root, "order")) {
		t.Error("a restart ran the commands again")
	}
}

// TestAgentFailsOnACommand: the first command that fails or outlives its
// timeout stops the bootstrap; the machine never reports ready, and its
// condition names the command, how it ended and its stderr, also after a
// restart (which runs nothing again).
func TestAgentFailsOnACommand(t *testing.T) {
	tests := []struct {
		name    string
		pre     []string
		timeout time.Duration
		reason  string
		msgHas  []string
	}{
		{"fails", []string{"echo ok > first", "echo 'disk /dev/sdb not found' >&2; exit 3"}, 30 * time.Second, "CommandFailed",
			[]string{"preCommands[1] `echo 'disk /dev/sdb not found' >&2; exit 3` exited with code 3 after", "stderr (last 1 lines): disk /dev/sdb not found"}},
		{"times out", []string{"echo ok > first", "echo waiting; exec sleep 60"}, time.Second, "CommandTimedOut",
			[]string{"preCommands[1] `echo waiting; exec sleep 60` timed out after 1s (commandTimeout) and was killed", "stdout (last 1 lines): waiting"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &capnv1.BootstrapSpec{Provider: "kubeadm", PreCommands: tt.pre, PostCommands: []string{"echo post > post"},
				CommandTimeout: durationpb.New(tt.timeout)}
			w := newWorldFor(t, kubeadm.New(), bootstraptest.JoinWorker, spec)
			dir := t.TempDir()
			cfg := w.config(dir)
			start := time.Now()
			_, stop := w.start(cfg)
			c := w.commandsCondition("False", tt.reason)
			for _, m := range tt.msgHas {
				if !strings.Contains(c.GetMessage(), m) {
					t.Errorf("message %q lacks %q", c.GetMessage(), m)
				}
			}
			if tt.reason == "CommandTimedOut" && time.Since(start) > 15*time.Second {
				t.Errorf("a 1s timeout took %s", time.Since(start))
			}
			hb, _ := w.lastBeat()
			if hb.GetReady() {
				t.Error("a machine whose command failed says ready")
			}
			if code := healthz(cfg.HealthAddr); code != http.StatusServiceUnavailable {
				t.Errorf("/healthz = %d, want 503", code)
			}
			root := filepath.Join(dir, agent.RootFS)
			if !exists(filepath.Join(root, "first")) || exists(filepath.Join(root, "post")) {
				t.Error("the commands did not stop at the failure")
			}
			stop()

			// After a restart: the same failure, nothing run again.
			if err := os.Remove(filepath.Join(root, "first")); err != nil {
				t.Fatal(err)
			}
			_, stop = w.start(cfg)
			w.waitReady(false)
			again := w.commandsCondition("False", tt.reason)
			stop()
			if again.GetMessage() != c.GetMessage() || exists(filepath.Join(root, "first")) {
				t.Errorf("after a restart: %q (ran again: %v)", again.GetMessage(), exists(filepath.Join(root, "first")))
			}
		})
	}
}

// TestAgentRefusesIgnition: Ignition data is for machines that boot with
// Ignition; the agent says so at once (the machine is replaced) instead of
// fetching it forever.
func TestAgentRefusesIgnition(t *testing.T) {
	w := newWorldFor(t, kubeadm.New(), bootstraptest.JoinWorker, &capnv1.BootstrapSpec{Format: "ignition"})
	cfg := w.config(t.TempDir())
	a, stop := w.start(cfg)
	c := w.commandsCondition("False", "CommandsNotRun")
	if !strings.Contains(c.GetMessage(), "ignition is for machines that boot with Ignition (Flatcar, Fedora CoreOS)") {
		t.Errorf("message %q", c.GetMessage())
	}
	if a.Bootstrapped() || w.fetches.Load() != 1 {
		t.Errorf("bootstrapped %v after %d fetches", a.Bootstrapped(), w.fetches.Load())
	}
	stop()
}

// TestAgentRunsKubeLocalCommandsAroundTheControlPlane: kube-local's
// commands come from its node config; the preCommands run before the
// control plane starts, the postCommands once it serves, and only then
// does the machine report ready.
func TestAgentRunsKubeLocalCommandsAroundTheControlPlane(t *testing.T) {
	spec := &capnv1.BootstrapSpec{Provider: "kube-local", PreCommands: []string{"echo pre > pre"}, PostCommands: []string{"echo post > post"}}
	w := newWorldFor(t, kubelocal.New(), bootstraptest.Init, spec)
	dir := t.TempDir()
	root := filepath.Join(dir, agent.RootFS)
	cfg := w.config(dir)
	cfg.KubeBin = "/opt/kube/bin"
	a, err := agent.New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeRuntime{}
	preFirst := make(chan bool, 1)
	agent.SetNewKube(a, func(*kubelocal.NodeConfig, kube.Options) (agent.KubeRuntime, error) {
		preFirst <- exists(filepath.Join(root, "pre"))
		return fake, nil
	})
	stop := w.run(a)
	select {
	case ok := <-preFirst:
		if !ok {
			t.Fatal("the control plane started before the preCommands ran")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the control plane never started")
	}
	w.commandsCondition("Unknown", "Running")
	w.waitReady(false)
	if exists(filepath.Join(root, "post")) {
		t.Fatal("a postCommand ran before the control plane served")
	}
	fake.ready.Store(true)
	w.commandsCondition("True", "Succeeded")
	w.waitReady(true)
	if !exists(filepath.Join(root, "post")) {
		t.Error("the postCommand did not run")
	}
	stop()
}

// TestAgentReportsReadyAtOnce: a node that becomes ready between two
// heartbeats says so at once, not at the next heartbeat: with an hour
// between heartbeats, the one after the bootstrap commands finish comes
// within seconds (a create's machines waited up to the 10 s interval to
// be Running).
func TestAgentReportsReadyAtOnce(t *testing.T) {
	spec := &capnv1.BootstrapSpec{
		Provider:       "kubeadm",
		PreCommands:    []string{`until [ -e "$CAPN_ROOT/go" ]; do sleep 0.05; done`},
		CommandTimeout: durationpb.New(30 * time.Second),
	}
	w := newWorldFor(t, kubeadm.New(), bootstraptest.JoinWorker, spec)
	dir := t.TempDir()
	cfg := w.config(dir)
	cfg.HeartbeatEvery = time.Hour
	w.start(cfg)
	first := w.waitBeatAfter("")
	if hb, _ := w.lastBeat(); hb.GetReady() {
		t.Fatal("ready before its bootstrap command finished")
	}
	natstest.WaitFor(t, 10*time.Second, "the command running", func() bool { return exists(filepath.Join(dir, agent.RootFS)) })
	if err := os.WriteFile(filepath.Join(dir, agent.RootFS, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w.waitBeatAfter(first)
	if hb, _ := w.lastBeat(); !hb.GetReady() {
		t.Fatalf("the heartbeat after the command finished says not ready: %v", hb)
	}
	t.Logf("ready reported %s after the command's file was written", time.Since(start).Round(time.Millisecond))
}
