package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/capn-dev/capn/cmd/capn/internal/dev"
)

// contextConn connects as the nats CLI does with capn dev's context file
// (nats --context <dataDir>/nats-context.json), checking it names url.
func contextConn(t *testing.T, dataDir, url string) *nats.Conn {
	t.Helper()
	path := filepath.Join(dataDir, dev.NATSContextFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ URL, NKey string }
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if c.URL != url || !filepath.IsAbs(c.NKey) {
		t.Fatalf("%s names %q and seed %q; want %s and an absolute path", path, c.URL, c.NKey, url)
	}
	opt, err := nats.NkeyOptionFromSeed(c.NKey)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(c.URL, opt)
	if err != nil {
		t.Fatalf("connect with the nats CLI context: %v", err)
	}
	return nc
}

// Finding 2 of issue 17: capn dev's NATS took anyone on the host — any
// local process could read every bucket, write desired and fetch
// bootstrap data. It now refuses an anonymous connection; its services
// connect each as its own user with a deployment's permissions, and the
// credentials are the data dir's alone (0700 directory, 0600 seeds).
func TestDevNATSRefusesAnonymousConnections(t *testing.T) {
	dataDir := t.TempDir()
	d := startDev(t, dataDir, "--providers", "sim")
	_, err := nats.Connect(d.natsURL, nats.Timeout(5*time.Second))
	if !errors.Is(err, nats.ErrAuthorization) && (err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation")) {
		t.Fatalf("an anonymous connection to capn dev's NATS: %v; want an authorization violation", err)
	}
	fi, err := os.Stat(filepath.Join(dataDir, dev.UsersDir))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("users dir: %v %v; want 0700", fi.Mode(), err)
	}
	seeds, _ := filepath.Glob(filepath.Join(dataDir, dev.UsersDir, "*.nk"))
	for _, s := range seeds {
		if fi, err := os.Stat(s); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v %v; want 0600", s, fi.Mode(), err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dataDir, dev.NATSContextFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("context file: %v; want 0600", err)
	}
	// No static user is left for machines: a machine logs in as itself
	// through the bootstrapper's auth callout, and a made-up one is refused
	// (tests/security/machine_identity_test.go attacks it with real ones).
	if nc, err := nats.Connect(d.natsURL, nats.UserInfo("machine.demo.demo-w-0", "guess"), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("a machine login with a made-up secret was accepted")
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("capn dev exited with %d:\n%s", code, d.out)
	}
}
