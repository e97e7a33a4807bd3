package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/autoscalertls"
)

// clusterManifest: kube-local on the process provider; md-0 autoscaled
// 1..5 (replicas left out: min), zero autoscaled 0..2 for pods that select
// and tolerate it. Each worker's Node has 2 CPUs, 4Gi and 110 pods (the
// template parameters the autoscaler-provider's template Node reports too).
const clusterManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  bootstrap:
    provider: kube-local
  controlPlane:
    provider: process
    replicas: 1
  workerPools:
  - name: md-0
    provider: process
    autoscaling: {min: 1, max: 5}
    template:
      parameters: {cpu: "2", memory: 4Gi, pods: "110"}
  - name: zero
    provider: process
    autoscaling: {min: 0, max: 2}
    labels: {pool: zero}
    taints:
    - {key: dedicated, value: zero, effect: NoSchedule}
    template:
      parameters: {cpu: "2", memory: 4Gi, pods: "110"}
`

// bigDeployment: 4 pods of 1.5 CPUs, one per 2-CPU Node.
const bigDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: big, namespace: default}
spec:
  replicas: 4
  selector: {matchLabels: {app: big}}
  template:
    metadata: {labels: {app: big}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 0
      containers:
      - name: pause
        image: pause
        resources: {requests: {cpu: 1500m, memory: 256Mi}}
`

