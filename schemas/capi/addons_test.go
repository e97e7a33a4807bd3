package capi

import (
	"strings"
	"testing"

	"github.com/capn-dev/capn/schemas/manifest"
)

const crsOnly = `apiVersion: addons.cluster.x-k8s.io/v1beta2
kind: ClusterResourceSet
metadata:
  name: cloud.provider
  namespace: default
  labels: {team: infra}
spec:
  clusterSelector:
    matchExpressions:
    - {key: cloud, operator: In, values: [aws]}
  strategy: Reconcile
  resources:
  - {kind: ConfigMap, name: ccm}
  - {kind: Secret, name: ccm-credentials}
  - {kind: ConfigMap, name: missing}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ccm, namespace: default}
data:
  b-deploy.yaml: |
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: ccm, namespace: kube-system}
    spec:
      selector: {matchLabels: {app: ccm}}
      template:
        metadata: {labels: {app: ccm}}
        spec: {containers: [{name: ccm, image: example/ccm:v1}]}
  a-rbac.yaml: |
    apiVersion: v1
    kind: ServiceAccount
    metadata: {name: ccm, namespace: kube-system}
binaryData:
  blob: AAAA
---
apiVersion: v1
kind: Secret
metadata: {name: ccm-credentials, namespace: default}
type: addons.cluster.x-k8s.io/resource-set
stringData:
  creds.yaml: |
    apiVersion: v1
    kind: Secret
    metadata: {name: cloud, namespace: kube-system}
    stringData: {key: s3cret}
---
apiVersion: addons.cluster.x-k8s.io/v1beta2
kind: ClusterResourceSetBinding
metadata: {name: demo}
spec: {clusterName: demo}
`

// capn import of ClusterResourceSets only: each becomes an AddonSet — its
// selector, strategy as mode, a ConfigMap's data keys as inline manifests
// in key order, a Secret as a reference to the add-on secret of its name
// (its credentials never printed) — and what does not map is noted.
func TestImportClusterResourceSets(t *testing.T) {
	res, err := Import([]byte(crsOnly), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cluster != nil || len(res.AddonSets) != 1 {
		t.Fatalf("result: cluster %v, %d sets", res.Cluster, len(res.AddonSets))
	}
	s := res.AddonSets[0]
	sp := s.GetSpec()
	if s.GetMetadata().GetName() != "cloud-provider" || s.GetMetadata().GetLabels()["team"] != "infra" || sp.GetMode() != manifest.AddonReconcile {
		t.Errorf("set %v", s)
	}
	if e := sp.GetClusterSelector().GetMatchExpressions(); len(e) != 1 || e[0].GetKey() != "cloud" || e[0].GetOperator() != "In" || e[0].GetValues()[0] != "aws" {
		t.Errorf("selector %v", sp.GetClusterSelector())
	}
	ms := sp.GetManifests()
	if len(ms) != 3 || ms[0].GetName() != "ccm-a-rbac-yaml" || !strings.Contains(ms[0].GetYaml(), "ServiceAccount") ||
		ms[1].GetName() != "ccm-b-deploy-yaml" || ms[2].GetSecret() != "ccm-credentials" || ms[2].GetYaml() != "" {
		t.Fatalf("manifests %v", ms)
	}
	out, err := manifest.EncodeAddonSet(s)
	if err != nil || strings.Contains(string(out), "s3cret") {
		t.Fatalf("the set printed holds the secret's content, or: %v\n%s", err, out)
	}
	if res.Invalid != nil {
		t.Errorf("invalid: %v", res.Invalid)
	}
	var notes []string
	for _, n := range res.Notes {
		notes = append(notes, n.String())
	}
	all := strings.Join(notes, "\n")
	for _, want := range []string{
		`ClusterResourceSet/cloud.provider: metadata.name = "cloud.provider": capn names add-on sets with a DNS-1123 label: imported as cloud-provider`,
		`ClusterResourceSet/cloud.provider: spec.resources[2] = "ConfigMap/missing": not in the input: ConfigMap missing`,
		`ConfigMap/ccm: binaryData: capn applies YAML from data`,
		`Secret/ccm-credentials: imported as the add-on secret ccm-credentials that AddonSet cloud-provider names; its content is not printed: store the decoded value of each data key with capn addon-secret set ccm-credentials -f FILE`,
		`ClusterResourceSetBinding/demo: not imported: the addon-manager records which add-on sets are applied to which cluster itself`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no note %q among:\n%s", want, all)
		}
	}
	if strings.Contains(all, "s3cret") {
		t.Error("a note holds the secret's content")
	}

	// A set that selects no cluster of the input, and one with no
	// selector, say so; one with no manifest is invalid.
	empty := strings.Replace(crsOnly, "  clusterSelector:\n    matchExpressions:\n    - {key: cloud, operator: In, values: [aws]}\n", "", 1)
	empty = strings.Replace(empty, "  - {kind: ConfigMap, name: ccm}\n  - {kind: Secret, name: ccm-credentials}\n", "", 1)
	res, err = Import([]byte(empty), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Invalid == nil || !strings.Contains(res.Invalid.Error(), "AddonSet/cloud-provider spec.manifests: required") {
		t.Errorf("a set without manifests: %v", res.Invalid)
	}
	notes = nil
	for _, n := range res.Notes {
		notes = append(notes, n.String())
	}
	if !strings.Contains(strings.Join(notes, "\n"), "spec.clusterSelector: empty: Cluster API applies such a set to no cluster") {
		t.Errorf("notes %v", res.Notes)
	}
}
