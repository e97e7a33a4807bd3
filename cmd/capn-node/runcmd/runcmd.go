// Package runcmd runs a machine's bootstrap commands for capn-node: the
// user's preCommands and postCommands, whichever bootstrap provider
// rendered them (kubeadm's runcmd, kube-local's node config). It is the one
// runner of both paths.
//
//	Run(command) ─► /bin/sh -c <command> in its own process group,
//	                cwd and $CAPN_ROOT = the machine's root
//	             ─► every output line to the machine's log (and the
//	                command log), the last lines kept
//	             ─► timeout: SIGTERM to the group, SIGKILL KillAfter later
//	             ─► Result: exit code, timed out, duration, output tails
//
// A command is run once; what happens on failure is the caller's (the
// agent stops at the first failure and reports it).
package runcmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Defaults of Runner.
const (
	DefaultTailLines = 10
	DefaultKillAfter = 10 * time.Second
	// maxLine bounds one line of output kept or logged; a longer one is
	// cut (and says so).
	maxLine = 4096
)

// Command is one command to run.
type Command struct {
	// Name says where it comes from: preCommands[0], postCommands[2].
	Name string `json:"name"`
	// Line is the shell command, as the user wrote it.
	Line string `json:"line"`
	// Timeout bounds the run (0: none).
	Timeout time.Duration `json:"timeout"`
}

// Result is what a run came to.
type Result struct {
	Command Command
	// ExitCode is the command's exit status; -1 when it did not exit by
	// itself (killed by a signal, timed out, never started).
	ExitCode int
	// TimedOut: the timeout passed and the command was killed.
	TimedOut bool
	// StartErr: the command could not be started (no shell here).
	StartErr error
	Duration time.Duration
	// Stdout and Stderr are the last lines of each (at most TailLines).
	Stdout, Stderr []string
}

// OK is true when the command exited 0 in time.
func (r Result) OK() bool { return r.StartErr == nil && !r.TimedOut && r.ExitCode == 0 }

// Message says what happened in one paragraph: the command, how it ended
// and the tail of its stderr (of its stdout when it succeeded).
func (r Result) Message() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s `%s`", r.Command.Name, oneLine(r.Command.Line))
	switch {
	case r.StartErr != nil:
		fmt.Fprintf(&b, " could not be started: %v", r.StartErr)
		return b.String()
	case r.TimedOut:
		fmt.Fprintf(&b, " timed out after %s (commandTimeout) and was killed", r.Command.Timeout)
	case r.ExitCode < 0:
		fmt.Fprintf(&b, " was killed after %s", r.Duration.Round(time.Millisecond))
	case r.ExitCode != 0:
		fmt.Fprintf(&b, " exited with code %d after %s", r.ExitCode, r.Duration.Round(time.Millisecond))
	default:
		fmt.Fprintf(&b, " succeeded in %s", r.Duration.Round(time.Millisecond))
	}
	tail, what := r.Stderr, "stderr"
	if r.OK() || len(tail) == 0 {
		tail, what = r.Stdout, "stdout"
		if !r.OK() && len(tail) == 0 {
			return b.String() + "; no output"
		}
	}
	if len(tail) > 0 {
		fmt.Fprintf(&b, "; %s (last %d lines): %s", what, len(tail), strings.Join(tail, "\n"))
	}
	return b.String()
}

func oneLine(s string) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// Runner runs commands. The zero value runs with /bin/sh in the current
// directory and the default tails; it is safe for one Run at a time.
type Runner struct {
	// Shell is the interpreter and its flag before the command (default
	// /bin/sh -c).
	Shell []string
	// Dir is the working directory (default: the agent's).
	Dir string
	// Env is added to the agent's environment.
	Env []string
	// Log gets every output line (info) and each start and end.
	Log zerolog.Logger
	// Output, when set, gets every output line as "<name> <stream>: <line>".
	Output io.Writer
	// TailLines is how many last lines of each stream a Result keeps
	// (default 10).
	TailLines int
	// KillAfter is how long a timed-out command has between SIGTERM and
	// SIGKILL (default 10s).
	KillAfter time.Duration
}

