//go:build linux

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
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// externalClusterManifest: an external control plane (the registered
// kubeconfig ext) and a pool of 2 kube-local workers on the process
// provider.
const externalClusterManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  bootstrap:
    provider: kube-local
  controlPlane:
    type: external
    external: {kubeconfig: ext}
  workerPools:
  - name: workers
    provider: process
    replicas: 2
`

// TestExternalControlPlaneEndToEnd is issue 21's proof with real
// binaries: the test, not capn, runs etcd, kube-apiserver and
// kube-controller-manager (csrapproving, csrsigning: the node
// certificates); applies deploy/external/rbac.yaml; registers a kubeconfig
// with that service account's token (capn external-kubeconfig set);
// applies a cluster with controlPlane.type external and 2 kube-local
// workers on the process provider (capn's whole deployment and
// controlplane-external as programs); waits for 2 Ready Nodes in the
// external API server; deletes the capn cluster and sees its Nodes and
// the join objects capn made gone, and the external API server untouched:
// answering, with the objects capn did not make still there.
func TestExternalControlPlaneEndToEnd(t *testing.T) {
	bin := conformance.KubeBin(t, "")
	begin := time.Now()
	step := func(name string, since time.Time) {
		t.Logf("step %-44s %6.1fs (total %6.1fs)", name, time.Since(since).Seconds(), time.Since(begin).Seconds())
	}
	ctx := t.Context()

	// --- the external cluster, outside capn ----------------------------------
	s := time.Now()
	ext := startExternalCluster(t)
	admin := ext.Admin
	step("external etcd, kube-apiserver, controller-manager", s)

	// --- capn ------------------------------------------------------------------
	s = time.Now()
	env := sdktest.New(t)
	c := conformance.StartCapn(t, env.Server.URL())
	conformance.StartExternal(t, c, env.Server.URL(), "--external-resync=2s")
	state := startProcessProvider(t, bin, env.Server.URL())
	t.Cleanup(func() { // before the provider's state is purged
		if !t.Failed() {
			return
		}
		logs, _ := filepath.Glob(filepath.Join(state, "clusters", "*", "machines", "*", "node.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("%s (last 6000 bytes):\n%s", l, b)
		}
	})
	step("capn deployment and the process provider", s)

	ext.register(t, c, "ext")
	name := fmt.Sprintf("ext%d", time.Now().UnixNano()%1e6)
	manifest := filepath.Join(c.Home, "cluster.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(externalClusterManifest, name, wantVersion(bin))), 0o600); err != nil {
		t.Fatal(err)
	}
	c.CLI("apply", "-f", manifest)
	applied := time.Now()

	type node struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			ProviderID string `json:"providerID"`
		} `json:"spec"`
		Status struct {
			Conditions []struct{ Type, Status string } `json:"conditions"`
		} `json:"status"`
	}
	nodes := func() ([]node, error) {
		var list struct{ Items []node }
		err := admin.Get(ctx, "/api/v1/nodes", &list)
		return list.Items, err
	}
	ready := func(n node) bool {
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" {
				return c.Status == "True"
			}
		}
		return false
	}
	clusters := conformance.NewClusters(t, env.JS)
	conformance.Poll(t, "2 Ready Nodes in the external API server", 4*time.Minute, func() error {
		ns, err := nodes()
		if err != nil {
			return err
		}
		n := 0
		var seen []string
		for _, x := range ns {
			seen = append(seen, fmt.Sprintf("%s(%s ready=%v)", x.Metadata.Name, x.Spec.ProviderID, ready(x)))
			if ready(x) {
				n++
			}
		}
		if n != 2 {
			rec := clusters.ControlPlane(name)
			return fmt.Errorf("%d Ready of %v; record initialized=%v conditions %v", n, seen, rec.GetInitialized(), rec.GetConditions())
		}
		return nil
	})
	t.Logf("2 Ready Nodes in the external API server %.1fs after capn apply", time.Since(applied).Seconds())
	ns, _ := nodes()
	for _, n := range ns {
		if !strings.HasPrefix(n.Spec.ProviderID, "process://") {
			t.Errorf("Node %s: providerID %q, not a process machine's", n.Metadata.Name, n.Spec.ProviderID)
		}
	}
	joinObjects := func() []string { return ext.joinObjects(t, name) }
	made := joinObjects()
	t.Logf("join objects capn made in the external cluster: %d: %v", len(made), made)
	if len(made) < 9 {
		t.Errorf("only %d join objects labelled capn.dev/cluster=%s: %v", len(made), name, made)
	}

	// capn's machines Running, each with the providerID its Node carries:
	// the health-watcher deletes a deleted machine's Node by that id. (A
	// cluster deleted before capn has its machines' providerIDs can leave
	// their Nodes in the external API server: docs/health.md.)
	conformance.Poll(t, "capn's 2 machines Running with their providerIDs", 2*time.Minute, func() error {
		var seen []string
		n := 0
		for m, st := range clusters.Machines(name) {
			seen = append(seen, fmt.Sprintf("%s %s %q", m, st.GetPhase(), st.GetProviderId()))
			if st.GetPhaseValue() == capnv1.MachineRunning && st.GetProviderId() != "" {
				n++
			}
		}
		if n != 2 {
			return fmt.Errorf("machines: %v", seen)
		}
		return nil
	})

	// --- delete the capn cluster ---------------------------------------------
	s = time.Now()
	c.CLI("delete", "cluster", name)
	conformance.Poll(t, "the cluster's Nodes gone from the external API server", 5*time.Minute, func() error {
		ns, err := nodes()
		if err != nil {
			return err
		}
		if len(ns) > 0 {
			return fmt.Errorf("%d Nodes left", len(ns))
		}
		return nil
	})
	step("delete: the Nodes gone", s)
	conformance.Poll(t, "the join objects capn made gone", 3*time.Minute, func() error {
		if left := joinObjects(); len(left) > 0 {
			return fmt.Errorf("left: %v", left)
		}
		return nil
	})
	step("delete: the join objects gone", s)
	clusters.WaitGone(name, []string{"process"}, 3*time.Minute) // the record included
	step("delete: the capn cluster gone", s)

	// --- the external cluster untouched ---------------------------------------
	for _, bad := range ext.untouched(t) {
		t.Error(bad)
	}
	t.Logf("total %.1fs", time.Since(begin).Seconds())
}
