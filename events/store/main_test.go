package store

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events/embedded"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// serverURL is the package's shared nats-server; tests that restart a
// server start their own with natstest.
var serverURL string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "capn-store-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Options{StoreDir: dir, Port: -1, ServerName: "store-test"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	serverURL = srv.ClientURL()
	return m.Run()
}

var bucketSeq atomic.Int64

var notBucketChar = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// newKV connects to the shared server and creates a bucket of its own for
// the calling test.
func newKV(t testing.TB) jetstream.KeyValue {
	t.Helper()
	_, kv := newJSKV(t)
	return kv
}

// newJSKV is newKV with the JetStream it was opened with.
func newJSKV(t testing.TB) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	nc, err := nats.Connect(serverURL, nats.Name(t.Name()))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return js, createKV(t, js)
}

func createKV(t testing.TB, js jetstream.JetStream) jetstream.KeyValue {
	t.Helper()
	name := fmt.Sprintf("%s_%d", notBucketChar.ReplaceAllString(t.Name(), "_"), bucketSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// History 64 (the most) holds every revision the tests write per key,
	// so "every update in order" is checkable across a watcher reset, which
	// nats.go's ordered consumer does by itself under bursts of writes.
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, History: 64})
	if err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	return kv
}

func newPool() *capnv1.PoolStatus { return new(capnv1.PoolStatus) }

func pool(name string, replicas int32) *capnv1.PoolStatus {
	return &capnv1.PoolStatus{Name: name, Replicas: replicas}
}

// put writes a PoolStatus unconditionally and returns its revision.
func put(t testing.TB, kv jetstream.KeyValue, key string, replicas int32) uint64 {
	t.Helper()
	data, err := Encode(pool(key, replicas))
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(context.Background(), key, data)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return rev
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
