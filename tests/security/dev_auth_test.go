package security

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Finding 2: capn dev's NATS took anyone on the host — any local process
// could read every bucket, write desired and fetch bootstrap data. The
// attack runs the real capn binary's `capn dev` and connects as a local
// process would: anonymously (refused), then as the nats CLI with the
// context file capn dev writes (0600; it lists the buckets).
func TestDevNATSRefusesAnonymousConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("runs capn dev: skipped with -short")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "capn")
	build := exec.Command("go", "build", "-o", bin, "github.com/capn-dev/capn/cmd/capn")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "dev", "--data-dir", data, "--nats-listen", "127.0.0.1:0", "--http-addr", "off",
		"--gateway-addr", "127.0.0.1:0", "--providers", "sim", "--write-client-config=false", "--log-level", "error")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "xdg")}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 20 * time.Second
	out, err := cmd.StderrPipe() // capn dev logs and prints its banner there
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	natsLine := regexp.MustCompile(`NATS\s+(nats://\S+)`)
	var url string
	for sc := bufio.NewScanner(out); url == "" && sc.Scan(); {
		if m := natsLine.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
		}
	}
	if url == "" {
		t.Fatal("capn dev printed no NATS URL")
	}
	go func() { _, _ = io.Copy(io.Discard, out) }() // keep capn dev from blocking on a full pipe

	_, err = nats.Connect(url, nats.Timeout(5*time.Second))
	if err == nil || !(errors.Is(err, nats.ErrAuthorization) || strings.Contains(strings.ToLower(err.Error()), "authorization violation")) {
		t.Fatalf("an anonymous local connection to capn dev's NATS: %v; want an authorization violation", err)
	}

	// The one documented step: the nats CLI's context file.
	path := filepath.Join(data, "nats-context.json")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v; want mode 0600", path, fi.Mode(), err)
	}
	b, _ := os.ReadFile(path)
	var c struct{ URL, NKey string }
	if err := json.Unmarshal(b, &c); err != nil || c.URL != url {
		t.Fatalf("%s: %v, url %q; want %s", path, err, c.URL, url)
	}
	opt, err := nats.NkeyOptionFromSeed(c.NKey)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(c.URL, opt)
	if err != nil {
		t.Fatalf("the context's user: %v", err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	var names []string
	for n := range js.KeyValueStoreNames(ctx).Name() {
		names = append(names, n)
	}
	if !strings.Contains(strings.Join(names, ","), "desired") {
		t.Errorf("kv ls with the context lists %v", names)
	}
}
