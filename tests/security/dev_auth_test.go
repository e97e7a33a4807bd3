package security

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
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
	dev := startDevBinary(t, t.TempDir(), "--providers", "sim")
	data, url := dev.data, dev.natsURL
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	_, err := nats.Connect(url, nats.Timeout(5*time.Second))
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
