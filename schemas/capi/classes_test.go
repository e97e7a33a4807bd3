package capi

import (
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/schemas/topology"
)

func importFile(t *testing.T, file string, opts Options) *Result {
	t.Helper()
	in, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Import(in, opts)
	if err != nil {
		t.Fatalf("Import(%s): %v", file, err)
	}
	return res
}

// notesOf are the notes about one object, as text.
func notesOf(res *Result, object string) []string {
	var out []string
	for _, n := range res.Notes {
		if n.Object == object {
			out = append(out, n.String())
		}
	}
	return out
}

func hasNote(res *Result, want string) bool {
	for _, n := range res.Notes {
		if strings.Contains(n.String(), want) {
			return true
		}
	}
	return false
}

// TestImportClusterClass: a topology cluster whose ClusterClass is in the
// input takes the class's templates (provider, bootstrap), its health
// checks and the machine labels of its classes; each variable and patch
// is reported by name, the class's templates as used by the class.
func TestImportClusterClass(t *testing.T) {
	res := importFile(t, "clusterclass-v1beta2.yaml", Options{})
	s := res.Cluster.GetSpec()
	if got := s.GetControlPlane().GetProvider(); got != "docker" {
		t.Errorf("control plane provider %q, want docker (the class's DevMachineTemplate, docker backend)", got)
	}
	if got := s.GetControlPlane().GetBootstrap().GetKubeletExtraArgs()["eviction-hard"]; got == "" {
		t.Errorf("control plane kubelet arguments of the KubeadmControlPlaneTemplate not mapped: %v", s.GetControlPlane().GetBootstrap())
	}
	if got := s.GetHealth().GetNodeStartupTimeout().AsDuration().String(); got != "10m0s" {
		t.Errorf("cluster health from the class's controlPlane.healthCheck: nodeStartupTimeout %s, want 10m0s", got)
	}
	if len(s.GetWorkerPools()) != 1 {
		t.Fatalf("pools %v, want md-0", s.GetWorkerPools())
	}
	p := s.GetWorkerPools()[0]
	if p.GetProvider() != "docker" || p.GetReplicas() != 2 || p.GetDeletionOrder() != "Oldest" ||
		p.GetLabels()["tier"] != "general" || p.GetLabels()["team"] != "web" ||
		p.GetHealth().GetMaxUnhealthy() != "40%" || p.GetHealth().GetMaxInFlight() != 1 ||
		p.GetBootstrap().GetKubeletExtraArgs()["eviction-hard"] == "" {
		t.Errorf("pool md-0 lacks settings of its class default-worker: %v", p)
	}
	for _, want := range []string{
		"ClusterClass/quick-start: spec.variables[0]: variable imageRepository: ",
		"ClusterClass/quick-start: spec.variables[1]: variable podSecurityStandard: ",
		"Cluster/dev: spec.topology.variables[0]: variable imageRepository: ",
		"Cluster/dev: spec.topology.variables[1]: variable podSecurityStandard: ",
		"ClusterClass/quick-start: spec.patches[0]: patch imageRepository: capn cannot evaluate ClusterClass patches",
		"ClusterClass/quick-start: spec.patches[1]: patch customImage: ",
		"ClusterClass/quick-start: spec.patches[2]: patch podSecurityStandard: ",
		"KubeadmControlPlaneTemplate/quick-start-control-plane: spec.template.spec.kubeadmConfigSpec.clusterConfiguration: ",
		"ClusterClass/quick-start: spec.workers.machineDeployments[1]: no machine deployment of cluster dev uses this class",
		"DevMachinePoolTemplate/quick-start-default-worker-machinepooltemplate: not imported: used by ClusterClass quick-start for machine pool class default-worker, which capn does not import: capn has no machine pools",
		"KubeadmConfigTemplate/quick-start-gpu-worker-bootstraptemplate: not imported: used by ClusterClass quick-start for machine deployment class gpu-worker, which no machine deployment of cluster dev uses",
	} {
		if !hasNote(res, want) {
			t.Errorf("notes lack %q:\n%s", want, render(t, res))
		}
	}
	// The class's own templates are never reported as unreferenced.
	for _, n := range res.Notes {
		if strings.Contains(n.Reason, "references it") || strings.Contains(n.Reason, "does not read ClusterClasses") {
			t.Errorf("contradicting note: %s", n)
		}
	}
}

