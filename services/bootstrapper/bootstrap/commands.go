package bootstrap

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Command timeouts (BootstrapSpec.commandTimeout).
const (
	// DefaultCommandTimeout bounds each pre- and post-command when the
	// spec sets none.
	DefaultCommandTimeout = 5 * time.Minute
	// MinCommandTimeout and MaxCommandTimeout bound what a spec may set.
	MinCommandTimeout = time.Second
	MaxCommandTimeout = 24 * time.Hour
	// CommandKillAfter is how long a command that outlived its timeout
	// gets after SIGTERM before SIGKILL.
	CommandKillAfter = 10 * time.Second
)

// CommandTimeout is spec's commandTimeout, or DefaultCommandTimeout.
func CommandTimeout(spec *capnv1.BootstrapSpec) time.Duration {
	if d := spec.GetCommandTimeout(); d != nil && d.AsDuration() > 0 {
		return d.AsDuration()
	}
	return DefaultCommandTimeout
}

// TimeoutSeconds is d in whole seconds, rounded up (coreutils timeout and
// PowerShell take seconds).
func TimeoutSeconds(d time.Duration) int64 {
	return int64(math.Ceil(d.Seconds()))
}

// TimeoutArgv is how a Linux bootstrap runs one user command: in a shell
// of its own, bounded by coreutils timeout (SIGTERM at d, SIGKILL
// CommandKillAfter later):
//
//	timeout --kill-after=10s 300s /bin/sh -c '<command>'
//
// cloud-init writes a runcmd list entry as those words, shell-quoted, so
// the command reaches sh as it was written. capn-node reads the same words
// back with ParseTimeoutArgv and runs the command itself.
func TimeoutArgv(command string, d time.Duration) []string {
	return []string{"timeout", fmt.Sprintf("--kill-after=%ds", TimeoutSeconds(CommandKillAfter)),
		fmt.Sprintf("%ds", TimeoutSeconds(d)), "/bin/sh", "-c", command}
}

// ParseTimeoutArgv reads TimeoutArgv's words back: the command and its
// timeout. ok is false for any other list.
func ParseTimeoutArgv(argv []string) (command string, d time.Duration, ok bool) {
	if len(argv) != 6 || argv[0] != "timeout" || !strings.HasPrefix(argv[1], "--kill-after=") || argv[3] != "/bin/sh" || argv[4] != "-c" {
		return "", 0, false
	}
	secs, ok := strings.CutSuffix(argv[2], "s")
	if !ok {
		return "", 0, false
	}
	n, err := strconv.ParseInt(secs, 10, 64)
	if err != nil || n <= 0 || n > int64(MaxCommandTimeout/time.Second) {
		return "", 0, false
	}
	return argv[5], time.Duration(n) * time.Second, true
}
