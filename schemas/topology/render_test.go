package topology_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/schemas/topology"
)

func ptr[T any](v T) *T { return &v }

// class is a small valid class: a sim control plane, two pool classes and
// four variables.
func class() *capnv1.ClusterClass {
	return &capnv1.ClusterClass{
		ApiVersion: manifest.APIVersion, Kind: topology.KindClusterClass,
		Metadata: &capnv1.ObjectMeta{Name: "standard"},
		Spec: &capnv1.ClusterClassSpec{
			Template: &capnv1.ClusterSpec{
				KubernetesVersion: "v1.34.2",
				ControlPlane:      &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 1},
			},
			PoolClasses: []*capnv1.PoolClass{
				{Name: "general", Template: &capnv1.WorkerPool{Provider: "sim", Replicas: 2}},
				{Name: "gpu", Template: &capnv1.WorkerPool{Provider: "sim", Replicas: 1, Labels: map[string]string{"gpu": "true"}}},
			},
			Variables: []*capnv1.ClassVariable{
				{Name: "version", Type: "string", Default: "v1.34.2", Paths: []string{"/kubernetesVersion"}},
				{Name: "cpReplicas", Type: "integer", Default: "1", Enum: []string{"1", "3", "5"}, Paths: []string{"/controlPlane/replicas"}},
				{Name: "workers", Type: "integer", Minimum: ptr[int64](0), Maximum: ptr[int64](50), Paths: []string{"/workerPools/*/replicas"}},
				{Name: "tier", Type: "string", Required: true, Enum: []string{"dev", "prod"}, Paths: []string{"/workerPools/*/labels/tier", "/controlPlane/template/parameters/tier"}},
				{Name: "paused", Type: "boolean", Default: "false", Paths: []string{"/paused"}},
			},
		},
		Status: &capnv1.ClusterClassStatus{Revision: 3},
	}
}

func TestValidClass(t *testing.T) {
	if err := topology.ValidateClass(class()); err != nil {
		t.Fatal(err)
	}
}

func TestRender(t *testing.T) {
	topo := &capnv1.ClusterTopology{
		Class: "standard", Revision: 3,
		Variables: map[string]string{"tier": "prod", "workers": "4", "cpReplicas": "3"},
		Pools: []*capnv1.TopologyPool{
			{Name: "md-0", Class: "general"},
			{Name: "md-gpu", Class: "gpu", Replicas: ptr[int32](7)},
		},
	}
	got, err := topology.Render(class(), topo)
	if err != nil {
		t.Fatal(err)
	}
	want := &capnv1.ClusterSpec{
		KubernetesVersion: "v1.34.2",
		ControlPlane: &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 3,
			Template: &capnv1.MachineTemplate{Parameters: map[string]string{"tier": "prod"}}},
		WorkerPools: []*capnv1.WorkerPool{
			{Name: "md-0", PoolClass: "general", Provider: "sim", Replicas: 4, Labels: map[string]string{"tier": "prod"}},
			// workers applies to every pool, after a pool's own replicas.
			{Name: "md-gpu", PoolClass: "gpu", Provider: "sim", Replicas: 4, Labels: map[string]string{"gpu": "true", "tier": "prod"}},
		},
		Topology: topo,
	}
	if !proto.Equal(got, want) {
		t.Fatalf("rendered\n%v\nwant\n%v", got, want)
	}
	// Deterministic, and the class is not changed.
	again, _ := topology.Render(class(), topo)
	if !proto.Equal(got, again) {
		t.Fatal("two renders differ")
	}
	if c := class(); topology.Hash(c.Spec) != topology.Hash(class().Spec) {
		t.Fatal("hash differs for equal specs")
	}
	if v := class(); topology.Hash(v.Spec) == func() string { v.Spec.Template.KubernetesVersion = "v1.35.0"; return topology.Hash(v.Spec) }() {
		t.Fatal("hash equal for different specs")
	}
}

