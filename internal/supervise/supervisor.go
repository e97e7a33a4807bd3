// Package supervise runs child processes and keeps them running: each in
// its own process group, restarted with capped exponential backoff when it
// exits, its output in <LogDir>/<name>.log, stopped in the reverse order
// of start (SIGTERM to the group, SIGKILL after a grace). The node agent's
// kube-local runtime (cmd/capn-node/kube) and the hosted control planes
// (services/controlplane-hosted) both run etcd and the Kubernetes
// components with it.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Process is one supervised child: a binary and its arguments.
type Process struct {
	Name string
	Path string
	Args []string
	// Env is the child's whole environment (nothing is inherited from the
	// supervisor, so no stray ETCD_* or KUBECONFIG reaches a component).
	Env []string
}

// Supervisor defaults.
const (
	DefaultBackoffMin = 500 * time.Millisecond
	DefaultBackoffMax = 30 * time.Second
	// DefaultStableAfter: a child that ran this long before exiting is
	// restarted after BackoffMin again, not after the grown backoff.
	DefaultStableAfter = time.Minute
	// DefaultStopGrace is how long a child has between SIGTERM and SIGKILL.
	DefaultStopGrace = 10 * time.Second
)

// Supervisor runs children, each in its own process group, restarts them
// with capped exponential backoff when they exit, writes their output to
// <LogDir>/<name>.log, and stops them all — SIGTERM to the group, SIGKILL
// after StopGrace — in the reverse order of Start. On Linux a child also
// gets SIGKILL from the kernel when the agent dies (Pdeathsig), so a kill
// -9 of the agent leaves nothing running.
type Supervisor struct {
	LogDir      string
	Log         zerolog.Logger
	BackoffMin  time.Duration
	BackoffMax  time.Duration
	StableAfter time.Duration
	StopGrace   time.Duration

	mu       sync.Mutex
	children []*child
	stopped  bool
}

type child struct {
	p        Process
	cancel   context.CancelFunc
	done     chan struct{}
	mu       sync.Mutex
	pid      int
	starts   int
	lastExit string
}

func (s *Supervisor) defaults() {
	if s.BackoffMin <= 0 {
		s.BackoffMin = DefaultBackoffMin
	}
	if s.BackoffMax <= 0 {
		s.BackoffMax = DefaultBackoffMax
	}
	if s.StableAfter <= 0 {
		s.StableAfter = DefaultStableAfter
	}
	if s.StopGrace <= 0 {
		s.StopGrace = DefaultStopGrace
	}
}

// ErrStopped is Start after Stop.
var ErrStopped = errors.New("supervisor stopped")

// Start runs p until Stop. A child that cannot be started (a missing
// binary) is retried with the same backoff as one that exits.
func (s *Supervisor) Start(p Process) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	s.defaults()
	for _, c := range s.children {
		if c.p.Name == p.Name {
			return fmt.Errorf("child %s already started", p.Name)
		}
	}
	if err := os.MkdirAll(s.LogDir, 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &child{p: p, cancel: cancel, done: make(chan struct{})}
	s.children = append(s.children, c)
	go s.run(ctx, c)
	return nil
}

// Stop stops every child, the last started first, and waits for each to
// be gone. It is safe to call more than once.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	s.stopped = true
	children := s.children
	s.mu.Unlock()
	for i := len(children) - 1; i >= 0; i-- {
		children[i].cancel()
		<-children[i].done
	}
}

// Halt stops the children named (every one when none is named), the last
// started first, forgets them, and returns their processes in start order
// so that they can be started again (an etcd restore stops the whole
// control plane). Children not running are skipped.
func (s *Supervisor) Halt(names ...string) []Process {
	s.mu.Lock()
	var halted []*child
	kept := s.children[:0:0]
	for _, c := range s.children {
		if len(names) == 0 || slices.Contains(names, c.p.Name) {
			halted = append(halted, c)
		} else {
			kept = append(kept, c)
		}
	}
	s.children = kept
	s.mu.Unlock()
	out := make([]Process, len(halted))
	for i := len(halted) - 1; i >= 0; i-- {
		halted[i].cancel()
		<-halted[i].done
		out[i] = halted[i].p
	}
	return out
}

