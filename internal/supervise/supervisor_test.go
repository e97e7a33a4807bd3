package supervise_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/internal/supervise"
	"github.com/capn-dev/capn/internal/testkit"
)

// The /proc helpers are testkit's.
type proc = testkit.Proc

func processes(t testing.TB) []proc { return testkit.Processes(t) }

func alive(t testing.TB, pid int) bool { return testkit.Alive(t, pid) }

func requireLinux(t *testing.T) { testkit.RequireLinux(t) }

func newSupervisor(t *testing.T) *supervise.Supervisor {
	s := &supervise.Supervisor{LogDir: t.TempDir(), Log: zerolog.Nop(), BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, StopGrace: 2 * time.Second}
	t.Cleanup(s.Stop)
	return s
}

func status(s *supervise.Supervisor, name string) supervise.Status {
	for _, st := range s.Status() {
		if st.Name == name {
			return st
		}
	}
	return supervise.Status{}
}

var startLine = regexp.MustCompile(`(?m)^=== supervise: start #(\d+) of \S+ at (\S+):`)

func TestSupervisorRestartsWithCappedBackoff(t *testing.T) {
	s := newSupervisor(t)
	if err := s.Start(supervise.Process{Name: "flaky", Path: "/bin/sh", Args: []string{"-c", "echo run; exit 3"}}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "9 starts", func() bool { return status(s, "flaky").Starts >= 9 })
	s.Stop()
	if st := status(s, "flaky"); st.PID != 0 || st.Starts < 9 {
		t.Errorf("status %+v", st)
	}
	log, err := os.ReadFile(s.LogPath("flaky"))
	if err != nil {
		t.Fatal(err)
	}
	// The last run may have been stopped before it printed.
	if strings.Count(string(log), "\nrun\n") < 8 || strings.Count(string(log), "=== supervise: flaky exited with status 3\n") < 8 {
		t.Errorf("log:\n%s", log)
	}
	var starts []time.Time
	for _, m := range startLine.FindAllStringSubmatch(string(log), -1) {
		at, err := time.Parse(time.RFC3339Nano, m[2])
		if err != nil {
			t.Fatal(err)
		}
		starts = append(starts, at)
	}
	// Uncapped, the 8th wait would be 10ms·2^7 = 1.28s; capped it is 50ms
	// plus the time a shell takes to start and exit.
	for i := 6; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap > 900*time.Millisecond {
			t.Errorf("gap before start #%d is %s: backoff not capped at 50ms", i+1, gap)
		}
	}
}

