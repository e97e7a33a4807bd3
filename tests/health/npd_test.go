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
	"github.com/capn-dev/capn/tests/internal/npdtest"
)

// TestRealNPDKernelDeadlock runs the real node-problem-detector binary on
// a log file, standalone (no Kubernetes), with capn-npd-bridge scraping
// it: a kernel "task docker:1234 blocked for more than 120 seconds." line
// makes KernelDeadlock True, and the machine is rebooted, then replaced.
func TestRealNPDKernelDeadlock(t *testing.T) {
	bin := npdtest.Binary(t)
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
	if err := os.WriteFile(config, npdtest.KernelMonitor(logPath), 0o644); err != nil {
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
		line := npdtest.KernelLine(victim.name, "task docker:1234 blocked for more than 120 seconds.")
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
