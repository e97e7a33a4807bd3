package runcmd_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/runcmd"
	"github.com/capn-dev/capn/internal/testkit"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	r := &runcmd.Runner{Dir: dir, Env: []string{"CAPN_ROOT=" + dir}, Output: &out, TailLines: 2, KillAfter: 200 * time.Millisecond}
	tests := []struct {
		name       string
		cmd        runcmd.Command
		ok         bool
		exit       int
		timedOut   bool
		stdout     []string
		stderr     []string
		msgHas     []string
		maxElapsed time.Duration
	}{
		{name: "succeeds", cmd: runcmd.Command{Name: "preCommands[0]", Line: "echo one; echo two; echo three; echo 'it''s' >&2", Timeout: 5 * time.Second},
			ok: true, stdout: []string{"two", "three"}, stderr: []string{"its"},
			msgHas: []string{"preCommands[0] `echo one; echo two;", "succeeded in", "stdout (last 2 lines): two\nthree"}},
		{name: "runs in the machine's root with its variables", cmd: runcmd.Command{Name: "preCommands[1]", Line: `pwd; echo "$CAPN_ROOT"`},
			ok: true, stdout: []string{dir, dir}},
		{name: "fails", cmd: runcmd.Command{Name: "postCommands[0]", Line: "echo partial; echo 'no disk' >&2; echo really >&2; exit 3", Timeout: 5 * time.Second},
			exit: 3, stdout: []string{"partial"}, stderr: []string{"no disk", "really"},
			msgHas: []string{"postCommands[0] `echo partial;", "exited with code 3 after", "stderr (last 2 lines): no disk\nreally"}},
		{name: "fails silently", cmd: runcmd.Command{Name: "x", Line: "false"}, exit: 1, msgHas: []string{"exited with code 1", "; no output"}},
		{name: "times out", cmd: runcmd.Command{Name: "preCommands[2]", Line: "echo started; exec sleep 30", Timeout: 300 * time.Millisecond},
			exit: -1, timedOut: true, stdout: []string{"started"}, maxElapsed: 10 * time.Second,
			msgHas: []string{"preCommands[2] `echo started; exec sleep 30` timed out after 300ms (commandTimeout) and was killed; stdout (last 1 lines): started"}},
		{name: "ignores SIGTERM: killed after KillAfter", cmd: runcmd.Command{Name: "y", Line: "trap '' TERM; echo trapped; while :; do sleep 1; done", Timeout: 300 * time.Millisecond},
			exit: -1, timedOut: true, stdout: []string{"trapped"}, maxElapsed: 10 * time.Second},
		{name: "a background child does not hold it", cmd: runcmd.Command{Name: "z", Line: "sleep 30 & echo left", Timeout: 20 * time.Second},
			ok: true, stdout: []string{"left"}, maxElapsed: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			res := r.Run(context.Background(), tt.cmd)
			if res.OK() != tt.ok || res.ExitCode != tt.exit || res.TimedOut != tt.timedOut || res.StartErr != nil {
				t.Fatalf("ok %v exit %d timed out %v start %v; want ok %v exit %d timed out %v (%s)",
					res.OK(), res.ExitCode, res.TimedOut, res.StartErr, tt.ok, tt.exit, tt.timedOut, res.Message())
			}
			if tt.stdout != nil && !slices.Equal(res.Stdout, tt.stdout) {
				t.Errorf("stdout tail %q, want %q", res.Stdout, tt.stdout)
			}
			if tt.stderr != nil && !slices.Equal(res.Stderr, tt.stderr) {
				t.Errorf("stderr tail %q, want %q", res.Stderr, tt.stderr)
			}
			for _, m := range tt.msgHas {
				if !strings.Contains(res.Message(), m) {
					t.Errorf("message %q lacks %q", res.Message(), m)
				}
			}
			if tt.maxElapsed > 0 && time.Since(start) > tt.maxElapsed {
				t.Errorf("took %s", time.Since(start))
			}
		})
	}
	if !strings.Contains(out.String(), "postCommands[0] stderr: no disk\n") || !strings.Contains(out.String(), "preCommands[0] stdout: one\n") {
		t.Errorf("command log:\n%s", out.String())
	}
}

// TestRunKillsWhatTheCommandStarted: a timed-out command's children die
// with it (its process group), so nothing it started outlives it.
func TestRunKillsWhatTheCommandStarted(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	r := &runcmd.Runner{KillAfter: 100 * time.Millisecond}
	res := r.Run(context.Background(), runcmd.Command{Name: "c", Line: "sleep 60 & echo $! > " + pidFile + "; wait", Timeout: 300 * time.Millisecond})
	if !res.TimedOut {
		t.Fatalf("not timed out: %s", res.Message())
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	proc := filepath.Join("/proc", strings.TrimSpace(string(b)))
	testkit.WaitFor(t, 5*time.Second, "the command's child to be gone", func() bool {
		st, err := os.ReadFile(filepath.Join(proc, "stat"))
		return err != nil || strings.Contains(string(st), ") Z ") // gone, or a zombie
	})
}

func TestRunWithoutAShell(t *testing.T) {
	r := &runcmd.Runner{Shell: []string{"/nonexistent/sh", "-c"}}
	res := r.Run(context.Background(), runcmd.Command{Name: "preCommands[0]", Line: "true"})
	if res.OK() || res.StartErr == nil || !strings.Contains(res.Message(), "preCommands[0] `true` could not be started: fork/exec /nonexistent/sh") {
		t.Fatalf("result %+v: %s", res, res.Message())
	}
}

func TestRunEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := (&runcmd.Runner{KillAfter: 100 * time.Millisecond}).Run(ctx, runcmd.Command{Name: "c", Line: "sleep 30", Timeout: time.Minute})
	if res.OK() || res.TimedOut || res.ExitCode != -1 || !strings.Contains(res.Message(), "was killed after") {
		t.Fatalf("result %+v: %s", res, res.Message())
	}
}
