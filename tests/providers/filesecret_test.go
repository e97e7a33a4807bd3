package providers

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/seal"
)

const fileSecretManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: v1.33.4
  controlPlane:
    provider: process
    replicas: 1
  workerPools:
  - name: md-0
    provider: process
    replicas: 1
    bootstrap:
      files:
      - path: /etc/registry/token
        permissions: "0600"
        secretRef: {name: registry, key: token}
      preCommands:
      - test "$(cat "$CAPN_ROOT/etc/registry/token")" = "%s" && echo ok > "$CAPN_ROOT/pre-saw-token"
`

// A worker's file takes its content from a bootstrap secret, end to end on
// process machines with capn's core programs: before the secret exists the
// worker waits in Bootstrapping with BootstrapReady False naming the
// secret (no failure, no replacement); once it is written (sealed, as the
// gateway writes it) the worker runs, and the file is on its disk under
// the machine's root with its mode, before its preCommands ran.
func TestFileFromBootstrapSecretOnProcessMachines(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	nodeDir, err := conformance.BuildTemp("capn-node")
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	key, err := seal.NewKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	env := sdktest.New(t)
	conformance.CoreProgramsWithKey(raw)(t, env.Server.URL())
	stateDir := filepath.Join(t.TempDir(), "process")
	procOpts := process.Options{NodeBinary: filepath.Join(nodeDir, "capn-node"), StateDir: stateDir,
		HeartbeatEvery: 500 * time.Millisecond, WatchEvery: 200 * time.Millisecond, StopTimeout: 5 * time.Second, HealthPort: -1}
	t.Cleanup(func() {
		if err := process.Purge(procOpts); err != nil {
			t.Errorf("purge process: %v", err)
		}
	})
	env.Run(process.NewService(procOpts, sdk.Options{ReconcileEvery: 500 * time.Millisecond, AnnounceEvery: 500 * time.Millisecond}))

	const token = "tok-9f2c41e7"
	cluster := fmt.Sprintf("fs%d", time.Now().UnixNano()%1e6)
	clusters := conformance.NewClusters(t, env.JS)
	clusters.Apply(fmt.Sprintf(fileSecretManifest, cluster, token))

	// Waiting, and saying for what.
	var worker string
	if err := testkit.Poll(time.Minute, 100*time.Millisecond, func() error {
		for name, st := range clusters.Machines(cluster) {
			if !strings.Contains(name, "-md-0-") {
				continue
			}
			c := conditions.Get(st.GetConditions(), "BootstrapReady")
			if st.GetPhaseValue() == capnv1.MachineBootstrapping && c.GetReason() == annotations.ReasonBootstrapSecretNotFound &&
				strings.Contains(c.GetMessage(), `bootstrap secret "registry" not found`) && strings.Contains(c.GetMessage(), "/etc/registry/token") {
				worker = name
				return nil
			}
			return fmt.Errorf("worker %s: phase %s, BootstrapReady %v", name, st.GetPhase(), c)
		}
		return fmt.Errorf("no worker yet: %s", summary(clusters.Machines(cluster)))
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("worker %s waits: %s", worker, conditions.Get(clusters.Machines(cluster)[worker].GetConditions(), "BootstrapReady").GetMessage())

	// The secret, sealed as the gateway writes it.
	secretsKV, err := env.JS.KeyValue(context.Background(), events.BucketSecrets)
	if err != nil {
		t.Fatal(err)
	}
	secrets := store.NewBucket(secretsKV, store.New[capnv1.BootstrapSecret](), store.WithSealer(ring))
	if _, err := secrets.Create(context.Background(), keys.BootstrapSecret("registry"),
		&capnv1.BootstrapSecret{Name: "registry", Data: map[string][]byte{"token": []byte(token)}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := testkit.Poll(2*time.Minute, 200*time.Millisecond, func() error {
		ms := clusters.Machines(cluster)
		st := ms[worker]
		if st.GetPhaseValue() == capnv1.MachineFailed {
			return fmt.Errorf("worker failed: %s", st.GetFailureMessage())
		}
		if st.GetPhaseValue() != capnv1.MachineRunning {
			return fmt.Errorf("worker %s: %s", worker, summary(ms))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("worker %s Running %s after the secret was written", worker, time.Since(start).Round(time.Millisecond))
	if uid := clusters.UIDs(cluster)[worker]; uid == "" {
		t.Fatal("the waiting worker was replaced")
	}
	root := filepath.Join(stateDir, "clusters", cluster, "machines", worker, "node", "rootfs")
	path := filepath.Join(root, "etc", "registry", "token")
	b, err := os.ReadFile(path)
	if err != nil || string(b) != token {
		t.Fatalf("%s: %q, %v; want the secret's value", path, b, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: mode %v, %v; want 0600", path, fi.Mode().Perm(), err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "pre-saw-token")); err != nil || string(b) != "ok\n" {
		t.Fatalf("the preCommand did not see the file: %q, %v", b, err)
	}

	clusters.Delete(cluster)
	clusters.WaitGone(cluster, []string{process.Name}, 2*time.Minute)
}

func summary(ms map[string]*capnv1.MachineStatus) string {
	var out []string
	for name, st := range ms {
		out = append(out, name+"="+st.GetPhase())
	}
	return strings.Join(out, ", ")
}
