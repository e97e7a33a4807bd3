package fleetmanager

import (
	"strings"
	"testing"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func classRev(rev int64, version string, cpReplicas int32) *capnv1.ClusterClass {
	return &capnv1.ClusterClass{
		Metadata: &capnv1.ObjectMeta{Name: "standard"},
		Spec: &capnv1.ClusterClassSpec{
			Template: &capnv1.ClusterSpec{KubernetesVersion: version, ControlPlane: &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: cpReplicas}},
			Variables: []*capnv1.ClassVariable{
				{Name: "size", Type: "string", Default: "s", Paths: []string{"/controlPlane/template/parameters/size"}},
			},
		},
		Status: &capnv1.ClusterClassStatus{Revision: rev},
	}
}

func classCluster() *capnv1.Cluster {
	return &capnv1.Cluster{
		Metadata: &capnv1.ObjectMeta{Name: "c1", Generation: 4},
		Spec: &capnv1.ClusterSpec{
			KubernetesVersion: "v1.34.2",
			ControlPlane:      &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 1, Template: &capnv1.MachineTemplate{Parameters: map[string]string{"size": "s"}}},
			Paused:            true,
			Topology:          &capnv1.ClusterTopology{Class: "standard", Revision: 1},
		},
	}
}

// The change a rollout writes: re-rendered from the new revision (paused
// kept, generation bumped), validated as an apply would be; variables
// merged into the topology; a Kubernetes version for a cluster without a
// class. A change that breaks a rule is refused, not written.
func TestApplyChange(t *testing.T) {
	c := classCluster()
	next, err := applyChange(c, &capnv1.RolloutChange{Class: "standard", ClassRevision: 2}, classRev(2, "v1.34.3", 1))
	if err != nil {
		t.Fatal(err)
	}
	if next.GetSpec().GetKubernetesVersion() != "v1.34.3" || next.GetSpec().GetTopology().GetRevision() != 2 || !next.GetSpec().GetPaused() || next.GetMetadata().GetGeneration() != 5 {
		t.Fatalf("moved cluster %v", next)
	}
	if c.GetSpec().GetTopology().GetRevision() != 1 {
		t.Fatal("applyChange changed its input")
	}
	if !atChange(next, &capnv1.RolloutChange{Class: "standard", ClassRevision: 2}) || atChange(c, &capnv1.RolloutChange{Class: "standard", ClassRevision: 2}) {
		t.Fatal("atChange")
	}

	next, err = applyChange(c, &capnv1.RolloutChange{Variables: map[string]string{"size": "l"}}, classRev(1, "v1.34.2", 1))
	if err != nil || next.GetSpec().GetControlPlane().GetTemplate().GetParameters()["size"] != "l" {
		t.Fatalf("variables: %v %v", next.GetSpec(), err)
	}

	// A control plane of 2 replicas breaks a rule: refused with the path.
	_, err = applyChange(c, &capnv1.RolloutChange{Class: "standard", ClassRevision: 3}, classRev(3, "v1.34.3", 2))
	if err == nil || !strings.Contains(err.Error(), "spec.controlPlane.replicas") {
		t.Fatalf("a bad revision: %v", err)
	}
	// A downgrade is refused as apply refuses it.
	_, err = applyChange(c, &capnv1.RolloutChange{Class: "standard", ClassRevision: 4}, classRev(4, "v1.33.0", 1))
	if err == nil {
		t.Fatal("a downgrade was accepted")
	}

	plain := &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "p", Generation: 1},
		Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2", ControlPlane: &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 1}}}
	ch := &capnv1.RolloutChange{KubernetesVersion: "v1.34.3"}
	if !applies(plain, ch) || applies(c, ch) || applies(plain, &capnv1.RolloutChange{Class: "standard"}) {
		t.Fatal("applies")
	}
	next, err = applyChange(plain, ch, nil)
	if err != nil || next.GetSpec().GetKubernetesVersion() != "v1.34.3" {
		t.Fatalf("version: %v %v", next, err)
	}
}