// TestImportHonest: each defect a user found in the report of an import,
// on a topology cluster with its class and on a classic v1beta1 one.
func TestImportHonest(t *testing.T) {
	for _, tt := range []struct {
		file, cluster, pool, fdPath, mhc string
	}{
		{"clusterclass-v1beta2.yaml", "Cluster/dev", "md-0", "spec.topology.workers.machineDeployments[0].failureDomain", "MachineHealthCheck/dev-gpu-unhealthy"},
		{"classic-v1beta1.yaml", "Cluster/team-a", "md-0", "spec.template.spec.failureDomain", "MachineHealthCheck/team-a-batch-unhealthy"},
	} {
		t.Run(tt.file, func(t *testing.T) {
			res := importFile(t, tt.file, Options{})
			// metadata.namespace is reported (capn has none), once: the
			// other objects share the Cluster's namespace.
			var ns []string
			for _, n := range res.Notes {
				if n.Path == "metadata.namespace" {
					ns = append(ns, n.String())
				}
			}
			if len(ns) != 1 || !strings.HasPrefix(ns[0], tt.cluster+": metadata.namespace = ") || !strings.Contains(ns[0], "capn has no namespaces") {
				t.Errorf("namespace notes %q, want one on %s", ns, tt.cluster)
			}
			// A failure domain whose definition is not imported is
			// dropped, with a note.
			for _, p := range res.Cluster.GetSpec().GetWorkerPools() {
				if fd := p.GetTemplate().GetFailureDomain(); fd != "" {
					t.Errorf("pool %s keeps failureDomain %s, whose definition is not imported", p.GetName(), fd)
				}
			}
			if !hasNote(res, tt.fdPath+` = "fd4": dropped: failure domain fd4 is defined in `) {
				t.Errorf("no note on %s:\n%s", tt.fdPath, render(t, res))
			}
			// A MachineHealthCheck that selects nothing is one note that
			// says so, not a list of its fields.
			if got := notesOf(res, tt.mhc); len(got) != 1 || !strings.Contains(got[0], "not applied: it selects no machine of cluster") {
				t.Errorf("notes of %s: %q, want one saying it selects nothing", tt.mhc, got)
			}
			listedOnce(t, res)
		})
	}
}

// TestImportTopologyHealth: a topology's own health check replaces its
// class's, and enabled: false turns the class's off; both are said.
func TestImportTopologyHealth(t *testing.T) {
	in, err := os.ReadFile("testdata/clusterclass-v1beta2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const pool = "        metadata:\n          labels:\n            team: web\n"
	for _, tt := range []struct {
		name, add, wantNote string
		wantNil             bool
	}{
		{name: "replaced", add: "        healthCheck:\n          checks:\n            nodeStartupTimeoutSeconds: 120\n",
			wantNote: "ClusterClass/quick-start: spec.workers.machineDeployments[0].healthCheck: replaced by Cluster/dev spec.topology.workers.machineDeployments[0].healthCheck, as in Cluster API"},
		{name: "disabled", add: "        healthCheck:\n          enabled: false\n", wantNil: true,
			wantNote: "ClusterClass/quick-start: spec.workers.machineDeployments[0].healthCheck: disabled by Cluster/dev spec.topology.workers.machineDeployments[0].healthCheck.enabled: false"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Import([]byte(strings.Replace(string(in), pool, pool+tt.add, 1)), Options{})
			if err != nil {
				t.Fatal(err)
			}
			h := res.Cluster.GetSpec().GetWorkerPools()[0].GetHealth()
			switch {
			case tt.wantNil && h != nil:
				t.Errorf("health %v, want none", h)
			case !tt.wantNil && h.GetNodeStartupTimeout().AsDuration().Seconds() != 120:
				t.Errorf("health %v, want the topology's (nodeStartupTimeout 2m)", h)
			}
			if !hasNote(res, tt.wantNote) {
				t.Errorf("notes lack %q:\n%s", tt.wantNote, render(t, res))
			}
		})
	}
}

