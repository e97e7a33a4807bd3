package process

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procRef names one OS process for good: a pid alone may be reused after
// the process exits, so its start time (clock ticks after boot, field 22
// of /proc/<pid>/stat) is kept with it.
type procRef struct {
	PID   int
	Start uint64
}

func (r procRef) String() string { return fmt.Sprintf("%d %d", r.PID, r.Start) }

func parseRef(s string) (procRef, error) {
	var r procRef
	if _, err := fmt.Sscanf(strings.TrimSpace(s), "%d %d", &r.PID, &r.Start); err != nil || r.PID <= 0 {
		return procRef{}, fmt.Errorf("pid file %q: want \"<pid> <start time>\"", strings.TrimSpace(s))
	}
	return r, nil
}

// procStat reads the state letter and start time of pid.
func procStat(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// comm (field 2) is in parentheses and may hold spaces or ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, 0, errors.New("malformed stat")
	}
	start, err = strconv.ParseUint(f[19], 10, 64) // field 22 overall
	return f[0][0], start, err
}

// refOf is the procRef of a running pid.
func refOf(pid int) (procRef, error) {
	_, start, err := procStat(pid)
	if err != nil {
		return procRef{}, err
	}
	return procRef{PID: pid, Start: start}, nil
}

// cmdline is the argv of pid.
func cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), nil
}

// alive reports whether r is still the process it was, not a zombie, and
// that its argv starts with want (the executable's base name compared):
// a pid reused by anything else, or by another machine's agent, is never
// taken for this machine's.
func alive(r procRef, want []string) bool {
	state, start, err := procStat(r.PID)
	if err != nil || start != r.Start || state == 'Z' || state == 'X' {
		return false
	}
	got, err := cmdline(r.PID)
	if err != nil || len(got) < len(want) {
		return false
	}
	for i := range want {
		a, b := got[i], want[i]
		if i == 0 {
			a, b = filepath.Base(a), filepath.Base(b)
		}
		if a != b {
			return false
		}
	}
	return true
}

// terminate sends SIGTERM to r (if it is still alive as want), waits up
// to grace for it to go, then SIGKILLs it and waits for it to be gone or
// reaped. exited, when not nil, is closed when this process's own child
// was reaped. It returns an error only if the process survives SIGKILL.
func terminate(r procRef, want []string, grace time.Duration, exited <-chan struct{}) error {
	if !alive(r, want) {
		return nil
	}
	_ = syscall.Kill(r.PID, syscall.SIGTERM)
	if waitGone(r, want, grace, exited) {
		return nil
	}
	_ = syscall.Kill(r.PID, syscall.SIGKILL)
	if waitGone(r, want, 5*time.Second, exited) {
		return nil
	}
	return fmt.Errorf("process %d did not exit after SIGKILL", r.PID)
}

func waitGone(r procRef, want []string, d time.Duration, exited <-chan struct{}) bool {
	gone, exitedFirst := until(d, 10*time.Millisecond, exited, func() bool { return !alive(r, want) }) // gone, or a zombie its parent reaps
	return gone || exitedFirst
}

// waitExecuted waits (up to 5s) until r's argv is visible in /proc, i.e.
// its exec finished.
func waitExecuted(r procRef, exited <-chan struct{}) error {
	ok, exitedFirst := until(5*time.Second, time.Millisecond, exited, func() bool {
		args, err := cmdline(r.PID)
		return err == nil && len(args) > 0 && args[0] != ""
	})
	switch {
	case ok:
		return nil
	case exitedFirst:
		return errors.New("it exited at once")
	}
	return errors.New("its command line did not show in /proc within 5s")
}

// until checks cond at once and then every interval until it holds (ok),
// exited closes first (a nil channel never does), or d passes.
func until(d, every time.Duration, exited <-chan struct{}, cond func() bool) (ok, exitedFirst bool) {
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if cond() {
			return true, false
		}
		select {
		case <-exited:
			return false, true
		case <-timeout.C:
			return false, false
		case <-tick.C:
		}
	}
}
