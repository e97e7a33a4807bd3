package kube_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/tests/internal/npdtest"
)

// npd is one node-problem-detector process with its Kubernetes exporter on.
type npd struct {
	cmd     *exec.Cmd
	logPath string // the kernel log it watches
	out     *os.File
	done    chan struct{}
	once    sync.Once
}

// startNPD runs NPD for Node node of the cluster kubeconfig (whose server
// is server) reaches: its kernel monitor on a fresh plain log file, its
// Kubernetes exporter writing conditions to the Node, its other servers
// (Prometheus, health) off. It is stopped when the test ends at the latest.
func startNPD(t *testing.T, bin, dir, server, kubeconfig, node string) *npd {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	n := &npd{logPath: filepath.Join(dir, "kern.log"), done: make(chan struct{})}
	if err := os.WriteFile(n.logPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "kernel-monitor.json")
	if err := os.WriteFile(config, npdtest.KernelMonitor(n.logPath), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "npd.log"))
	if err != nil {
		t.Fatal(err)
	}
	n.out = out
	n.cmd = exec.Command(bin,
		"--enable-k8s-exporter=true",
		"--apiserver-override="+server+"?inClusterConfig=false&auth="+kubeconfig,
		"--hostname-override="+node,
		"--config.system-log-monitor="+config,
		"--prometheus-address=127.0.0.1", "--prometheus-port=0",
		"--address=127.0.0.1", "--port=0",
	)
	n.cmd.Stdout, n.cmd.Stderr = out, out
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("start node-problem-detector: %v", err)
	}
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("node-problem-detector (%s) output:\n%s", node, tailLines(string(b), 40))
		}
	})
	return n
}

// stop ends NPD (SIGTERM, then SIGKILL after 10s).
func (n *npd) stop() {
	n.once.Do(func() {
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
			<-n.done
		}
		_ = n.out.Close()
	})
}

// kernelLine appends a kernel log line for host, as syslog writes it.
func (n *npd) kernelLine(t *testing.T, host, msg string) {
	t.Helper()
	line := npdtest.KernelLine(host, msg)
	f, err := os.OpenFile(n.logPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := f.WriteString(line); err != nil {
		t.Fatal(err)
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// startProcessProvider runs the process provider with --kube-bin as the
// capn-provider-process program on natsURL (its machines' capn-node built
// beside it), and the remediator, until the test ends, and purges the
// provider's state afterwards. It returns the provider's state directory.
func startProcessProvider(t *testing.T, kubeBin, natsURL string) string {
	t.Helper()
	progs, err := conformance.BuildTemp("capn-provider-process", "capn-node", "remediator")
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "process")
	t.Cleanup(func() {
		if err := process.Purge(process.Options{StateDir: state}); err != nil {
			t.Errorf("purge the process provider's state: %v", err)
		}
		_ = os.RemoveAll(progs)
	})
	conformance.StartProgram(t, filepath.Join(progs, "capn-provider-process"), []string{"CAPN_LOG_LEVEL=info", "CAPN_LOG_FORMAT=json"},
		"--nats-url="+natsURL, "--http-addr=off",
		"--kube-bin="+kubeBin,
		"--process-state-dir="+state,
		"--process-node-binary="+filepath.Join(progs, "capn-node"),
		"--process-heartbeat-every=1s",
		"--process-watch-every=250ms",
		"--process-stop-timeout=20s",
		"--process-health-port=-1",
		"--provider-reconcile-every=1s",
		"--provider-announce-every=1s",
	)
	// The remediator is no core program of the conformance deployment:
	// the repair this test is about needs it.
	conformance.StartProgram(t, filepath.Join(progs, "remediator"), []string{"CAPN_LOG_LEVEL=info", "CAPN_LOG_FORMAT=json"},
		"--nats-url="+natsURL, "--http-addr=off")
	return state
}

// processLeftovers is what the process provider still holds of cluster:
// its directory under the provider's state (startProcessProvider's) and
// processes whose command line names it.
func processLeftovers(state, cluster string) []string {
	var left []string
	dir := filepath.Join(state, "clusters", cluster)
	if _, err := os.Stat(dir); err == nil {
		left = append(left, "directory "+dir)
	}
	for _, p := range conformance.ProcessesUnder(dir) {
		left = append(left, "process "+p)
	}
	return left
}
