package security

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// devBin is a running `capn dev` of the real binary.
type devBin struct {
	data, natsURL, gatewayURL string
}

// buildBinary builds the command cmd/<name> into dir.
func buildBinary(t *testing.T, dir, name string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	build := exec.Command("go", "build", "-o", bin, "github.com/capn-dev/capn/cmd/"+name)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", name, err, out)
	}
	return bin
}

// startDevBinary builds and runs `capn dev` with its data dir, NATS and
// gateway on loopback and args added; it is stopped (SIGINT) at cleanup.
func startDevBinary(t *testing.T, dir string, args ...string) devBin {
	t.Helper()
	if testing.Short() {
		t.Skip("runs capn dev: skipped with -short")
	}
	bin := buildBinary(t, dir, "capn")
	d := devBin{data: filepath.Join(dir, "data")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cmd := exec.CommandContext(ctx, bin, append([]string{"dev", "--data-dir", d.data, "--nats-listen", "127.0.0.1:0", "--http-addr", "off",
		"--gateway-addr", "127.0.0.1:0", "--write-client-config=false", "--log-level", "error"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "xdg")}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.StderrPipe() // capn dev logs and prints its banner there
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Process machines outlive capn dev on purpose (the next start takes
	// them back): the test's own end kills them.
	t.Cleanup(func() { cancel(); _ = cmd.Wait(); killProcessesUnder(t, dir) })
	natsLine := regexp.MustCompile(`NATS\s+(nats://\S+)`)
	gatewayLine := regexp.MustCompile(`gateway\s+(http://\S+)`)
	for sc := bufio.NewScanner(out); (d.natsURL == "" || d.gatewayURL == "") && sc.Scan(); {
		if m := natsLine.FindStringSubmatch(sc.Text()); m != nil {
			d.natsURL = m[1]
		}
		if m := gatewayLine.FindStringSubmatch(sc.Text()); m != nil {
			d.gatewayURL = m[1]
		}
	}
	if d.natsURL == "" || d.gatewayURL == "" {
		t.Fatal("capn dev printed no NATS or gateway URL")
	}
	go func() { _, _ = io.Copy(io.Discard, out) }() // keep capn dev from blocking on a full pipe
	return d
}

// killProcessesUnder kills every process whose command line names dir:
// the machines a test's capn dev started.
func killProcessesUnder(t *testing.T, dir string) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(dir)) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// adminConn connects as the nats CLI does with capn dev's context file.
func (d devBin) adminConn(t *testing.T) *nats.Conn {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.data, "nats-context.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ URL, NKey string }
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	opt, err := nats.NkeyOptionFromSeed(c.NKey)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(c.URL, opt)
	if err != nil {
		t.Fatalf("the context's user: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}