// zeroDeployment: one pod that only a Node of pool zero takes.
const zeroDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: onzero, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: onzero}}
  template:
    metadata: {labels: {app: onzero}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 0
      nodeSelector: {pool: zero}
      tolerations:
      - {key: dedicated, operator: Equal, value: zero, effect: NoSchedule}
      containers:
      - name: pause
        image: pause
        resources: {requests: {cpu: 1500m, memory: 256Mi}}
`

// TestClusterAutoscaler is the issue's proof with real binaries: capn
// makes a cluster (1 control plane, md-0 at min 1), the upstream
// cluster-autoscaler runs against its API server and capn's
// autoscaler-provider (mutual TLS), and
//  1. a Deployment whose pods do not fit on one Node makes it scale md-0
//     up; the new machines join, their Nodes become Ready and every pod is
//     scheduled (pending → scheduled is measured);
//  2. once the Deployment is deleted, it removes the empty Nodes through
//     DeleteNodes: the machines it named, and only those, are deleted
//     (drained first), and md-0 is back at 1;
//  3. a pod that selects pool zero (min 0, no machine) makes it scale that
//     pool from zero (the template Node), and back to zero after;
//
// every step in the cluster's timeline and in capn describe.
func TestClusterAutoscaler(t *testing.T) {
	caBin := autoscalerBin(t)
	bin := conformance.KubeBin(t, "")
	if testing.Short() {
		t.Skip("runs a capn deployment, a Kubernetes cluster and the cluster-autoscaler; skipped with -short")
	}
	begin := time.Now()
	env := sdktest.New(t)
	c := conformance.StartCapn(t, env.Server.URL())
	tlsDir := filepath.Join(t.TempDir(), "autoscaler")
	if _, err := autoscalertls.Ensure(tlsDir, []string{"127.0.0.1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	startPrograms(t, bin, env.Server.URL(), tlsDir, addr)
	name := fmt.Sprintf("as%d", time.Now().UnixNano()%1e6)
	k := conformance.NewKubeCluster(t, c, env.JS, bin, name)
	ctx := context.Background()
	desired, err := env.JS.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	machines := store.NewBucket(desired, store.New[capnv1.Machine]())
	clusters := store.NewBucket(desired, store.New[capnv1.Cluster]())
	replicas := func(pool string) int32 {
		cl, _, err := clusters.Get(ctx, keys.Cluster(name))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range cl.GetSpec().GetWorkerPools() {
			if p.GetName() == pool {
				return p.GetReplicas()
			}
		}
		return -1
	}
	// records is every machine record of pool (deleting ones included).
	records := func(pool string) map[string]*capnv1.Machine {
		es, err := machines.List(ctx, keys.MachinesOf(name))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*capnv1.Machine{}
		for _, e := range es {
			if e.Value.GetSpec().GetPool() == pool {
				out[strings.TrimPrefix(e.Key, keys.MachinesOf(name))] = e.Value
			}
		}
		return out
	}
	running := func(pool string) map[string]conformance.KubeMachine {
		out := map[string]conformance.KubeMachine{}
		for n, m := range k.Running() {
			if m.Pool == pool {
				out[n] = m
			}
		}
		return out
	}

	applied := time.Now()
	k.Apply(fmt.Sprintf(clusterManifest, name, k.Version))
	k.Clusters.WaitReady(name, 6*time.Minute)
	if r := replicas("md-0"); r != 1 {
		t.Fatalf("md-0 created with replicas %d, want min 1", r)
	}
	k.FetchKubeconfig()
	k.WaitNodes(k.Running(), 3*time.Minute)
	t.Logf("cluster %s Ready with its 2 Nodes %.1fs after capn apply", name, time.Since(applied).Seconds())

	client, err := autoscalertls.IssueClient(tlsDir, name, addr, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	stopAutoscaler := startAutoscaler(t, caBin, k.Kubeconfig, client.CloudConfig)

	// 1. Scale up for pods that do not fit.
	before := running("md-0")
	k.Write(filepath.Join(c.Home, "big.yaml"), bigDeployment)
	created := time.Now()
	if _, err := k.Kubectl("apply", "-f", filepath.Join(c.Home, "big.yaml")); err != nil {
		t.Fatal(err)
	}
	var scheduled time.Time
	conformance.Poll(t, "4 pods of big Running on 4 md-0 Nodes", 8*time.Minute, func() error {
		pods, err := podsOf(k, "big")
		if err != nil {
			return err
		}
		nodes := map[string]bool{}
		for _, p := range pods {
			if p[1] != "Running" || p[2] == "" {
				return fmt.Errorf("pods %v (md-0 replicas %d)", pods, replicas("md-0"))
			}
			nodes[p[2]] = true
		}
		if len(pods) != 4 || len(nodes) != 4 {
			return fmt.Errorf("pods %v", pods)
		}
		return nil
	})
	scheduled = time.Now()
	// The pods run once the Nodes are Ready; capn's machine status says
	// Running once the health-watcher's node record reaches the
	// machine-manager, which may be a moment later on a loaded host.
	var up map[string]conformance.KubeMachine
	conformance.Poll(t, "md-0 at 4 Running machines, replicas 4", 2*time.Minute, func() error {
		if up = running("md-0"); len(up) != 4 || replicas("md-0") != 4 {
			return fmt.Errorf("md-0 has %d Running machines, replicas %d; want 4", len(up), replicas("md-0"))
		}
		return nil
	})
	k.WaitNodes(k.Running(), 3*time.Minute)
	t.Logf("scale-up: pods pending → all scheduled and Running in %.1fs (md-0 1 → 4: %v)", scheduled.Sub(created).Seconds(), slices.Sorted(maps.Keys(up)))
	for n := range before {
		if _, ok := up[n]; !ok {
			t.Fatalf("machine %s was replaced during the scale-up", n)
		}
	}

	// The autoscaler restarts: capn kept nothing in the provider, so the
	// new one reads the same sizes (its status ConfigMap, written afresh)
	// and changes nothing.
	stopAutoscaler()
	if _, err := k.Kubectl("delete", "configmap", "cluster-autoscaler-status", "-n", "kube-system", "--ignore-not-found"); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	startAutoscaler(t, caBin, k.Kubeconfig, client.CloudConfig) // stopped at cleanup
	conformance.Poll(t, "the restarted autoscaler seeing md-0 at 4 of 4 ready Nodes", 3*time.Minute, func() error {
		if target, ready, ok := groupStatus(k, "md-0"); !ok || target != 4 || ready != 4 {
			return fmt.Errorf("md-0 in the autoscaler's status: target %d, ready %d (found %v)", target, ready, ok)
		}
		return nil
	})
	if r, n := replicas("md-0"), len(records("md-0")); r != 4 || n != 4 {
		t.Fatalf("after the autoscaler's restart md-0 has replicas %d, %d machines; want 4", r, n)
	}
	t.Logf("autoscaler restarted: it read md-0's target 4 and 4 ready Nodes %.1fs later, nothing changed", time.Since(restarted).Seconds())

	// 2. Scale down the empty Nodes.
	if _, err := k.Kubectl("delete", "deployment", "big", "-n", "default", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	conformance.Poll(t, "md-0 back to 1 machine", 8*time.Minute, func() error {
		rec := records("md-0")
		if r := replicas("md-0"); len(rec) != 1 || r != 1 {
			return fmt.Errorf("md-0 replicas %d, machine records %v", r, slices.Sorted(maps.Keys(rec)))
		}
		return nil
	})
	down := time.Since(deleted)
	var named []string
	for _, e := range autoscalerEvents(t, env.JS, name) {
		if e.GetPool() == "md-0" && e.GetReason() == "DeletedNodes" {
			named = append(named, e.GetMachines()...)
		}
	}
	left := records("md-0")
	var gone []string
	for n := range up {
		if _, ok := left[n]; !ok {
			gone = append(gone, n)
		}
	}
	sort.Strings(named)
	sort.Strings(gone)
	if !slices.Equal(named, gone) {
		t.Fatalf("the autoscaler named %v in DeleteNodes; capn deleted %v", named, gone)
	}
	for n := range left {
		if _, ok := up[n]; !ok {
			t.Fatalf("md-0's machine %s is new: a machine was replaced, not just removed", n)
		}
	}
	k.WaitNodes(k.Running(), 3*time.Minute) // the deleted machines' Nodes are gone
	t.Logf("scale-down: Deployment deleted → md-0 at 1 in %.1fs; deleted exactly the named %v", down.Seconds(), named)

	// 3. Scale from zero.
	if r := replicas("zero"); r != 0 {
		t.Fatalf("pool zero has replicas %d, want 0", r)
	}
	k.Write(filepath.Join(c.Home, "onzero.yaml"), zeroDeployment)
	created = time.Now()
	if _, err := k.Kubectl("apply", "-f", filepath.Join(c.Home, "onzero.yaml")); err != nil {
		t.Fatal(err)
	}
	conformance.Poll(t, "the onzero pod Running on a Node of pool zero", 8*time.Minute, func() error {
		pods, err := podsOf(k, "onzero")
		if err != nil {
			return err
		}
		z := running("zero")
		if len(pods) != 1 || pods[0][1] != "Running" || z[pods[0][2]].Pool != "zero" {
			return fmt.Errorf("pods %v, pool zero's Running machines %v (replicas %d)", pods, slices.Sorted(maps.Keys(z)), replicas("zero"))
		}
		return nil
	})
	fromZero := time.Since(created)
	if r := replicas("zero"); r != 1 {
		t.Fatalf("pool zero scaled to %d, want 1", r)
	}
	if _, err := k.Kubectl("delete", "deployment", "onzero", "-n", "default", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	deleted = time.Now()
	conformance.Poll(t, "pool zero back to 0", 8*time.Minute, func() error {
		if rec := records("zero"); len(rec) != 0 || replicas("zero") != 0 {
			return fmt.Errorf("pool zero replicas %d, machines %v", replicas("zero"), slices.Sorted(maps.Keys(rec)))
		}
		return nil
	})
	t.Logf("scale from zero: pod created → Running on a new zero Node in %.1fs; back to zero in %.1fs", fromZero.Seconds(), time.Since(deleted).Seconds())

	// The timeline and capn describe.
	var lines []string
	for _, e := range autoscalerEvents(t, env.JS, name) {
		lines = append(lines, e.GetReason()+": "+e.GetMessage())
	}
	t.Logf("timeline:\n  %s", strings.Join(lines, "\n  "))
	want := []string{"md-0 ScaledUp", "md-0 DeletedNodes", "zero ScaledUp", "zero DeletedNodes"}
	for _, w := range want {
		pool, reason, _ := strings.Cut(w, " ")
		if !slices.ContainsFunc(autoscalerEvents(t, env.JS, name), func(e *capnv1.AutoscalerEvent) bool {
			return e.GetPool() == pool && e.GetReason() == reason
		}) {
			t.Errorf("no %s event on the timeline", w)
		}
	}
	conformance.Poll(t, "capn describe showing md-0's last action", time.Minute, func() error {
		out := c.CLI("describe", "cluster", name)
		_, section, ok := strings.Cut(out, "Autoscaling (the cluster autoscaler sizes these pools):")
		if !ok {
			return errors.New("no Autoscaling section:\n" + out)
		}
		for _, l := range strings.Split(section, "\n") {
			if f := strings.Fields(l); len(f) > 4 && f[0] == "md-0" && f[1] == "1" && f[2] == "5" && f[4] == "DeletedNodes" {
				return nil
			}
		}
		return errors.New("md-0's row does not show 1..5 and DeletedNodes:\n" + section)
	})
	t.Logf("whole test %.1fs", time.Since(begin).Seconds())
}
