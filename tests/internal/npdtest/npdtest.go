// Package npdtest is what capn's end-to-end tests share to run the real
// node-problem-detector (NPD) that hack/npd.sh builds: where the binary
// is, its kernel monitor on a plain log file, and the kernel lines that
// monitor reads.
package npdtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Version is the NPD release hack/npd.sh builds (NPD_VERSION in the
// Makefile, which exports CAPN_NPD_BIN).
const Version = "v1.36.0"

// Binary finds NPD: $CAPN_NPD_BIN, or
// ${CAPN_NPD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/npd}/<version>/node-problem-detector.
// Without it the test is skipped — except in CI (CI=true), where it
// fails: CI builds it first (make npd).
func Binary(t testing.TB) string {
	t.Helper()
	path := os.Getenv("CAPN_NPD_BIN")
	if path == "" {
		cache := os.Getenv("CAPN_NPD_CACHE")
		if cache == "" {
			base := os.Getenv("XDG_CACHE_HOME")
			if base == "" {
				home, _ := os.UserHomeDir()
				base = filepath.Join(home, ".cache")
			}
			cache = filepath.Join(base, "capn", "npd")
		}
		path = filepath.Join(cache, Version, "node-problem-detector")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&0o111 == 0 {
		msg := fmt.Sprintf("node-problem-detector %s not found at %s: build it with `make npd` (hack/npd.sh)", Version, path)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// kernelMonitor is NPD's upstream config/kernel-monitor-filelog.json with
// logPath pointing at the test's log file.
const kernelMonitor = `{
  "plugin": "filelog",
  "pluginConfig": {"timestamp": "^.{15}", "message": "kernel: \\[.*\\] (.*)", "timestampFormat": "Jan _2 15:04:05"},
  "logPath": %q,
  "lookback": "5m",
  "bufferSize": 10,
  "source": "kernel-monitor",
  "conditions": [{"type": "KernelDeadlock", "reason": "KernelHasNoDeadlock", "message": "kernel has no deadlock"}],
  "rules": [
    {"type": "temporary", "reason": "OOMKilling", "pattern": "Killed process \\d+ (.+) total-vm:\\d+kB, anon-rss:\\d+kB, file-rss:\\d+kB.*"},
    {"type": "temporary", "reason": "TaskHung", "pattern": "task \\S+:\\w+ blocked for more than \\w+ seconds\\."},
    {"type": "permanent", "condition": "KernelDeadlock", "reason": "DockerHung", "pattern": "task docker:\\w+ blocked for more than \\w+ seconds\\."}
  ]
}`

// KernelMonitor is the kernel monitor's config for the log at logPath.
func KernelMonitor(logPath string) []byte { return fmt.Appendf(nil, kernelMonitor, logPath) }

// KernelLine is a kernel log line of host, as syslog writes it and the
// kernel monitor reads it.
func KernelLine(host, msg string) string {
	return fmt.Sprintf("%s %s kernel: [12345.678901] %s\n", time.Now().Format("Jan _2 15:04:05"), host, msg)
}
