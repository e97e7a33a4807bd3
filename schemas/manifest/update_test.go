package manifest

import (
	"strings"
	"testing"

	capnv1alpha1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func TestValidateUpdate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *capnv1alpha1.Cluster)
		want   []string
	}{
		{"patch upgrade", func(c *capnv1alpha1.Cluster) { c.Spec.KubernetesVersion = "v1.34.5" }, nil},
		{"minor upgrade, pools follow", func(c *capnv1alpha1.Cluster) {
			c.Spec.KubernetesVersion = "v1.35.0"
			c.Spec.WorkerPools[0].Version = ""
		}, nil},
		{"scale and template", func(c *capnv1alpha1.Cluster) {
			c.Spec.ControlPlane.Replicas = 5
			c.Spec.WorkerPools[0].Replicas = 10
			c.Spec.WorkerPools[0].Template = &capnv1alpha1.MachineTemplate{Parameters: map[string]string{"size": "xl"}}
		}, nil},
		{"pool skips minors", func(c *capnv1alpha1.Cluster) { c.Spec.WorkerPools[1].Version = "v1.34.2" }, nil},
		{"skip a minor", func(c *capnv1alpha1.Cluster) { c.Spec.KubernetesVersion = "v1.36.0" }, []string{
			`spec.kubernetesVersion: "v1.36.0": skips a minor version (was v1.34.2): upgrade to v1.35.x first`,
			// the defaulted pool follows to v1.36.0, which is a valid pool change
		}},
		{"downgrade", func(c *capnv1alpha1.Cluster) {
			c.Spec.KubernetesVersion = "v1.34.1"
			c.Spec.WorkerPools[0].Version = "v1.34.1"
		}, []string{
			`spec.kubernetesVersion: "v1.34.1": downgrade from v1.34.2: not supported`,
			`spec.workerPools[0].version: "v1.34.1": downgrade from v1.34.2: not supported`,
		}},
		{"pool newer than control plane", func(c *capnv1alpha1.Cluster) { c.Spec.WorkerPools[1].Version = "v1.35.0" }, []string{
			`spec.workerPools[1].version: "v1.35.0": newer than the control plane`,
		}},
		{"immutable", func(c *capnv1alpha1.Cluster) {
			c.Metadata.Name = "other"
			c.Spec.ControlPlane.Provider = "aws"
			c.Spec.WorkerPools[0].Provider = "aws"
			c.Spec.Network.PodCidrs = []string{"172.16.0.0/16"}
			c.Spec.Network.ServiceDomain = "example.local"
		}, []string{
			`metadata.name: "other": immutable (was "demo")`,
			`spec.controlPlane.provider: "aws": immutable (was "sim"): machines cannot move between providers`,
			`spec.workerPools[0].provider: "aws": immutable (was "sim")`,
			`spec.network.podCidrs: "172.16.0.0/16": immutable (was "192.168.0.0/16")`,
			`spec.network.serviceDomain: "example.local": immutable`,
		}},
		{"network left out equals the default", func(c *capnv1alpha1.Cluster) { c.Spec.Network = nil }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := valid()
			c := valid()
			tt.modify(c)
			err := ValidateUpdate(old, c)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected: %v", err)
				}
				return
			}
			got := flatten(err)
			for _, w := range tt.want {
				found := false
				for _, e := range got {
					found = found || strings.HasPrefix(e.Error(), w)
				}
				if !found {
					t.Errorf("no error starts with %q; got:\n%v", w, err)
				}
			}
			if len(got) != len(tt.want) {
				t.Errorf("got %d errors, want %d:\n%v", len(got), len(tt.want), err)
			}
		})
	}
	if err := ValidateUpdate(nil, valid()); err != nil {
		t.Errorf("create: %v", err)
	}
}
