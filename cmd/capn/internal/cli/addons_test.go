package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/internal/testkit"
)

const addonSetYAML = `apiVersion: capn.dev/v1alpha1
kind: AddonSet
metadata: {name: cni}
spec:
  blocking: true
  mode: Reconcile
  onRemove: Delete
  manifests:
  - name: config
    yaml: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: cni-config, namespace: kube-system}
      data: {mtu: "1450"}
`

// Add-on sets on a real capn dev, every service running: capn apply takes
// a cluster and a set in one file (dry runs first, then both applied,
// each reported), the addon-manager records the set on the sim cluster
// (no Kubernetes API: nothing applied, nothing held back) and the
// planner's AddonsApplied says so; capn get addonsets and capn describe
// cluster show it; capn diff shows a set's change; capn delete addonset
// removes it and its records.
func TestAddonSetsOnCapnDev(t *testing.T) {
	a := newApplyTest(t)
	f := a.file("demo.yaml", clusterYAML("demo", 1)+"---\n"+addonSetYAML)
	code, stdout, stderr := a.run("", "apply", "-f", f, "--dry-run=server")
	a.want("dry run", code, stdout, stderr, 0, "cluster/demo created (server dry run)\naddonset/cni created (server dry run)\n", "")
	code, stdout, stderr = a.run("", "apply", "-f", f, "--wait", "--timeout", "2m")
	if code != 0 || !strings.HasPrefix(stdout, "cluster/demo created\naddonset/cni created\n") {
		t.Fatalf("apply --wait: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = a.run("", "apply", "-f", a.file("twice.yaml", addonSetYAML+"---\n"+addonSetYAML))
	if code != 1 || !strings.Contains(stderr, "document 2 (addonset cni): addonset cni is also in document 1 (addonset cni): declare each addonset once") {
		t.Errorf("a set declared twice: %d %s %s", code, stdout, stderr)
	}

	c, err := client.New(a.dev.gatewayURL, client.WithToken(a.dev.token))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "the addon-manager's record and the cluster's AddonsApplied", func() bool {
		set, err := c.AddonSet(t.Context(), "cni")
		if err != nil || len(set.GetStatus().GetClusters()) != 1 {
			return false
		}
		cl, err := c.Get(t.Context(), "demo")
		if err != nil {
			return false
		}
		for _, cd := range cl.GetStatus().GetConditions() {
			if cd.GetType() == "AddonsApplied" {
				return cd.GetStatus() == "True" && strings.Contains(cd.GetMessage(), "no Kubernetes API")
			}
		}
		return false
	})

	code, stdout, stderr = a.run("", "get", "addonsets", "-o", "wide")
	if code != 0 || !strings.Contains(stdout, "NAME") || !strings.Contains(stdout, "cni") || !strings.Contains(stdout, "Reconcile") ||
		!strings.Contains(stdout, "<all clusters>") || !strings.Contains(stdout, "demo (NoKubernetesAPI)") {
		t.Errorf("get addonsets -o wide: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = a.run("", "get", "addonset/cni", "-o", "name")
	if code != 0 || stdout != "addonset/cni\n" {
		t.Errorf("get addonset/cni -o name: %d %q", code, stdout)
	}
	code, stdout, stderr = a.run("", "describe", "cluster", "demo")
	if code != 0 || !strings.Contains(stdout, "Add-ons:") || !strings.Contains(stdout, "cni (blocking)") || !strings.Contains(stdout, "NoKubernetesAPI") {
		t.Errorf("describe cluster: exit %d\n%s%s", code, stdout, stderr)
	}
	changed := a.file("changed.yaml", strings.Replace(addonSetYAML, `"1450"`, `"9000"`, 1))
	code, stdout, _ = a.run("", "diff", "-f", changed)
	if code != 1 || !strings.Contains(stdout, "-      data: {mtu: \"1450\"}") || !strings.Contains(stdout, "+      data: {mtu: \"9000\"}") {
		t.Errorf("diff of a changed set: exit %d\n%s", code, stdout)
	}

	code, stdout, stderr = a.run("", "delete", "addonset", "cni")
	a.want("delete addonset", code, stdout, stderr, 0, "addonset/cni deleted\n", "")
	testkit.WaitFor(t, 30*time.Second, "the cluster's records forgotten", func() bool {
		recs, err := c.ClusterAddons(t.Context(), "demo")
		return err == nil && len(recs) == 0
	})
	code, _, stderr = a.run("", "get", "addonset", "cni")
	if code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("get a deleted set: %d %s", code, stderr)
	}

	// A Cluster API ClusterResourceSet, imported and applied.
	crs := a.file("crs.yaml", `apiVersion: addons.cluster.x-k8s.io/v1beta1
kind: ClusterResourceSet
metadata: {name: calico, namespace: default}
spec:
  clusterSelector: {matchLabels: {cni: calico}}
  strategy: Reconcile
  resources: [{kind: ConfigMap, name: calico-addon}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: calico-addon, namespace: default}
data:
  calico.yaml: |
    apiVersion: v1
    kind: Namespace
    metadata: {name: calico-system}
`)
	code, stdout, stderr = a.run("", "import", "-f", crs)
	if code != 0 || !strings.Contains(stdout, "kind: AddonSet") {
		t.Fatalf("import of a ClusterResourceSet: %d\n%s%s", code, stdout, stderr)
	}
	code, out, stderr := a.run(stdout, "apply", "-f", "-")
	a.want("apply the imported set", code, out, stderr, 0, "addonset/calico created\n", "")
	set, err := c.AddonSet(t.Context(), "calico")
	if err != nil || set.GetSpec().GetMode() != "Reconcile" || set.GetSpec().GetClusterSelector().GetMatchLabels()["cni"] != "calico" ||
		len(set.GetSpec().GetManifests()) != 1 || set.GetSpec().GetManifests()[0].GetName() != "calico-addon-calico-yaml" {
		t.Errorf("the imported set as stored: %v, %v", set, err)
	}

	// Add-on secrets: sealed, the content never printed.
	code, stdout, stderr = a.run("apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: kube-system}\nstringData: {token: x}\n",
		"addon-secret", "set", "creds", "-f", "-")
	if code != 0 || !strings.HasPrefix(stdout, "addon-secret/creds created (1 object, hash ") {
		t.Errorf("addon-secret set: %d %s %s", code, stdout, stderr)
	}
	code, stdout, _ = a.run("", "addon-secret", "delete", "creds")
	a.want("addon-secret delete", code, stdout, "", 0, "addon-secret/creds deleted\n", "")

	// Bootstrap secrets: keys from files, stdin and literals; the values
	// never printed; usage errors before any request.
	tokenFile := a.file("token", "s3cret-from-file")
	code, stdout, stderr = a.run("ca-from-stdin", "bootstrap-secret", "set", "registry",
		"--from-file", "token="+tokenFile, "--from-file", "ca.crt=-", "--from-literal", "user=admin")
	if code != 0 || !strings.HasPrefix(stdout, "bootstrap-secret/registry created (3 keys: ca.crt, token, user, hash ") ||
		strings.Contains(stdout+stderr, "s3cret") {
		t.Errorf("bootstrap-secret set: %d %s %s", code, stdout, stderr)
	}
	for _, bad := range [][]string{
		{"bootstrap-secret", "set", "registry"},
		{"bootstrap-secret", "set", "registry", "--from-literal", "a/b=x"},
		{"bootstrap-secret", "set", "registry", "--from-literal", "k=1", "--from-literal", "k=2"},
		{"bootstrap-secret", "set", "Bad_Name", "--from-literal", "k=1"},
		{"bootstrap-secret", "delete", "registry", "--from-literal", "k=1"},
	} {
		if code, _, stderr := a.run("", bad...); code == 0 || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q: want a usage error", bad, code, stderr)
		}
	}
	code, stdout, _ = a.run("", "bootstrap-secret", "delete", "registry")
	a.want("bootstrap-secret delete", code, stdout, "", 0, "bootstrap-secret/registry deleted\n", "")
}