// TestRenderReportsEveryBadVariable: every bad variable and pool at once,
// each with its path.
func TestRenderReportsEveryBadVariable(t *testing.T) {
	topo := &capnv1.ClusterTopology{
		Class: "standard",
		Variables: map[string]string{
			"workers":    "lots",
			"cpReplicas": "2",
			"paused":     "yes",
			"colour":     "blue",
		},
		Pools: []*capnv1.TopologyPool{{Name: "md-0", Class: "huge"}, {Name: "md-1", Class: "general"}, {Name: "md-1", Class: "gpu"}},
	}
	_, err := topology.Render(class(), topo)
	want := []string{
		`spec.topology.pools[0].class: "huge": not a pool class of class standard revision 3; allowed: general, gpu`,
		`spec.topology.pools[2].name: "md-1": duplicate pool name`,
		`spec.topology.variables[colour]: unknown variable of class standard revision 3; it has: version, cpReplicas, workers, tier, paused`,
		`spec.topology.variables[cpReplicas]: "2": must be one of 1, 3, 5`,
		`spec.topology.variables[workers]: "lots": must be an integer`,
		`spec.topology.variables[tier]: required by class standard revision 3 (string, one of dev, prod)`,
		`spec.topology.variables[paused]: "yes": must be true or false`,
	}
	var got []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *manifest.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a FieldError", e)
		}
		got = append(got, e.Error())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("errors\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := topology.Render(class(), &capnv1.ClusterTopology{Variables: map[string]string{"tier": "dev", "workers": "51"}}); err == nil ||
		err.Error() != `spec.topology.variables[workers]: "51": must be at most 50` {
		t.Fatalf("bound: %v", err)
	}
}

func TestValidateClassReportsEverything(t *testing.T) {
	c := class()
	c.Metadata.Name = "Bad_Name"
	c.Spec.Template.WorkerPools = []*capnv1.WorkerPool{{Name: "x"}}
	c.Spec.PoolClasses = append(c.Spec.PoolClasses, &capnv1.PoolClass{Name: "gpu"})
	c.Spec.Variables = append(c.Spec.Variables,
		&capnv1.ClassVariable{Name: "9lives", Type: "float", Paths: []string{"/x"}},
		&capnv1.ClassVariable{Name: "size", Type: "integer", Default: "9", Minimum: ptr[int64](5), Maximum: ptr[int64](1), Enum: []string{"a"}, Paths: []string{"/controlPlane/provider", "/workerPools/replicas", "/network/podCidrs", "controlPlane/replicas", "/topology/class"}},
		&capnv1.ClassVariable{Name: "must", Type: "string", Required: true, Default: "x", Paths: []string{"/controlPlane/template/parameters/a/b"}},
		&capnv1.ClassVariable{Name: "flag", Type: "boolean"},
	)
	err := topology.ValidateClass(c)
	want := []string{
		`metadata.name: "Bad_Name": required: a DNS label`,
		`spec.template.workerPools: must be empty`,
		`spec.poolClasses[2].name: "gpu": duplicate pool class`,
		`spec.poolClasses[2].template: required`,
		`spec.variables[5].name: "9lives": required: a letter`,
		`spec.variables[5].type: "float": must be one of string, integer, boolean`,
		`spec.variables[6].maximum: 1: must be at least minimum (5)`,
		`spec.variables[6].enum[0]: "a": must be an integer`,
		`spec.variables[6].default: "9": must be at most 1`,
		`spec.variables[6].paths[0]: "/controlPlane/provider": provider is a string field: a variable of type integer cannot set it`,
		`spec.variables[6].paths[1]: "/workerPools/replicas": workerPools is a list: the path must go on with a name (or *) and a field`,
		`spec.variables[6].paths[2]: "/network/podCidrs": podCidrs is a list a path cannot index`,
		`spec.variables[6].paths[3]: "controlPlane/replicas": must start with "/"`,
		`spec.variables[6].paths[4]: "/topology/class": the topology is the cluster's own`,
		`spec.variables[7].default: "x": a required variable takes no default`,
		`spec.variables[7].paths[0]: "/controlPlane/template/parameters/a/b": parameters is a map: the path must end with one key after it`,
		`spec.variables[8].paths: required`,
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("missing %q in\n%s", w, msg)
		}
	}
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != len(want) {
		t.Errorf("%d errors, want %d:\n%s", n, len(want), msg)
	}
}
