package health

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
)

// NPDVersion is the node-problem-detector release the end-to-end test runs.
const NPDVersion = "v1.36.0"

// npdBinary finds the NPD binary hack/npd.sh builds: $CAPN_NPD_BIN, or
// ${CAPN_NPD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/npd}/<version>/node-problem-detector.
// Without it the test is skipped — except in CI (CI=true), where it fails:
// CI builds it first (make npd).
func npdBinary(t *testing.T) string {
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
		path = filepath.Join(cache, NPDVersion, "node-problem-detector")
	}
	if _, err := os.Stat(path); err != nil {
		msg := fmt.Sprintf("node-problem-detector %s not found at %s: build it with `make npd` (hack/npd.sh)", NPDVersion, path)
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

// TestRealNPDKernelDeadlock runs the real node-problem-detector binary on
// a log file, standalone (no Kubernetes), with capn-npd-bridge scraping
// it: a kernel "task docker:1234 blocked for more than 120 seconds." line
// makes KernelDeadlock True, and the machine is rebooted, then replaced.
func TestRealNPDKernelDeadlock(t *testing.T) {
	bin := npdBinary(t)
	w := newWorld(t)
	w.startAll()
	name := w.apply(cluster("npd", 1, 3, kernelDeadlock))
	w.waitReady(name, 60*time.Second)
	victim := w.pool(name, "md-0")[0]

	dir := t.TempDir()
	logPath := filepath.Join(dir, "kern.log")
	if err := os.WriteFile(logPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "kernel-monitor.json")
	if err := os.WriteFile(config, fmt.Appendf(nil, kernelMonitor, logPath), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--enable-k8s-exporter=false", "--hostname-override="+victim.name,
		"--config.system-log-monitor="+config, "--prometheus-address=127.0.0.1", fmt.Sprintf("--prometheus-port=%d", port),
		"--address=127.0.0.1", fmt.Sprintf("--port=%d", freePort(t)))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("node-problem-detector output:\n%s", out.String())
		}
	})
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	natstest.WaitFor(t, 20*time.Second, "node-problem-detector serving metrics", func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	deadlockScenario(t, w, name, victim, url, func() {
		line := fmt.Sprintf("%s %s kernel: [12345.678901] task docker:1234 blocked for more than 120 seconds.\n", time.Now().Format("Jan _2 15:04:05"), victim.name)
		f, err := os.OpenFile(logPath, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		if _, err := f.WriteString(line); err != nil {
			t.Fatal(err)
		}
	})
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}
