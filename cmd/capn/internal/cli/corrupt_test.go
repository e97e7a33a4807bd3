package cli

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events"
)

// A stored cluster record that does not decode: capn get prints the other
// clusters with a warning on stderr, as kubectl prints the API's
// warnings, and capn delete removes it (its check that the cluster exists
// takes the corrupt record for one).
func TestCorruptClusterRecord(t *testing.T) {
	a := newApplyTest(t)
	// capn dev's NATS takes only its users: write as the admin the nats
	// CLI context names.
	nc := contextConn(t, a.dev.dataDir, a.dev.natsURL)
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), events.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "cluster.garbage", []byte("\xff\xff junk")); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := a.run("", "get", "clusters")
	if code != 0 || !strings.HasPrefix(stderr, "Warning: cluster garbage left out: stored record is corrupt (key cluster.garbage, revision ") ||
		strings.Contains(stdout, "garbage") {
		t.Fatalf("get clusters: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = a.run("", "delete", "cluster", "garbage", "--wait", "--timeout", "1m")
	if code != 0 || !strings.Contains(stdout, "cluster/garbage deleted") {
		t.Fatalf("delete: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if code, stdout, stderr = a.run("", "get", "clusters"); code != 0 || stderr != "No resources found.\n" {
		t.Fatalf("get clusters after the delete: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}
