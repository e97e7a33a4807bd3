package manifest_test

import (
	"strings"
	"testing"

	"github.com/capn-dev/capn/schemas/manifest"
)

func TestDecodeAndValidateRollout(t *testing.T) {
	r, err := manifest.DecodeRollout([]byte(`
apiVersion: capn.dev/v1alpha1
kind: Rollout
metadata: {name: to-v2}
spec:
  clusterSelector: {matchLabels: {env: prod}}
  change: {class: standard, classRevision: 2}
  waves: ["2", "10%", "50%", "100%"]
  soak: 5m
`))
	if err != nil {
		t.Fatal(err)
	}
	manifest.DefaultRollout(r)
	if err := manifest.ValidateRollout(r); err != nil {
		t.Fatal(err)
	}
	if r.Spec.Soak.AsDuration().Minutes() != 5 || r.Spec.Change.ClassRevision != 2 || r.Spec.MaxUnhealthyMachines != "0" {
		t.Fatalf("decoded %v", r)
	}

	_, err = manifest.DecodeRollout([]byte("kind: Cluster\nspec: {wavez: []}\n"))
	if err == nil || !strings.Contains(err.Error(), "spec.wavez: unknown field") || !strings.Contains(err.Error(), `kind: "Cluster": unsupported: must be Rollout`) {
		t.Fatalf("decode errors: %v", err)
	}

	bad, _ := manifest.DecodeRollout([]byte(`
metadata: {name: Bad}
spec:
  change: {kubernetesVersion: "1.x", variables: {a: b}}
  waves: ["0", "150%", "x"]
  readyTimeout: -1s
  maxUnhealthyMachines: lots
`))
	err = manifest.ValidateRollout(bad)
	for _, want := range []string{
		`metadata.name: "Bad"`,
		`spec.change.kubernetesVersion: "1.x"`,
		`spec.change: must set exactly one of class (with classRevision), kubernetesVersion or variables; 2 set`,
		`spec.waves[0]: "0"`, `spec.waves[1]: "150%"`, `spec.waves[2]: "x"`,
		`spec.readyTimeout: -1s: must not be negative`,
		`spec.maxUnhealthyMachines: "lots"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in\n%v", want, err)
		}
	}
}

func TestDecodeClusterClass(t *testing.T) {
	c, err := manifest.DecodeClusterClass([]byte(`
apiVersion: capn.dev/v1alpha1
kind: ClusterClass
metadata: {name: standard}
spec:
  template:
    kubernetesVersion: v1.34.2
    controlPlane: {provider: sim, replicas: 1}
  poolClasses:
  - name: general
    template: {provider: sim, replicas: 2}
  variables:
  - name: workers
    type: integer
    default: 2
    minimum: 0
    paths: [/workerPools/*/replicas]
`))
	if err != nil {
		t.Fatal(err)
	}
	if v := c.Spec.Variables[0]; v.Default != "2" || v.GetMinimum() != 0 || v.Minimum == nil {
		t.Fatalf("variable %v", v)
	}
	if _, err := manifest.DecodeClusterClass([]byte("kind: ClusterClass\nspec: {templat: {}}\n")); err == nil || !strings.Contains(err.Error(), "spec.templat: unknown field") {
		t.Fatalf("unknown field: %v", err)
	}
}