func TestSupervisorStopsTheWholeGroup(t *testing.T) {
	requireLinux(t)
	s := newSupervisor(t)
	s.StopGrace = 300 * time.Millisecond
	// A child that ignores SIGTERM and has a child of its own (which
	// inherits the ignored SIGTERM).
	if err := s.Start(supervise.Process{Name: "stubborn", Path: "/bin/sh", Args: []string{"-c", `trap "" TERM; sleep 1000 & wait`}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(supervise.Process{Name: "polite", Path: "/bin/sleep", Args: []string{"1000"}}); err != nil {
		t.Fatal(err)
	}
	var leader, grandchild int
	testkit.WaitFor(t, 10*time.Second, "the stubborn child's sleep", func() bool {
		leader = status(s, "stubborn").PID
		for _, p := range processes(t) {
			if leader != 0 && p.PGID == leader && p.PID != leader && strings.HasPrefix(p.Cmdline, "sleep") {
				grandchild = p.PID
				return true
			}
		}
		return false
	})
	polite := status(s, "polite").PID
	if polite == 0 || !alive(t, polite) {
		t.Fatal("polite child not running")
	}
	began := time.Now()
	s.Stop()
	took := time.Since(began)
	for _, pid := range []int{leader, grandchild, polite} {
		// The children are waited for; the grandchild is not, and a
		// SIGKILL sent to its group takes effect when it is next
		// scheduled — on a loaded machine a moment after Stop returned.
		if testkit.Poll(2*time.Second, 10*time.Millisecond, func() error {
			if alive(t, pid) {
				return errors.New("alive")
			}
			return nil
		}) != nil {
			t.Errorf("pid %d still running 2s after Stop", pid)
		}
	}
	if took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("Stop took %s, want the 300ms grace then SIGKILL", took)
	}
	if st := status(s, "polite"); st.LastExit != "killed by terminated" {
		t.Errorf("polite: %+v", st)
	}
	if st := status(s, "stubborn"); st.LastExit != "killed by killed" {
		t.Errorf("stubborn: %+v", st)
	}
	if err := s.Start(supervise.Process{Name: "late", Path: "/bin/true"}); !errors.Is(err, supervise.ErrStopped) {
		t.Errorf("Start after Stop: %v", err)
	}
}

func TestSupervisorMissingBinary(t *testing.T) {
	s := newSupervisor(t)
	if err := s.Start(supervise.Process{Name: "ghost", Path: "/nonexistent/ghost"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(supervise.Process{Name: "ghost", Path: "/bin/true"}); err == nil {
		t.Error("a second child of the same name was accepted")
	}
	testkit.WaitFor(t, 10*time.Second, "3 attempts", func() bool { return status(s, "ghost").Starts >= 3 })
	if st := status(s, "ghost"); !strings.Contains(st.LastExit, "no such file or directory") {
		t.Errorf("status %+v", st)
	}
	s.Stop()
}

// TestSupervisorHelper is not a test: TestSupervisorChildrenDieWithTheAgent
// runs the test binary in this mode as a stand-in agent.
func TestSupervisorHelper(t *testing.T) {
	dir := os.Getenv("CAPN_KUBE_SUPERVISOR_HELPER")
	if dir == "" {
		return
	}
	s := &supervise.Supervisor{LogDir: dir, Log: zerolog.Nop()}
	if err := s.Start(supervise.Process{Name: "sleeper", Path: "/bin/sleep", Args: []string{"1000"}}); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	testkit.WaitFor(t, 10*time.Second, "the sleeper started", func() bool { return status(s, "sleeper").PID != 0 })
	fmt.Println("pid", status(s, "sleeper").PID)
	select {}
}

func TestSupervisorChildrenDieWithTheAgent(t *testing.T) {
	requireLinux(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestSupervisorHelper$", "-test.timeout=60s")
	cmd.Env = append(os.Environ(), "CAPN_KUBE_SUPERVISOR_HELPER="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	var child int
	if _, err := fmt.Sscanf(line, "pid %d", &child); err != nil {
		t.Fatalf("helper said %q", line)
	}
	if !alive(t, child) {
		t.Fatal("the helper's child is not running")
	}
	// Should the kernel not do it, the test still leaves nothing behind.
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	// kill -9: no cleanup runs in the agent; the kernel must do it.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	testkit.WaitFor(t, 5*time.Second, fmt.Sprintf("pid %d to die with its agent", child), func() bool { return !alive(t, child) })
}

// Halt stops the named children (what an etcd restore does to the whole
// control plane), forgets them and hands back their processes, in start
// order, to be started again; the others keep running.
func TestSupervisorHalt(t *testing.T) {
	requireLinux(t)
	s := newSupervisor(t)
	for _, n := range []string{"etcd", "apiserver", "kwok"} {
		if err := s.Start(supervise.Process{Name: n, Path: "/bin/sleep", Args: []string{"1000"}}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "three children running", func() bool {
		return status(s, "etcd").PID != 0 && status(s, "apiserver").PID != 0 && status(s, "kwok").PID != 0
	})
	etcd, kwok := status(s, "etcd").PID, status(s, "kwok").PID
	halted := s.Halt("kwok", "etcd")
	if len(halted) != 2 || halted[0].Name != "etcd" || halted[1].Name != "kwok" {
		t.Fatalf("halted %+v, want etcd then kwok", halted)
	}
	for _, pid := range []int{etcd, kwok} {
		if testkit.Poll(2*time.Second, 10*time.Millisecond, func() error {
			if alive(t, pid) {
				return errors.New("alive")
			}
			return nil
		}) != nil {
			t.Errorf("pid %d still running after Halt", pid)
		}
	}
	if st := s.Status(); len(st) != 1 || st[0].Name != "apiserver" || st[0].PID == 0 {
		t.Errorf("after Halt: %+v, want apiserver alone, running", st)
	}
	for _, p := range halted {
		if err := s.Start(p); err != nil {
			t.Fatalf("start %s again: %v", p.Name, err)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "etcd and kwok running again", func() bool {
		return status(s, "etcd").PID != 0 && status(s, "kwok").PID != 0
	})
	if all := s.Halt(); len(all) != 3 || len(s.Status()) != 0 {
		t.Errorf("Halt of every child: %d halted, %d left", len(all), len(s.Status()))
	}
}
