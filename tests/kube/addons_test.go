package kube_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/keys"
)

// addonsClusterManifest: kube-local on the process provider, 1 control
// plane and 1 worker, labelled for the set below.
const addonsClusterManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
  labels: {addons: demo}
spec:
  kubernetesVersion: %s
  bootstrap:
    provider: kube-local
  controlPlane:
    provider: process
    replicas: 1
  workerPools:
  - name: workers
    provider: process
    replicas: 1
`

// addonSetManifest: a blocking Reconcile set standing in for a CNI.
const addonSetManifest = `apiVersion: capn.dev/v1alpha1
kind: AddonSet
metadata:
  name: demo-cni
spec:
  clusterSelector: {matchLabels: {addons: demo}}
  blocking: true
  mode: Reconcile
  reconcileInterval: 5s
  onRemove: Delete
  manifests:
  - name: cni
    yaml: |
      apiVersion: v1
      kind: Namespace
      metadata: {name: demo-cni}
      ---
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: demo-cni-config, namespace: demo-cni}
      data: {mtu: "%s"}
      ---
      apiVersion: apps/v1
      kind: DaemonSet
      metadata: {name: demo-cni-agent, namespace: demo-cni}
      spec:
        selector: {matchLabels: {app: demo-cni-agent}}
        template:
          metadata: {labels: {app: demo-cni-agent}}
          spec:
            tolerations: [{operator: Exists}]
            containers: [{name: agent, image: registry.k8s.io/pause:3.10}]
      ---
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: demo-cni-controller, namespace: demo-cni}
      spec:
        replicas: 1
        selector: {matchLabels: {app: demo-cni-controller}}
        template:
          metadata: {labels: {app: demo-cni-controller}}
          spec:
            containers: [{name: controller, image: registry.k8s.io/pause:3.10}]
`

// crsManifest is a Cluster API ClusterResourceSet with its ConfigMap.
const crsManifest = `apiVersion: addons.cluster.x-k8s.io/v1beta1
kind: ClusterResourceSet
metadata: {name: extras, namespace: default}
spec:
  clusterSelector: {matchLabels: {addons: demo}}
  resources: [{kind: ConfigMap, name: extras}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: extras, namespace: default}
data:
  extras.yaml: |
    apiVersion: v1
    kind: Namespace
    metadata: {name: from-capi}
`

// TestAddonsOnAKubeLocalCluster is issue 25's add-on proof on a real
// cluster capn made (kube-local on the process provider, 1 control plane
// and 1 worker, with the addon-manager of the deployment): the cluster and
// a blocking set (a Namespace, a ConfigMap, a DaemonSet and a Deployment)
// applied together, the set applied before the cluster is Ready, kubectl
// sees every object, a ConfigMap deleted with kubectl comes back within
// the 5s reconcile interval, a change of the set is rolled out, and a
// Cluster API ClusterResourceSet, through capn import, is applied too.
func TestAddonsOnAKubeLocalCluster(t *testing.T) {
	bin := conformance.KubeBin(t, "")
	if testing.Short() {
		t.Skip("runs a capn deployment and a Kubernetes cluster; skipped with -short")
	}
	env := sdktest.New(t)
	c := conformance.StartCapn(t, env.Server.URL())
	startProcessProvider(t, bin, env.Server.URL())
	k := conformance.NewKubeCluster(t, c, env.JS, bin, fmt.Sprintf("addons%d", time.Now().UnixNano()%1e6))
	observed, err := env.JS.KeyValue(context.Background(), events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	records := store.NewBucket(observed, store.New[capnv1.ClusterAddonStatus]())

	applied := time.Now()
	k.Apply(fmt.Sprintf(addonsClusterManifest, k.Name, k.Version) + "---\n" + fmt.Sprintf(addonSetManifest, "1450"))
	k.Clusters.WaitReady(k.Name, 8*time.Minute)
	t.Logf("cluster %s Ready %.1fs after capn apply", k.Name, time.Since(applied).Seconds())
	rec, _, err := records.Get(context.Background(), keys.Addon(k.Name, "demo-cni"))
	if err != nil {
		t.Fatalf("no record of the set: %v", err)
	}
	st := k.Clusters.Status(k.Name)
	ready := conditions.Get(st.GetConditions(), "Ready")
	addons := conditions.Get(st.GetConditions(), "AddonsApplied")
	if addons.GetStatus() != "True" || ready.GetStatus() != "True" {
		t.Fatalf("conditions: Ready %v, AddonsApplied %v", ready, addons)
	}
	// Blocking: the cluster turned Ready only once the set was applied.
	if ready.GetLastTransitionTime().AsTime().Before(rec.GetLastApplied().AsTime().Truncate(time.Second)) {
		t.Errorf("Ready since %s, before the blocking set was applied at %s", ready.GetLastTransitionTime().AsTime(), rec.GetLastApplied().AsTime())
	}
	t.Logf("the blocking set was applied at %s; the cluster Ready at %s (AddonsApplied: %s)",
		rec.GetLastApplied().AsTime().Format(time.RFC3339Nano), ready.GetLastTransitionTime().AsTime().Format(time.RFC3339), addons.GetMessage())

	k.FetchKubeconfig()
	for _, o := range []string{"namespace/demo-cni", "configmap/demo-cni-config", "daemonset/demo-cni-agent", "deployment/demo-cni-controller"} {
		ns := []string{"-n", "demo-cni"}
		if strings.HasPrefix(o, "namespace/") {
			ns = nil
		}
		if out, err := k.Kubectl(append([]string{"get", o, "-o", "name"}, ns...)...); err != nil || strings.TrimSpace(out) == "" {
			t.Fatalf("kubectl get %s: %q %v", o, out, err)
		}
	}
	mtu := func() string {
		out, err := k.Kubectl("get", "configmap", "demo-cni-config", "-n", "demo-cni", "--ignore-not-found", "-o", "jsonpath={.data.mtu}")
		if err != nil {
			return "error: " + err.Error()
		}
		return strings.TrimSpace(out)
	}

	if _, err := k.Kubectl("delete", "configmap", "demo-cni-config", "-n", "demo-cni"); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	conformance.Poll(t, "the deleted ConfigMap back", 30*time.Second, func() error {
		if v := mtu(); v != "1450" {
			return fmt.Errorf("mtu %q", v)
		}
		return nil
	})
	t.Logf("the ConfigMap deleted with kubectl was back after %.1fs (reconcile interval 5s)", time.Since(deleted).Seconds())

	changed := time.Now()
	k.Apply(fmt.Sprintf(addonSetManifest, "9000"))
	conformance.Poll(t, "the changed set rolled out", 30*time.Second, func() error {
		if v := mtu(); v != "9000" {
			return fmt.Errorf("mtu %q", v)
		}
		return nil
	})
	t.Logf("a change of the set was in the cluster after %.1fs", time.Since(changed).Seconds())

	crs := c.Home + "/crs.yaml"
	k.Write(crs, crsManifest)
	imported := c.Home + "/imported.yaml"
	k.Write(imported, c.CLI("import", "-f", crs))
	c.CLI("apply", "-f", imported)
	conformance.Poll(t, "the imported ClusterResourceSet's Namespace", 30*time.Second, func() error {
		out, err := k.Kubectl("get", "namespace", "from-capi", "--ignore-not-found", "-o", "name")
		if err != nil || strings.TrimSpace(out) == "" {
			return fmt.Errorf("%q %v", out, err)
		}
		return nil
	})
}
