package process_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/daemon"
)

func newProvider(t *testing.T, mutate func(*process.Options)) (*process.Provider, process.Options) {
	t.Helper()
	opts := options(t, t.TempDir())
	opts.NodeNATSURL = "nats://127.0.0.1:1" // nothing listens: the nodes just retry
	if mutate != nil {
		mutate(&opts)
	}
	p, err := process.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p, opts
}

func create(t *testing.T, p *process.Provider, cluster, machine string) *capnv1.InfraMachine {
	t.Helper()
	m, err := p.CreateMachine(context.Background(), &capnv1.CreateMachine{
		Cluster: cluster, Machine: machine, Role: "worker", Version: "v1.33.4", BootstrapChecksum: "sha256:00",
	})
	if err != nil {
		logs, _ := filepath.Glob(filepath.Join(p.StateDir(), "clusters", cluster, "machines", machine, "node.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			t.Logf("%s:\n%s", l, b)
		}
		t.Fatal(err)
	}
	return m
}

func internalIP(m *capnv1.InfraMachine) string {
	for _, a := range m.GetAddresses() {
		if a.GetType() == "InternalIP" {
			return a.GetAddress()
		}
	}
	return ""
}

func TestAddressesAreOwnAndReused(t *testing.T) {
	p, opts := newProvider(t, nil)
	ctx := context.Background()
	network := process.MachineNetwork(opts.StateDir)
	addr := func(x byte) string {
		b := network.Addr().As4()
		b[3] = x
		return netip.AddrFrom4(b).String()
	}
	if network.Bits() != 24 || network.Addr().As4()[1] == 0 {
		t.Fatalf("machine network %s: want a /24 of 127.0.0.0/8 outside 127.0.x.x", network)
	}
	if other := process.MachineNetwork(t.TempDir()); other == network {
		t.Errorf("two state dirs share the machine network %s", network)
	}
	a, b := create(t, p, "c1", "a"), create(t, p, "c2", "b")
	if internalIP(a) != addr(2) || internalIP(b) != addr(3) || a.GetStateValue() != sdk.StateRunning {
		t.Fatalf("a %v, b %v, want %s and %s", a, b, addr(2), addr(3))
	}
	if err := p.DeleteMachine(ctx, "c1", "a"); err != nil {
		t.Fatal(err)
	}
	if c := create(t, p, "c2", "c"); internalIP(c) != addr(2) {
		t.Errorf("c got %s, want the freed %s", internalIP(c), addr(2))
	}
	if again := create(t, p, "c2", "b"); internalIP(again) != addr(3) {
		t.Errorf("a repeated create moved b to %s", internalIP(again))
	}
	// An address another program listens on is skipped.
	ln, err := net.Listen("tcp", addr(4)+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if d := create(t, p, "c2", "d"); internalIP(d) != addr(5) {
		t.Errorf("d got %s, want %s (%s has a listener)", internalIP(d), addr(5), addr(4))
	}
}

func TestPIDIsCheckedAgainstTheMachine(t *testing.T) {
	self, _ := os.ReadFile("/proc/self/stat")
	selfStart := strings.Fields(string(self[strings.LastIndexByte(string(self), ')')+1:]))[19]
	tests := []struct {
		name string
		pid  func(real string) string
	}{
		{"another program's pid", func(string) string { return fmt.Sprintf("%d %s", os.Getpid(), selfStart) }},
		{"the pid reused (another start time)", func(real string) string {
			return strings.Fields(real)[0] + " 1"
		}},
		{"another machine's agent", func(string) string { return "" }},
		{"garbage", func(string) string { return "not a pid" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, opts := newProvider(t, nil)
			create(t, p, "c1", "m1")
			other := create(t, p, "c1", "m2")
			pidPath := filepath.Join(machineDir(opts.StateDir, "c1", "m1"), "pid")
			real, _ := os.ReadFile(pidPath)
			content := tt.pid(string(real))
			if content == "" { // point m1 at m2's live agent
				b, _ := os.ReadFile(filepath.Join(machineDir(opts.StateDir, "c1", "m2"), "pid"))
				content = string(b)
			}
			if content != string(real) {
				// The real agent stays running: a machine whose pid file
				// lies is gone for the provider, and the test kills it.
				pid, _ := strconv.Atoi(strings.Fields(string(real))[0])
				t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			}
			if err := os.WriteFile(pidPath, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Describe(context.Background(), "c1", "m1"); !errors.Is(err, sdk.ErrNotFound) {
				t.Fatalf("Describe = %v, want ErrNotFound", err)
			}
			list, err := p.List(context.Background())
			if err != nil || len(list) != 1 || list[0].GetMachine() != "m2" || internalIP(list[0]) != internalIP(other) {
				t.Fatalf("List = %v, %v; want m2 only", list, err)
			}
		})
	}
}

func TestNodeServesHealthOnItsOwnAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	p, _ := newProvider(t, func(o *process.Options) { o.HealthPort = port })
	m := create(t, p, "c1", "m1")
	url := fmt.Sprintf("http://%s:%d/healthz", internalIP(m), port)
	natstest.WaitFor(t, 10*time.Second, "the node's /healthz on "+url, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		// No bootstrapper answers here: the node waits for its data.
		return resp.StatusCode == http.StatusServiceUnavailable
	})
}

func TestCreateWithoutBootstrapChecksumFailsForGood(t *testing.T) {
	p, opts := newProvider(t, nil)
	_, err := p.CreateMachine(context.Background(), &capnv1.CreateMachine{Cluster: "c1", Machine: "m1", Version: "v1.33.4"})
	if !sdk.IsPermanent(err) {
		t.Fatalf("err = %v, want a permanent error", err)
	}
	if _, err := os.Stat(filepath.Join(opts.StateDir, "clusters", "c1")); !os.IsNotExist(err) {
		t.Errorf("a refused create left a directory: %v", err)
	}
}

func TestOptionsReportEveryProblem(t *testing.T) {
	err := process.Options{NodeBinary: "/nonexistent/capn-node", StateDir: "relative", WatchEvery: time.Nanosecond, HealthPort: 70000}.Validate()
	for _, want := range []string{"--process-node-binary", "--process-state-dir", "--process-watch-every", "--process-health-port"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v does not name %s", err, want)
		}
	}
	if err := (process.Options{NodeBinary: nodeBinary, StateDir: t.TempDir()}).Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

func TestPurgeStopsEverything(t *testing.T) {
	p, opts := newProvider(t, nil)
	create(t, p, "c1", "m1")
	if _, err := p.EnsureCluster(context.Background(), "c1", nil); err != nil {
		t.Fatal(err)
	}
	if n := len(nodeProcesses(opts.StateDir, "c1")); n != 2 {
		t.Fatalf("%d processes, want the machine and the endpoint", n)
	}
	// A pid file lost in a crash: Purge still finds the process, by its
	// working directory in the state dir.
	if err := os.Remove(filepath.Join(machineDir(opts.StateDir, "c1", "m1"), "pid")); err != nil {
		t.Fatal(err)
	}
	if err := process.Purge(opts); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, "no process left", func() bool { return len(nodeProcesses(opts.StateDir, "c1")) == 0 })
	if _, err := os.Stat(opts.StateDir); !os.IsNotExist(err) {
		t.Errorf("state dir left: %v", err)
	}
}

