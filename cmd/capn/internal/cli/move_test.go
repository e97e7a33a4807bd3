package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn/internal/dev"
	"github.com/capn-dev/capn/gateway/client"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/seal"
)

const moveCluster = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: shop
spec:
  kubernetesVersion: v1.33.4
  controlPlane: {provider: sim, replicas: 1}
  workerPools:
  - {name: md-0, provider: sim, replicas: 2}
`

// providerCommands reads capn_provider_commands_total of the sim from a
// capn dev's /metrics: kind/verb → count.
func providerCommands(t *testing.T, opsURL string) map[string]int {
	t.Helper()
	resp, err := http.Get(opsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := map[string]int{}
	re := regexp.MustCompile(`capn_provider_commands_total\{([^}]*)\} (\d+)`)
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		labels := map[string]string{}
		for _, kv := range strings.Split(m[1], ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = strings.Trim(v, `"`)
		}
		if labels["provider"] == "sim" {
			n, _ := strconv.Atoi(m[2])
			out[labels["kind"]+"/"+labels["verb"]] += n
		}
	}
	return out
}

// TestBackupRestoreAndMoveBetweenTwoDevDataDirs runs capn backup, capn
// restore and capn move against two capn dev deployments (two data dirs,
// one secrets key): a backup of a Ready cluster, a restore refused into
// the deployment that holds it and a damaged file refused, a dry run into
// the other; then the cluster moved to the other — the same machines with
// the same provider ids, no machine or infrastructure deleted at the
// source (its sim orphaned them) nor created at the target (its sim
// adopted them) — and a scale at the target.
func TestBackupRestoreAndMoveBetweenTwoDevDataDirs(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	// Both deployments hold one secrets key (a move needs the target to
	// open the source's secrets).
	secret := make([]byte, seal.KeySize)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	key, err := seal.NewKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(seal.KeyEnv, hex.EncodeToString(secret))
	dirA, dirB, tmp := t.TempDir(), t.TempDir(), t.TempDir()
	a := startDevWith(t, dirA, nil)
	b := startDevWith(t, dirB, nil)
	cfgA, cfgB := filepath.Join(dirA, dev.ClientConfigFile), filepath.Join(dirB, dev.ClientConfigFile)
	capn := func(cfg string, args ...string) (int, string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		e, stdout, stderr := testEnv(map[string]string{"CAPN_CONFIG": cfg})
		code := run(ctx, e, args)
		t.Logf("capn %s → %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
		return code, stdout.String(), stderr.String()
	}
	want := func(code int, stdout, stderr string, wantCode int, wants ...string) {
		t.Helper()
		if code != wantCode {
			t.Fatalf("exit %d, want %d", code, wantCode)
		}
		for _, w := range wants {
			if !strings.Contains(stdout+stderr, w) {
				t.Fatalf("output lacks %q", w)
			}
		}
	}
	manifest := filepath.Join(tmp, "shop.yaml")
	if err := os.WriteFile(manifest, []byte(moveCluster), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := capn(cfgA, "apply", "-f", manifest, "--wait", "--timeout", "2m")
	want(code, out, errOut, 0)

	file := filepath.Join(tmp, "a.backup")
	code, out, errOut = capn(cfgA, "backup", "-o", file)
	want(code, out, errOut, 0, "wrote backup", "1 clusters", "sealed with key "+key.ID())
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file %v, %v", fi, err)
	}
	code, out, errOut = capn(cfgA, "backup", "list")
	want(code, out, errOut, 0, "NAME", "-api")
	code, out, errOut = capn(cfgA, "restore", file)
	want(code, out, errOut, 1, "Deployment not empty (409)", "merge")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	damaged := filepath.Join(tmp, "damaged.backup")
	if err := os.WriteFile(damaged, data[:len(data)-100], 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = capn(cfgB, "restore", damaged)
	want(code, out, errOut, 1, "is not a valid backup: nothing was sent", "truncated")
	code, out, errOut = capn(cfgB, "restore", file, "--dry-run")
	want(code, out, errOut, 0, "would restore 1 clusters: shop", "to hand to their providers: 4")

	// The move.
	ca, err := client.New(a.gatewayURL, client.WithToken(a.token))
	if err != nil {
		t.Fatal(err)
	}
	cb, err := client.New(b.gatewayURL, client.WithToken(b.token))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	before := map[string]*capnv1.Machine{}
	ms, err := ca.Machines(ctx, "shop", client.ListOptions{})
	if err != nil || len(ms) != 3 {
		t.Fatalf("machines at the source: %d, %v", len(ms), err)
	}
	for _, m := range ms {
		before[m.GetMetadata().GetName()] = m
	}
	// A hosted control plane runs in this deployment's controlplane-hosted:
	// it cannot move, and the refusal changes nothing (not even a pause).
	edge := filepath.Join(tmp, "edge.yaml")
	if err := os.WriteFile(edge, []byte(strings.NewReplacer("name: shop", "name: edge",
		"controlPlane: {provider: sim, replicas: 1}", "controlPlane: {type: hosted, replicas: 1}").Replace(moveCluster)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = capn(cfgA, "apply", "-f", edge)
	want(code, out, errOut, 0)
	code, out, errOut = capn(cfgA, "move", "--to", cfgB, "edge")
	want(code, out, errOut, 1, "nothing was changed", "edge: its control plane is hosted here")
	if c, err := ca.Get(ctx, "edge"); err != nil || c.GetSpec().GetPaused() || c.GetMetadata().GetDeletionTimestamp() != nil {
		t.Fatalf("edge after the refused move: %v, %v", c.GetMetadata(), err)
	}
	if _, err := cb.Get(ctx, "edge"); !client.IsNotFound(err) {
		t.Fatalf("the refused move reached the target: %v", err)
	}
	code, out, errOut = capn(cfgA, "delete", "cluster", "edge", "--wait", "--timeout", "2m")
	want(code, out, errOut, 0)

	srcBefore, dstBefore := providerCommands(t, a.opsURL), providerCommands(t, b.opsURL)
	code, out, errOut = capn(cfgA, "move", "--to", cfgB, "shop")
	want(code, out, errOut, 0, "moved shop to "+b.gatewayURL, "paused shop here", "4 machines and infrastructures adopted")
	if _, err := ca.Get(ctx, "shop"); !client.IsNotFound(err) {
		t.Fatalf("the source still has the cluster: %v", err)
	}
	c, err := cb.Get(ctx, "shop")
	if err != nil || c.GetSpec().GetPaused() {
		t.Fatalf("the target's cluster: %v (paused %v)", err, c.GetSpec().GetPaused())
	}
	ms, err = cb.Machines(ctx, "shop", client.ListOptions{})
	if err != nil || len(ms) != 3 {
		t.Fatalf("machines at the target: %d, %v", len(ms), err)
	}
	for _, m := range ms {
		old := before[m.GetMetadata().GetName()]
		if old == nil || old.GetMetadata().GetUid() != m.GetMetadata().GetUid() || old.GetStatus().GetProviderId() != m.GetStatus().GetProviderId() ||
			m.GetStatus().GetPhaseValue() != capnv1.MachineRunning {
			t.Errorf("machine %s at the target: %v, was %v", m.GetMetadata().GetName(), m.GetStatus(), old.GetStatus())
		}
	}
	src, dst := providerCommands(t, a.opsURL), providerCommands(t, b.opsURL)
	delta := func(after, before map[string]int, k string) int { return after[k] - before[k] }
	if d := delta(src, srcBefore, "machine/delete") + delta(src, srcBefore, "cluster/delete"); d != 0 {
		t.Errorf("the source's sim deleted %d machines or infrastructures during the move", d)
	}
	if d := delta(src, srcBefore, "machine/orphan"); d != 3 {
		t.Errorf("the source's sim orphaned %d machines, want 3 (%v)", d, src)
	}
	if d := delta(src, srcBefore, "cluster/orphan"); d != 1 {
		t.Errorf("the source's sim orphaned %d cluster infrastructures, want 1", d)
	}
	if d := delta(dst, dstBefore, "machine/create"); d != 0 {
		t.Errorf("the target's sim created %d machines during the move", d)
	}
	if d := delta(dst, dstBefore, "machine/adopt"); d != 3 {
		t.Errorf("the target's sim adopted %d machines, want 3", d)
	}
	t.Logf("source sim: %v; target sim: %v", src, dst)

	// The target manages it: a scale works.
	code, out, errOut = capn(cfgB, "scale", "shop", "--pool", "md-0", "--replicas", "3", "--wait", "--timeout", "2m")
	want(code, out, errOut, 0)
	ms, err = cb.Machines(ctx, "shop", client.ListOptions{})
	if err != nil || len(ms) != 4 {
		t.Fatalf("machines after the scale: %d, %v", len(ms), err)
	}
	kept := 0
	for _, m := range ms {
		if old := before[m.GetMetadata().GetName()]; old != nil && old.GetStatus().GetProviderId() == m.GetStatus().GetProviderId() {
			kept++
		}
	}
	if kept != 3 {
		t.Errorf("after the scale %d of the moved machines are left", kept)
	}
	if d := delta(providerCommands(t, b.opsURL), dstBefore, "machine/create"); d != 1 {
		t.Errorf("the scale created %d machines at the target, want 1", d)
	}
}
