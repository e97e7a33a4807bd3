package kube_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
)

// etcdClusterManifest: three kube-local control planes on the process
// provider, no workers.
const etcdClusterManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  bootstrap:
    provider: kube-local
  controlPlane:
    provider: process
    replicas: 3
`

// TestEtcdSnapshotAndRestoreThroughCapn is issue 22's etcd proof through
// capn, with real binaries: a 3-member kube-local cluster capn made on the
// process provider; a ConfigMap written with kubectl; `capn etcd
// snapshot`; the ConfigMap deleted; `capn etcd restore` of the snapshot
// (the backup service drives every member's agent); the ConfigMap is back,
// etcd answers /readyz on the API server and the three control-plane Nodes
// are Ready.
func TestEtcdSnapshotAndRestoreThroughCapn(t *testing.T) {
	bin := conformance.KubeBin(t, "")
	if testing.Short() {
		t.Skip("runs a capn deployment and a 3-member Kubernetes cluster; skipped with -short")
	}
	if _, err := os.Stat(filepath.Join(bin, "etcdutl")); err != nil {
		if os.Getenv("CAPN_REQUIRE_KUBE") == "1" {
			t.Fatalf("no etcdutl in %s, and CAPN_REQUIRE_KUBE=1: make kube adds it", bin)
		}
		t.Skipf("no etcdutl in %s: make kube adds it to an older cache in seconds", bin)
	}
	env := sdktest.New(t)
	c := conformance.StartCapn(t, env.Server.URL())
	startProcessProvider(t, bin, env.Server.URL())
	k := conformance.NewKubeCluster(t, c, env.JS, bin, fmt.Sprintf("etcd%d", time.Now().UnixNano()%1e6))
	applied := time.Now()
	k.Apply(fmt.Sprintf(etcdClusterManifest, k.Name, k.Version))
	k.Clusters.WaitReady(k.Name, 10*time.Minute)
	t.Logf("cluster %s (3 control planes) Ready %.1fs after capn apply", k.Name, time.Since(applied).Seconds())
	k.FetchKubeconfig()
	readyNodes := func() int {
		out, _ := k.Kubectl("get", "nodes", "-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		return strings.Count(out, "True")
	}
	conformance.Poll(t, "three Ready Nodes", 2*time.Minute, func() error {
		if n := readyNodes(); n != 3 {
			return fmt.Errorf("%d Ready", n)
		}
		return nil
	})

	if _, err := k.Kubectl("create", "configmap", "keep-me", "--from-literal=answer=42"); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	out := c.CLI("etcd", "snapshot", k.Name)
	t.Logf("%s (%.1fs)", strings.TrimSpace(out), time.Since(began).Seconds())
	list := c.CLI("etcd", "snapshots", k.Name)
	lines := strings.Split(strings.TrimSpace(list), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "NAME") {
		t.Fatalf("capn etcd snapshots:\n%s", list)
	}
	snapshot := strings.Fields(lines[1])[0]
	if !strings.Contains(out, snapshot) || !strings.Contains(lines[1], "3") {
		t.Errorf("listed %q, taken %q", lines[1], out)
	}
	if _, err := k.Kubectl("delete", "configmap", "keep-me"); err != nil {
		t.Fatal(err)
	}

	began = time.Now()
	out = c.CLI("etcd", "restore", k.Name, snapshot)
	t.Logf("%s (%.1fs)", strings.TrimSpace(out), time.Since(began).Seconds())
	conformance.Poll(t, "the ConfigMap back", time.Minute, func() error {
		v, err := k.Kubectl("get", "configmap", "keep-me", "-o", "jsonpath={.data.answer}")
		if err != nil || v != "42" {
			return fmt.Errorf("%q %v", v, err)
		}
		return nil
	})
	if v, err := k.Kubectl("get", "--raw", "/readyz/etcd"); err != nil || strings.TrimSpace(v) != "ok" {
		t.Errorf("/readyz/etcd after the restore: %q %v", v, err)
	}
	conformance.Poll(t, "three Ready Nodes after the restore", 2*time.Minute, func() error {
		if n := readyNodes(); n != 3 {
			return fmt.Errorf("%d Ready", n)
		}
		return nil
	})
	t.Logf("restored: the ConfigMap is back, etcd ready, three control-plane Nodes Ready %.1fs after capn etcd restore began", time.Since(began).Seconds())
}