// The provider as its own program, killed with SIGKILL and started again:
// the machines run on, are read back with the same processes, and a
// machine killed afterwards (no longer this provider's child) is still
// reported Gone.
func TestMachinesOutliveTheProviderProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the provider program")
	}
	dir, err := buildProvider()
	if err != nil {
		t.Fatal(err)
	}
	env := sdktest.New(t)
	env.AnswerCredentials(process.Name, "test-credential")
	state := t.TempDir()
	t.Cleanup(func() {
		_ = process.Purge(process.Options{NodeBinary: filepath.Join(dir, "capn-node"), StateDir: state})
	})
	start := func() *exec.Cmd {
		cmd := exec.Command(filepath.Join(dir, "capn-provider-process"), "--nats-url="+env.Server.URL(), "--http-addr=off",
			"--process-state-dir="+state, "--process-watch-every=100ms", "--provider-reconcile-every=300ms", "--provider-announce-every=200ms")
		cmd.Env = []string{"CAPN_LOG_LEVEL=warn"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		natstest.WaitFor(t, 10*time.Second, "the provider's announcement", func() bool {
			a, ok := env.Announcement(process.Name)
			return ok && sdk.Alive(a, time.Now()) && strings.HasSuffix(a.GetInstance(), "-"+strconv.Itoa(cmd.Process.Pid))
		})
		return cmd
	}
	send := func(machine, id string) {
		env.Send(process.Name, sdk.KindMachine, "create", id, &capnv1.CreateMachine{
			Cluster: "c1", Machine: machine, Version: "v1.33.4", BootstrapChecksum: "sha256:00"})
	}
	provider := start()
	send("m1", "create-m1")
	send("m2", "create-m2")
	before := map[string]*capnv1.InfraMachine{}
	pids := map[string]string{}
	for _, m := range []string{"m1", "m2"} {
		before[m] = env.WaitState(process.Name, "c1", m, sdk.StateRunning)
		b, _ := os.ReadFile(filepath.Join(machineDir(state, "c1", m), "pid"))
		pids[m] = string(b)
	}
	// Kill only once both creates are acked: a command in flight at the
	// kill would wait out the consumer's 30s AckWait before redelivery.
	env.WaitDrained()
	if err := provider.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = provider.Wait()

	start()
	send("m1", "create-m1-redelivered")
	env.WaitDrained()
	for _, m := range []string{"m1", "m2"} {
		now, _ := env.Machine(process.Name, "c1", m)
		b, _ := os.ReadFile(filepath.Join(machineDir(state, "c1", m), "pid"))
		if now.GetStateValue() != sdk.StateRunning || now.GetProviderId() != before[m].GetProviderId() || string(b) != pids[m] {
			t.Errorf("%s after the provider's restart: %v, pid %q (was %q)", m, now, b, pids[m])
		}
	}
	killNode(t, state, "c1", "m2")
	env.WaitDrift("c1", "m2", sdk.DriftGone)
	env.WaitState(process.Name, "c1", "m2", sdk.StateDeleted)
	if n := len(nodeProcesses(state, "c1")); n != 1 {
		t.Errorf("%d node processes, want m1's", n)
	}
}

func buildProvider() (string, error) {
	dir := filepath.Dir(nodeBinary)
	if _, err := os.Stat(filepath.Join(dir, "capn-provider-process")); err == nil {
		return dir, nil
	}
	cmd := exec.Command("go", "build", "-o", dir+"/", "github.com/capn-dev/capn/cmd/capn-provider-process")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v: %s", err, out)
	}
	return dir, nil
}

var _ daemon.Service = (*process.Service)(nil)