// listedOnce: every field is listed once: no path twice, none inside
// another listed one, nothing more of an object reported whole.
func listedOnce(t *testing.T, res *Result) {
	t.Helper()
	seen := map[string]string{}
	for _, n := range res.Notes {
		for other, what := range seen {
			o, p, _ := strings.Cut(other, "\x00")
			if o != n.Object {
				continue
			}
			if p == n.Path || p == "" || strings.HasPrefix(n.Path, p+".") || strings.HasPrefix(n.Path, p+"[") {
				t.Errorf("%s is listed again: %s", what, n)
			}
		}
		seen[n.Object+"\x00"+n.Path] = n.String()
	}
}

// TestImportClusterClassV1beta1: the v1beta1 shape of a class (ref,
// template.bootstrap.ref, template.metadata, machineHealthCheck) and of
// a topology (class: NAME).
// smallV1beta1 is a v1beta1 ClusterClass capn maps whole, with its cluster.
const smallV1beta1 = `apiVersion: cluster.x-k8s.io/v1beta1
kind: ClusterClass
metadata: {name: small}
spec:
  controlPlane:
    ref: {apiVersion: controlplane.cluster.x-k8s.io/v1beta1, kind: KubeadmControlPlaneTemplate, name: small-cp}
    machineInfrastructure:
      ref: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta1, kind: DockerMachineTemplate, name: small}
    machineHealthCheck:
      nodeStartupTimeout: 7m
  infrastructure:
    ref: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta1, kind: DockerClusterTemplate, name: small}
  workers:
    machineDeployments:
    - class: worker
      template:
        metadata:
          labels: {tier: batch}
        bootstrap:
          ref: {apiVersion: bootstrap.cluster.x-k8s.io/v1beta1, kind: KubeadmConfigTemplate, name: small-worker}
        infrastructure:
          ref: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta1, kind: DockerMachineTemplate, name: small}
      machineHealthCheck:
        maxUnhealthy: 33%
      strategy:
        type: OnDelete
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: DockerClusterTemplate
metadata: {name: small}
spec: {template: {spec: {}}}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlaneTemplate
metadata: {name: small-cp}
spec:
  template:
    spec:
      kubeadmConfigSpec:
        preKubeadmCommands: [echo cp]
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: DockerMachineTemplate
metadata: {name: small}
spec: {template: {spec: {}}}
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfigTemplate
metadata: {name: small-worker}
spec:
  template:
    spec:
      preKubeadmCommands: [echo worker]
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {name: small}
spec:
  topology:
    class: small
    version: v1.33.4
    controlPlane: {replicas: 1}
    workers:
      machineDeployments:
      - {class: worker, name: md-0, replicas: 4}
`

