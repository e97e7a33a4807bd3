package capi

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capn-dev/capn/schemas/manifest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// render is what capn import shows for a result: the manifest, then the
// notes and the validation problems as comments.
func render(t *testing.T, res *Result) string {
	t.Helper()
	y, err := manifest.Encode(res.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if res.Class != nil {
		cy, err := manifest.EncodeMessage(res.Class)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(cy)
		b.WriteString("---\n")
	}
	b.Write(y)
	for _, set := range res.AddonSets {
		sy, err := manifest.EncodeAddonSet(set)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(sy)
	}
	b.WriteString("# not mapped:\n")
	for _, n := range res.Notes {
		b.WriteString("#   " + n.String() + "\n")
	}
	b.WriteString("# invalid:\n")
	for _, p := range problems(res.Invalid) {
		b.WriteString("#   " + p + "\n")
	}
	return b.String()
}

func problems(err error) []string {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}

func TestImportGolden(t *testing.T) {
	tests := []struct {
		name, file string
		opts       Options
	}{
		{name: "docker-v1beta1", file: "docker-v1beta1.yaml"},
		{name: "docker-v1beta2", file: "docker-v1beta2.yaml"},
		{name: "docker-on-sim", file: "docker-v1beta2.yaml", opts: Options{Provider: "sim"}},
		{name: "aws-v1beta1", file: "aws-v1beta1.yaml", opts: Options{Provider: "aws"}},
		{name: "inmemory-v1beta1", file: "inmemory-v1beta1.yaml"},
		{name: "topology-v1beta2", file: "topology-v1beta2.yaml", opts: Options{Provider: "sim"}},
		{name: "clusterclass-v1beta2", file: "clusterclass-v1beta2.yaml"},
		{name: "clusterclass-v1beta2-classes", file: "clusterclass-v1beta2.yaml", opts: Options{Classes: true}},
		{name: "classic-v1beta1", file: "classic-v1beta1.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			res, err := Import(in, tt.opts)
			if err != nil {
				t.Fatalf("Import: %v", err)
			}
			listedOnce(t, res)
			got := render(t, res)
			golden := filepath.Join("testdata", tt.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if got != string(want) {
				t.Errorf("Import(%s) differs from %s (go test -update rewrites it):\n%s", tt.file, golden, got)
			}
			// What Import prints reads back as the same cluster.
			y, _ := manifest.Encode(res.Cluster)
			if _, err := manifest.Decode(y); err != nil {
				t.Errorf("the imported manifest does not decode: %v", err)
			}
		})
	}
}

// TestImportValid: the realistic inputs import to clusters that validate.
func TestImportValid(t *testing.T) {
	for _, tt := range []struct {
		file string
		opts Options
	}{
		{"docker-v1beta1.yaml", Options{}}, {"docker-v1beta2.yaml", Options{}}, {"aws-v1beta1.yaml", Options{Provider: "aws"}},
		{"inmemory-v1beta1.yaml", Options{}}, {"topology-v1beta2.yaml", Options{Provider: "sim"}},
		{"clusterclass-v1beta2.yaml", Options{}}, {"clusterclass-v1beta2.yaml", Options{Classes: true}}, {"classic-v1beta1.yaml", Options{}},
	} {
		in, _ := os.ReadFile(filepath.Join("testdata", tt.file))
		res, err := Import(in, tt.opts)
		if err != nil {
			t.Fatalf("%s: %v", tt.file, err)
		}
		if res.Invalid != nil {
			t.Errorf("%s: the imported cluster does not validate: %v", tt.file, res.Invalid)
		}
	}
}

func TestImportErrors(t *testing.T) {
	const cluster = `apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {name: a}
spec:
  controlPlaneRef: {kind: KubeadmControlPlane, name: a-cp}
  infrastructureRef: {kind: VSphereCluster, name: a}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata: {name: a-cp}
spec:
  replicas: 1
  version: v1.33.0
  machineTemplate:
    infrastructureRef: {kind: VSphereMachineTemplate, name: a-cp}
`
	aws, _ := os.ReadFile("testdata/aws-v1beta1.yaml")
	topo, _ := os.ReadFile("testdata/topology-v1beta2.yaml")
	class, _ := os.ReadFile("testdata/clusterclass-v1beta2.yaml")
	tests := []struct {
		name    string
		in      string
		opts    Options
		wantIs  error
		wantMsg string
	}{
		{name: "empty", in: "", wantIs: ErrNoCluster},
		{name: "only other kinds", in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", wantIs: ErrNoCluster},
		{name: "not YAML", in: "kind: [", wantMsg: "document 1: yaml:"},
		{name: "not a mapping", in: "- a\n- b\n", wantMsg: "document 1: must be a Kubernetes object"},
		{name: "no kind", in: "metadata: {name: x}\n", wantMsg: "document 1: not a Kubernetes object: apiVersion and kind are required"},
		{name: "no name", in: "apiVersion: v1\nkind: ConfigMap\n", wantMsg: "document 1: ConfigMap has no metadata.name"},
		{name: "unknown provider", in: cluster, wantIs: ErrNeedProvider, wantMsg: "VSphereMachineTemplate (VSphereMachineTemplate/a-cp, referenced by KubeadmControlPlane/a-cp): capn knows Docker* (docker) and InMemory*/Dev* in-memory (sim) kinds; pass --provider NAME"},
		{name: "aws without --provider", in: string(aws), wantIs: ErrNeedProvider, wantMsg: "AWSMachineTemplate"},
		{name: "topology without --provider", in: string(topo), wantIs: ErrNeedProvider, wantMsg: "uses ClusterClass quick-start, which is not in the input: add it, or pass --provider NAME"},
		{name: "classes without the ClusterClass", in: string(topo), opts: Options{Classes: true, Provider: "sim"},
			wantMsg: `Cluster/capi-quickstart: spec.topology.classRef: ClusterClass "quick-start" is not in the input: importing classes needs the Cluster API ClusterClass the topology names (and its templates) in the same input`},
		{name: "a ClusterClass without a control plane", in: strings.Replace(string(class), "    templateRef:\n      apiVersion: controlplane.cluster.x-k8s.io/v1beta2\n      kind: KubeadmControlPlaneTemplate\n      name: quick-start-control-plane\n", "", 1),
			wantMsg: "ClusterClass/quick-start: spec.controlPlane.templateRef: required: capn needs the class's KubeadmControlPlaneTemplate"},
		{name: "a ClusterClass with another control plane", in: strings.Replace(string(class), "kind: KubeadmControlPlaneTemplate\n      name: quick-start-control-plane", "kind: K3sControlPlaneTemplate\n      name: quick-start-control-plane", 1),
			wantMsg: "ClusterClass/quick-start: spec.controlPlane.templateRef: control plane kind K3sControlPlaneTemplate is not supported"},
		{name: "a topology class the ClusterClass lacks", in: strings.Replace(string(class), "- class: default-worker\n        name: md-0", "- class: big-worker\n        name: md-0", 1),
			wantMsg: `Cluster/dev: spec.topology.workers.machineDeployments[0].class: "big-worker" is not a machine deployment class of ClusterClass quick-start (it has default-worker, gpu-worker)`},
		{name: "two clusters", in: cluster + "---\n" + strings.Replace(cluster[:strings.Index(cluster, "---")], "name: a}", "name: b}", 1),
			wantIs: ErrAmbiguous, wantMsg: "several Clusters in the input (a, b): pick one"},
		{name: "a cluster that is not there", in: cluster, opts: Options{Cluster: "zz", Provider: "x"}, wantMsg: `no Cluster named "zz" in the input (it has a)`},
		{name: "old API version", in: strings.Replace(cluster, "v1beta1\nkind: Cluster", "v1alpha4\nkind: Cluster", 1), wantIs: ErrUnsupportedVersion},
		{name: "control plane missing", in: cluster[:strings.Index(cluster, "---")], opts: Options{Provider: "x"}, wantMsg: "KubeadmControlPlane/a-cp is not in the input"},
		{name: "other control plane kind", in: strings.Replace(cluster, "{kind: KubeadmControlPlane, name: a-cp}", "{kind: K3sControlPlane, name: a-cp}", 1),
			opts: Options{Provider: "x"}, wantMsg: "control plane kind K3sControlPlane is not supported"},
		{name: "bad provider name", in: cluster, opts: Options{Provider: "Not_A_Name"}, wantIs: ErrBadProvider, wantMsg: `provider "Not_A_Name"`},
		{name: "template variables", in: strings.Replace(cluster, "{name: a}", `{name: "${CLUSTER_NAME}"}`, 1), opts: Options{Provider: "x"}, wantMsg: "unsubstituted variable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Import([]byte(tt.in), tt.opts)
			if err == nil {
				t.Fatal("no error")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %q is not %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q lacks %q", err, tt.wantMsg)
			}
		})
	}
}

// TestImportPicksCluster: --cluster picks one of several, and the other's
// objects are reported as not imported.
func TestImportPicksCluster(t *testing.T) {
	in, _ := os.ReadFile("testdata/inmemory-v1beta1.yaml")
	other := strings.ReplaceAll(string(in), "scale-0001", "scale-0002")
	res, err := Import([]byte(string(in)+"---\n"+other), Options{Cluster: "scale-0002"})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Cluster.GetMetadata().GetName(); got != "scale-0002" {
		t.Fatalf("imported %s", got)
	}
	if len(res.Cluster.Spec.WorkerPools) != 1 || res.Cluster.Spec.WorkerPools[0].Name != "md-0" {
		t.Errorf("pools: %v", res.Cluster.Spec.WorkerPools)
	}
	var text []string
	for _, n := range res.Notes {
		text = append(text, n.String())
	}
	all := strings.Join(text, "\n")
	for _, want := range []string{
		"Cluster/scale-0001: another cluster: not imported",
		"MachineDeployment/scale-0001-md-0: not imported: it does not belong to cluster scale-0002",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("notes lack %q:\n%s", want, all)
		}
	}
}

// TestImportIgnitionFormat: a KubeadmConfigSpec with format: ignition
// (Cluster API's Flatcar flavours) maps to bootstrap.format ignition.
func TestImportIgnitionFormat(t *testing.T) {
	const in = `apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {name: flat}
spec:
  controlPlaneRef: {kind: KubeadmControlPlane, name: flat-cp}
  infrastructureRef: {kind: DockerCluster, name: flat}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata: {name: flat-cp}
spec:
  replicas: 1
  version: v1.33.0
  machineTemplate:
    infrastructureRef: {kind: DockerMachineTemplate, name: flat-cp}
  kubeadmConfigSpec:
    format: ignition
`
	res, err := Import([]byte(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Cluster.GetSpec().GetControlPlane().GetBootstrap().GetFormat(); got != "ignition" {
		t.Fatalf("controlPlane.bootstrap.format = %q, want ignition\n%s", got, render(t, res))
	}
	for _, n := range res.Notes {
		if strings.Contains(n.String(), "format") {
			t.Errorf("format reported as not mapped: %s", n)
		}
	}
	if res.Invalid != nil {
		t.Errorf("the imported cluster does not validate: %v", res.Invalid)
	}
}
