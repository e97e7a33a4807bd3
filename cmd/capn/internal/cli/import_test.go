package cli

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/capn-dev/capn/schemas/manifest"
)

// complete is a Cluster API cluster capn import maps whole.
const complete = `apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: whole}
spec:
  controlPlaneRef: {apiGroup: controlplane.cluster.x-k8s.io, kind: KubeadmControlPlane, name: whole}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata: {name: whole}
spec:
  replicas: 1
  version: v1.34.2
  machineTemplate:
    spec:
      infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: InMemoryMachineTemplate, name: whole}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: InMemoryMachineTemplate
metadata: {name: whole}
spec: {template: {spec: {}}}
`

func TestImportCommand(t *testing.T) {
	const testdata = "../../../../schemas/capi/testdata/"
	v1beta1, err := os.ReadFile(testdata + "docker-v1beta1.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		stdin      string
		wantCode   int
		wantStdout string
		wantStderr []string
	}{
		{name: "a CAPD quick-start", args: []string{"import", "-f", testdata + "docker-v1beta1.yaml"},
			wantStdout: "kind: Cluster\nmetadata:\n  name: capi-quickstart\n",
			wantStderr: []string{"capn import: 15 Cluster API settings not mapped:\n",
				"  KubeadmControlPlane/capi-quickstart-control-plane: spec.kubeadmConfigSpec.users: capn's bootstrap creates no users"}},
		{name: "a ClusterResourceSet with its cluster", args: []string{"import", "-f", testdata + "docker-v1beta1.yaml", "--quiet"},
			wantStdout: "---\napiVersion: capn.dev/v1alpha1\nkind: AddonSet\nmetadata:\n  name: calico\nspec:\n  clusterSelector:\n    matchLabels:\n      cni: calico\n"},
		{name: "from standard input, quietly", args: []string{"import", "-f", "-", "--quiet"}, stdin: string(v1beta1),
			wantStdout: "  name: capi-quickstart\n"},
		{name: "another provider for every machine", args: []string{"import", "-f", testdata + "docker-v1beta2.yaml", "--provider", "sim"},
			wantStdout: "    provider: sim\n", wantStderr: []string{"provider docker (from the kind) replaced by sim (--provider)"}},
		{name: "an infrastructure without a provider", args: []string{"import", "-f", testdata + "aws-v1beta1.yaml"}, wantCode: 1,
			wantStderr: []string{"capn import: " + testdata + "aws-v1beta1.yaml: no capn provider for this infrastructure: AWSMachineTemplate (AWSMachineTemplate/prod-eu-control-plane, referenced by KubeadmControlPlane/prod-eu-control-plane): capn knows Docker* (docker) and InMemory*/Dev* in-memory (sim) kinds; pass --provider NAME\n"}},
		{name: "a result that does not validate", wantCode: 1, args: []string{"import", "-f", "-"},
			stdin:      strings.Replace(string(v1beta1), "  replicas: 3\n  version: v1.33.4", "  replicas: 2\n  version: v1.33.4", 1),
			wantStdout: "    replicas: 2\n",
			wantStderr: []string{"capn import: the manifests made from - are not valid (1 problem): fix them before applying them\n  spec.controlPlane.replicas: 2: must be odd"}},
		{name: "a bad provider name", args: []string{"import", "-f", "x", "--provider", "No"}, wantCode: 2, wantStderr: []string{`capn import: --provider "No": not a provider name: it must be a DNS-1123 label, e.g. sim` + "\nSee 'capn import -h' for help.\n"}},
		{name: "a ClusterClass with its cluster", args: []string{"import", "-f", testdata + "clusterclass-v1beta2.yaml"},
			wantStdout: "    provider: docker\n",
			wantStderr: []string{"capn import: 22 Cluster API settings not mapped:\n",
				"  ClusterClass/quick-start: spec.patches[1]: patch customImage: capn cannot evaluate ClusterClass patches",
				"  Cluster/dev: spec.topology.variables[0]: variable imageRepository: "}},
		{name: "a ClusterClass as a class", args: []string{"import", "-f", testdata + "clusterclass-v1beta2.yaml", "--classes"},
			wantStdout: "kind: ClusterClass\nmetadata:\n  name: quick-start\n",
			wantStderr: []string{"capn import: 19 Cluster API settings not mapped:\n",
				"  ClusterClass/quick-start: spec.variables[1]: variable podSecurityStandard: schema type \"object\": capn variables are string, integer or boolean"}},
		{name: "--classes without the class", args: []string{"import", "-f", testdata + "topology-v1beta2.yaml", "--classes", "--provider", "sim"}, wantCode: 1,
			wantStderr: []string{`ClusterClass "quick-start" is not in the input`}},
		{name: "--strict with settings not mapped", args: []string{"import", "-f", testdata + "clusterclass-v1beta2.yaml", "--strict"}, wantCode: 1,
			wantStderr: []string{"capn import: --strict: 22 Cluster API settings not mapped, so nothing is printed:\n",
				"  Cluster/dev: metadata.namespace = \"default\": capn has no namespaces"}},
		{name: "--strict with a result that does not validate", wantCode: 1, args: []string{"import", "-f", "-", "--strict", "--quiet"},
			stdin:      strings.Replace(complete, "replicas: 1", "replicas: 2", 1),
			wantStderr: []string{"capn import: the manifests made from - are not valid (1 problem)"}},
		{name: "--strict with everything mapped", args: []string{"import", "-f", "-", "--strict"}, stdin: complete,
			wantStdout: "  name: whole\n"},
		{name: "no -f", args: []string{"import"}, wantCode: 2, wantStderr: []string{"capn import: -f is required"}},
		{name: "no such file", args: []string{"import", "-f", "nope.yaml"}, wantCode: 1, wantStderr: []string{"capn import: open nope.yaml: no such file or directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, stdout, stderr := testEnv(nil)
			e.stdin = strings.NewReader(tt.stdin)
			code := run(context.Background(), e, tt.args)
			if slices.Contains(tt.args, "--strict") && code != 0 && stdout.String() != "" {
				t.Errorf("--strict failed (exit %d) but printed:\n%s", code, stdout)
			}
			if code != tt.wantCode || !strings.Contains(stdout.String(), tt.wantStdout) {
				t.Errorf("exit %d (want %d), stdout:\n%s\nwant it to contain %q; stderr:\n%s", code, tt.wantCode, stdout, tt.wantStdout, stderr)
			}
			for _, want := range tt.wantStderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if tt.wantCode == 0 || tt.wantStdout != "" {
				docs := strings.Split(stdout.String(), "\n---\n")
				if strings.Contains(docs[0], "\nkind: ClusterClass\n") {
					if _, err := manifest.DecodeClusterClass([]byte(docs[0])); err != nil {
						t.Errorf("the printed class does not decode: %v", err)
					}
					docs = docs[1:]
				}
				if _, err := manifest.Decode([]byte(docs[0])); err != nil {
					t.Errorf("the printed manifest does not decode: %v", err)
				}
				for _, d := range docs[1:] {
					if _, err := manifest.DecodeAddonSet([]byte(d)); err != nil {
						t.Errorf("a printed add-on set does not decode: %v", err)
					}
				}
			}
		})
	}
}