// Run runs c and waits for it. A ctx that ends kills the command as a
// timeout does (the Result then says it was killed).
func (r *Runner) Run(ctx context.Context, c Command) Result {
	shell := r.Shell
	if len(shell) == 0 {
		shell = []string{"/bin/sh", "-c"}
	}
	tailN := r.TailLines
	if tailN <= 0 {
		tailN = DefaultTailLines
	}
	killAfter := r.KillAfter
	if killAfter <= 0 {
		killAfter = DefaultKillAfter
	}
	res := Result{Command: c, ExitCode: -1}
	log := r.Log.With().Str("command", c.Name).Logger()

	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if c.Timeout > 0 {
		runCtx, cancel = context.WithTimeout(ctx, c.Timeout)
	}
	defer cancel()

	cmd := exec.Command(shell[0], append(shell[1:], c.Line)...)
	cmd.Dir = r.Dir
	cmd.Env = append(os.Environ(), r.Env...)
	cmd.SysProcAttr = sysProcAttr()
	// Plain pipes, not StdoutPipe: Wait must not wait for (or close)
	// them, so that a command that leaves a child holding its output
	// ends when it exits; the child is killed with the group.
	outR, outW, err := os.Pipe()
	if err != nil {
		res.StartErr = err
		return res
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		res.StartErr = err
		return res
	}
	defer errR.Close()
	cmd.Stdout, cmd.Stderr = outW, errW
	log.Info().Str("line", oneLine(c.Line)).Dur("timeout", c.Timeout).Msg("running bootstrap command")
	start := time.Now()
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		res.StartErr = err
		log.Error().Err(err).Msg("bootstrap command not started")
		return res
	}
	var (
		wg         sync.WaitGroup
		outT, errT = newTail(tailN), newTail(tailN)
		outMu      sync.Mutex // Output is written from both streams
	)
	copyLines := func(rd io.Reader, stream string, t *tail) {
		defer wg.Done()
		sc := bufio.NewScanner(rd)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			if len(line) > maxLine {
				line = line[:maxLine] + " …(cut)"
			}
			t.add(line)
			log.Info().Str("stream", stream).Msg(line)
			if r.Output != nil {
				outMu.Lock()
				fmt.Fprintf(r.Output, "%s %s: %s\n", c.Name, stream, line)
				outMu.Unlock()
			}
		}
		// A line longer than the scanner's buffer ends the scan: drain
		// the rest so the command never blocks on a full pipe.
		_, _ = io.Copy(io.Discard, rd)
	}
	wg.Add(2)
	go copyLines(outR, "stdout", outT)
	go copyLines(errR, "stderr", errT)

	done := make(chan struct{})
	killed := make(chan bool, 1)
	go func() {
		select {
		case <-done:
			killed <- false
		case <-runCtx.Done():
			pid := cmd.Process.Pid
			log.Warn().Dur("kill_after", killAfter).Msg("bootstrap command timed out: SIGTERM to its process group")
			_ = syscall.Kill(-pid, syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(killAfter):
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
			killed <- true
		}
	}()
	werr := cmd.Wait()
	res.Duration = time.Since(start)
	close(done)
	wasKilled := <-killed
	// The group may hold what the command left running in the
	// background: nothing outlives its command, and its output ends.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	wg.Wait()
	res.Stdout, res.Stderr = outT.lines(), errT.lines()
	var ee *exec.ExitError
	switch {
	case werr == nil:
		res.ExitCode = 0
	case errors.As(werr, &ee) && ee.ExitCode() >= 0:
		res.ExitCode = ee.ExitCode()
	}
	if wasKilled {
		res.TimedOut = errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		res.ExitCode = -1
	}
	ev := log.Info()
	if !res.OK() {
		ev = log.Error()
	}
	ev.Int("exit_code", res.ExitCode).Bool("timed_out", res.TimedOut).Dur("duration", res.Duration).Msg("bootstrap command ended")
	return res
}

// tail keeps the last n lines.
type tail struct {
	mu   sync.Mutex
	n    int
	buf  []string
	seen int
}

func newTail(n int) *tail { return &tail{n: n} }

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen++
	t.buf = append(t.buf, line)
	if len(t.buf) > t.n {
		t.buf = t.buf[len(t.buf)-t.n:]
	}
}

func (t *tail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.buf...)
}
