package kube_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// hostedClusterManifest: a hosted control plane of one replica and a pool
// of two kube-local workers on the process provider.
const hostedClusterManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  bootstrap:
    provider: kube-local
  controlPlane:
    type: hosted
    replicas: 1
  workerPools:
  - name: workers
    provider: process
    replicas: 2
`

// TestHostedControlPlaneWorkersJoin is issue 21's "workers on any provider
// join it (process provider first) with the same bootstrap token + CSR
// flow as today", through capn's own path with real binaries: the core
// services, the process provider and the controlplane-hosted program on
// one nats-server; `capn apply` of a hosted cluster with 2 workers; the
// cluster Ready and 2 Ready Nodes through the admin kubeconfig `capn
// kubeconfig` hands out, whose server is the record's endpoint; `capn
// scale` to 1 worker (the Node drained: cordoned, then deleted); `capn
// delete`: the machines, the hosted processes, the hosted data directory
// and the record gone.
func TestHostedControlPlaneWorkersJoin(t *testing.T) {
	bin := conformance.KubeBin(t, "")
	if testing.Short() {
		t.Skip("runs a capn deployment, a hosted control plane and 2 kube-local workers; skipped with -short")
	}
	env := sdktest.New(t)
	c := conformance.StartCapn(t, env.Server.URL())
	state := startProcessProvider(t, bin, env.Server.URL())
	dataDir := conformance.StartHosted(t, env.Server.URL(), bin)
	k := conformance.NewKubeCluster(t, c, env.JS, bin, fmt.Sprintf("hosted%d", time.Now().UnixNano()%1e6))

	applied := time.Now()
	k.Apply(fmt.Sprintf(hostedClusterManifest, k.Name, k.Version))
	k.Clusters.WaitReady(k.Name, 10*time.Minute)
	readyAt := time.Since(applied)
	rec := k.Clusters.ControlPlane(k.Name)
	if rec == nil {
		t.Fatalf("no record %s", keys.ControlPlane(k.Name))
	}
	if rec.GetImplementation() != capnv1.ControlPlaneHosted || !rec.GetInitialized() || rec.GetReadyReplicas() != 1 {
		t.Fatalf("record: implementation %q initialized %v readyReplicas %d", rec.GetImplementation(), rec.GetInitialized(), rec.GetReadyReplicas())
	}
	endpoint := "https://" + net.JoinHostPort(rec.GetEndpoint().GetHost(), strconv.Itoa(int(rec.GetEndpoint().GetPort())))
	if _, err := os.Stat(filepath.Join(dataDir, k.Name)); err != nil {
		t.Fatalf("the hosted control plane's directory: %v", err)
	}
	if running := k.Running(); len(running) != 2 {
		t.Fatalf("%d Running machines %v, want the 2 workers (a hosted cluster has no control-plane machine)", len(running), running)
	}

	k.FetchKubeconfig()
	kc, err := os.ReadFile(k.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(kc), "server: "+endpoint+"\n") {
		t.Fatalf("capn's admin kubeconfig does not point at the record's endpoint %s:\n%s", endpoint, serverLines(string(kc)))
	}
	readyNodes := func() ([]string, error) {
		out, err := k.Kubectl("get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		if err != nil {
			return nil, err
		}
		var ready []string
		for _, l := range strings.Fields(out) {
			if name, ok := strings.CutSuffix(l, "=True"); ok {
				ready = append(ready, name)
			}
		}
		return ready, nil
	}
	var nodes []string
	conformance.Poll(t, "2 Ready Nodes", 5*time.Minute, func() error {
		n, err := readyNodes()
		if err == nil && len(n) != 2 {
			err = fmt.Errorf("Ready: %v", n)
		}
		nodes = n
		return err
	})
	nodesAt := time.Since(applied)
	t.Logf("hosted cluster %s: capn Ready %.1fs after capn apply; 2 worker Nodes Ready %.1fs after (%v), through %s", k.Name, readyAt.Seconds(), nodesAt.Seconds(), nodes, endpoint)

	// --- scale the workers 2 → 1: the removed Node is drained ---------------
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	witness := k.WatchNodes(ctx, &wg, "app=none")
	sc := time.Now()
	c.CLI("scale", k.Name, "--pool", "workers", "--replicas", "1", "--wait")
	// --wait returns once the cluster is Ready at the new size: the
	// removed machine's deletion finished, and its Node went before its
	// infrastructure (the deletion waits for the Node's). Checked once,
	// not polled: a poll would hide a --wait that returns early.
	if r := k.Running(); len(r) != 1 {
		t.Errorf("capn scale --wait returned with %d Running machines, want 1", len(r))
	}
	if out, err := k.Kubectl("get", "nodes", "-o", "name"); err != nil {
		t.Error(err)
	} else if n := strings.Fields(out); len(n) != 1 {
		t.Errorf("capn scale --wait returned with Nodes %v, want 1", n)
	}
	if d := witness.Drains(); len(d) != 1 {
		t.Errorf("scale 2 → 1: %d Nodes cordoned then deleted (%v), want 1", len(d), d)
	}
	t.Logf("scaled the workers 2 → 1 in %.1fs: drains %v", time.Since(sc).Seconds(), witness.Drains())
	cancel()
	wg.Wait()

	// --- delete: machines, hosted processes, data dir and record gone --------
	del := time.Now()
	c.CLI("delete", "cluster", k.Name, "--wait", "--timeout", "4m")
	k.Clusters.WaitGone(k.Name, []string{"process"}, 2*time.Minute)
	conformance.Poll(t, "nothing of the hosted cluster left", 2*time.Minute, func() error {
		left := append(conformance.HostedLeftovers(dataDir, k.Name, rec), processLeftovers(state, k.Name)...)
		if k.Clusters.ControlPlane(k.Name) != nil {
			left = append(left, "record "+keys.ControlPlane(k.Name))
		}
		if len(left) > 0 {
			return errors.New(strings.Join(left, "; "))
		}
		return nil
	})
	t.Logf("FIGURES: hosted control plane (1 replica) + 2 process workers: capn Ready %.1fs, 2 Nodes Ready %.1fs after apply; scale 2 → 1 %.1fs; delete %.1fs",
		readyAt.Seconds(), nodesAt.Seconds(), del.Sub(sc).Seconds(), time.Since(del).Seconds())
}

func serverLines(kubeconfig string) string {
	var out []string
	for _, l := range strings.Split(kubeconfig, "\n") {
		if strings.Contains(l, "server:") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, "\n")
}