// Status of one child.
type Status struct {
	Name string
	// PID is the running process's, 0 between runs.
	PID int
	// Starts counts the processes started (1 + restarts).
	Starts int
	// LastExit describes how the previous process ended ("" if none).
	LastExit string
}

// Status lists every child in start order.
func (s *Supervisor) Status() []Status {
	s.mu.Lock()
	children := s.children
	s.mu.Unlock()
	out := make([]Status, len(children))
	for i, c := range children {
		c.mu.Lock()
		out[i] = Status{Name: c.p.Name, PID: c.pid, Starts: c.starts, LastExit: c.lastExit}
		c.mu.Unlock()
	}
	return out
}

// LogPath is where the output of the child called name goes.
func (s *Supervisor) LogPath(name string) string { return filepath.Join(s.LogDir, name+".log") }

func (s *Supervisor) run(ctx context.Context, c *child) {
	defer close(c.done)
	log := s.Log.With().Str("child", c.p.Name).Logger()
	wait := s.BackoffMin
	for {
		began := time.Now()
		err := s.runOnce(ctx, c, log)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) >= s.StableAfter {
			wait = s.BackoffMin
		}
		log.Warn().Err(err).Dur("restart_in", wait).Str("log", s.LogPath(c.p.Name)).Msg("child exited; restarting")
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(wait*2, s.BackoffMax)
	}
}

// runOnce starts the process and waits for it to exit or ctx to end (then
// stops it). The error says how it ended.
func (s *Supervisor) runOnce(ctx context.Context, c *child, log zerolog.Logger) error {
	out, err := os.OpenFile(s.LogPath(c.p.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	c.mu.Lock()
	c.starts++
	n := c.starts
	c.mu.Unlock()
	fmt.Fprintf(out, "=== supervise: start #%d of %s at %s: %s %s\n", n, c.p.Name, time.Now().UTC().Format(time.RFC3339Nano), c.p.Path, strings.Join(c.p.Args, " "))
	cmd := exec.Command(c.p.Path, c.p.Args...)
	cmd.Env = c.p.Env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		c.setExit(err.Error())
		fmt.Fprintf(out, "=== supervise: cannot start: %v\n", err)
		return err
	}
	c.mu.Lock()
	c.pid = cmd.Process.Pid
	c.mu.Unlock()
	log.Info().Int("pid", cmd.Process.Pid).Int("start", n).Msg("child started")
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		c.setExit(describe(err))
		fmt.Fprintf(out, "=== supervise: %s %s\n", c.p.Name, describe(err))
		return fmt.Errorf("%s %s", c.p.Name, describe(err))
	case <-ctx.Done():
	}
	pid := cmd.Process.Pid
	// The whole group: a component's own children go too.
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	var err2 error
	select {
	case err2 = <-exited:
	case <-time.After(s.StopGrace):
		log.Warn().Int("pid", pid).Dur("grace", s.StopGrace).Msg("child ignored SIGTERM; killing it")
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		err2 = <-exited
	}
	// Anything left in the group after the leader exited.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	c.setExit(describe(err2))
	fmt.Fprintf(out, "=== supervise: stopped %s: %s\n", c.p.Name, describe(err2))
	log.Info().Int("pid", pid).Str("exit", describe(err2)).Msg("child stopped")
	return nil
}

func (c *child) setExit(s string) {
	c.mu.Lock()
	c.pid = 0
	c.lastExit = s
	c.mu.Unlock()
}

func describe(err error) string {
	if err == nil {
		return "exited with status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by " + ws.Signal().String()
		}
		return fmt.Sprintf("exited with status %d", ee.ExitCode())
	}
	return err.Error()
}