// TestImportTargetsEachProvider: --provider sends every machine to any of
// capn's providers, with a manifest that validates; the CAPD machine
// settings none of them reads are listed as not mapped, not passed on.
func TestImportTargetsEachProvider(t *testing.T) {
	const file = "../../../../schemas/capi/testdata/docker-v1beta2.yaml"
	for _, provider := range []string{"sim", "process", "docker"} {
		t.Run(provider, func(t *testing.T) {
			e, stdout, stderr := testEnv(nil)
			if code := run(context.Background(), e, []string{"import", "-f", file, "--provider", provider}); code != 0 {
				t.Fatalf("exit %d:\n%s", code, stderr)
			}
			c, err := manifest.Decode([]byte(stdout.String()))
			if err != nil {
				t.Fatal(err)
			}
			manifest.Default(c)
			if err := manifest.Validate(c); err != nil {
				t.Errorf("the imported cluster does not validate: %v", err)
			}
			got := []string{c.GetSpec().GetControlPlane().GetProvider()}
			for _, p := range c.GetSpec().GetWorkerPools() {
				got = append(got, p.GetProvider())
				if len(p.GetTemplate().GetParameters()) > 0 {
					t.Errorf("pool %s has parameters %v that the %s provider does not read", p.GetName(), p.GetTemplate().GetParameters(), provider)
				}
			}
			if len(c.GetSpec().GetControlPlane().GetTemplate().GetParameters()) > 0 {
				t.Errorf("the control plane has parameters %v that the %s provider does not read", c.GetSpec().GetControlPlane().GetTemplate().GetParameters(), provider)
			}
			for _, p := range got {
				if p != provider {
					t.Errorf("providers %v, want every one %s", got, provider)
					break
				}
			}
			if want := "DockerMachineTemplate/edge-worker: spec.template.spec: "; !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "takes no parameters") {
				t.Errorf("stderr does not list the template's settings as not mapped:\n%s", stderr)
			}
		})
	}
}