func TestImportClusterClassV1beta1(t *testing.T) {
	in := smallV1beta1
	res, err := Import([]byte(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Notes) != 0 {
		t.Errorf("notes on a class capn maps whole:\n%s", render(t, res))
	}
	s := res.Cluster.GetSpec()
	if cp := s.GetControlPlane(); cp.GetProvider() != "docker" || len(cp.GetBootstrap().GetPreCommands()) != 1 {
		t.Errorf("control plane %v, want docker with the template's preKubeadmCommands", cp)
	}
	if got := s.GetHealth().GetNodeStartupTimeout().AsDuration().Minutes(); got != 7 {
		t.Errorf("cluster health %v, want the class's machineHealthCheck (7m)", s.GetHealth())
	}
	p := s.GetWorkerPools()[0]
	if p.GetName() != "md-0" || p.GetReplicas() != 4 || p.GetProvider() != "docker" || p.GetLabels()["tier"] != "batch" ||
		p.GetStrategy().GetType() != "OnDelete" || p.GetHealth().GetMaxUnhealthy() != "33%" ||
		len(p.GetBootstrap().GetPreCommands()) != 1 {
		t.Errorf("pool %v lacks its v1beta1 class's settings", p)
	}
}

// TestImportClassesV1beta1: with Classes, a v1beta1 class becomes a capn
// ClusterClass whose label variable renders, for the topology, the pool
// the flat import makes; a variable of a patch capn cannot follow is
// listed with why.
func TestImportClassesV1beta1(t *testing.T) {
	in := strings.Replace(smallV1beta1, "  infrastructure:\n    ref: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta1, kind: DockerClusterTemplate", `  variables:
  - name: team
    required: false
    schema: {openAPIV3Schema: {type: string, default: infra}}
  - name: size
    required: false
    schema: {openAPIV3Schema: {type: integer, default: 2, minimum: 1, maximum: 5}}
  patches:
  - name: teamLabel
    definitions:
    - selector:
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
        kind: DockerMachineTemplate
        matchResources: {machineDeploymentClass: {names: [worker]}}
      jsonPatches:
      - {op: add, path: /spec/template/metadata/labels/team, valueFrom: {variable: team}}
  - name: size
    definitions:
    - selector:
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
        kind: DockerMachineTemplate
        matchResources: {machineDeploymentClass: {names: [worker]}}
      jsonPatches:
      - {op: replace, path: /spec/template/spec/extraMounts, valueFrom: {variable: size}}
  infrastructure:
    ref: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta1, kind: DockerClusterTemplate`, 1)
	in = strings.Replace(in, "    controlPlane: {replicas: 1}\n", "    controlPlane: {replicas: 1}\n    variables:\n    - {name: team, value: web}\n    - {name: size, value: 3}\n", 1)
	flat, err := Import([]byte(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Import([]byte(in), Options{Classes: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Invalid != nil {
		t.Errorf("invalid: %v", res.Invalid)
	}
	cs := res.Class.GetSpec()
	if len(cs.GetVariables()) != 1 || cs.GetVariables()[0].GetName() != "team" || cs.GetVariables()[0].GetDefault() != "infra" ||
		!slices.Equal(cs.GetVariables()[0].GetPaths(), []string{"/workerPools/*/labels/team"}) {
		t.Errorf("variables %v, want team only, to /workerPools/*/labels/team", cs.GetVariables())
	}
	if v := cs.GetTemplate().GetKubernetesVersion(); v != "v1.33.4" {
		t.Errorf("template version %q, want the topology's v1.33.4", v)
	}
	topo := res.Cluster.GetSpec().GetTopology()
	if topo.GetClass() != "small" || topo.GetVariables()["team"] != "web" || len(topo.GetVariables()) != 1 ||
		len(topo.GetPools()) != 1 || topo.GetPools()[0].GetReplicas() != 4 {
		t.Errorf("topology %v, want class small, team=web, pool md-0 of 4", topo)
	}
	spec, err := topology.Render(res.Class, topo)
	if err != nil {
		t.Fatal(err)
	}
	got := spec.GetWorkerPools()[0]
	want := proto.CloneOf(flat.Cluster.GetSpec().GetWorkerPools()[0])
	want.PoolClass = "worker"
	want.Labels["team"] = "web"
	if got.GetLabels()["team"] != "web" || !proto.Equal(got, want) {
		t.Errorf("rendered pool %v, want the flat import's %v with label team=web", got, want)
	}
	var notes []string
	for _, n := range res.Notes {
		notes = append(notes, n.String())
	}
	all := strings.Join(notes, "\n")
	for _, w := range []string{
		"ClusterClass/small: spec.variables[1]: variable size: read by a patch that sets what capn does not have",
		"ClusterClass/small: spec.patches[1]: patch size: ",
		"Cluster/small: spec.topology.variables[1]: variable size: ",
	} {
		if !strings.Contains(all, w) {
			t.Errorf("notes lack %q:\n%s", w, all)
		}
	}
	if strings.Contains(all, "team") {
		t.Errorf("notes list the mapped variable team:\n%s", all)
	}

	// team read by a patch capn cannot follow too: neither it nor its
	// label patch maps, and both stay listed.
	res, err = Import([]byte(strings.Replace(in, "path: /spec/template/spec/extraMounts, valueFrom: {variable: size}", "path: /spec/template/spec/extraMounts, valueFrom: {variable: team}", 1)), Options{Classes: true})
	if err != nil {
		t.Fatal(err)
	}
	if vs := res.Class.GetSpec().GetVariables(); len(vs) != 0 {
		t.Errorf("variables %v, want none", vs)
	}
	notes = notes[:0]
	for _, n := range res.Notes {
		notes = append(notes, n.String())
	}
	all = strings.Join(notes, "\n")
	for _, w := range []string{"ClusterClass/small: spec.variables[0]: variable team: read by a patch", "ClusterClass/small: spec.patches[0]: patch teamLabel: "} {
		if !strings.Contains(all, w) {
			t.Errorf("notes lack %q:\n%s", w, all)
		}
	}
}
