package manifest

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func TestValidateUpdate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *capnv1.Cluster)
		want   []string
	}{
		{"patch upgrade", func(c *capnv1.Cluster) { c.Spec.KubernetesVersion = "v1.34.5" }, nil},
		{"minor upgrade, pools follow", func(c *capnv1.Cluster) {
			c.Spec.KubernetesVersion = "v1.35.0"
			c.Spec.WorkerPools[0].Version = ""
		}, nil},
		{"scale and template", func(c *capnv1.Cluster) {
			c.Spec.ControlPlane.Replicas = 5
			c.Spec.WorkerPools[0].Replicas = 10
			c.Spec.WorkerPools[0].Template = &capnv1.MachineTemplate{Parameters: map[string]string{"size": "xl"}}
		}, nil},
		{"pool skips minors", func(c *capnv1.Cluster) { c.Spec.WorkerPools[1].Version = "v1.34.2" }, nil},
		{"skip a minor", func(c *capnv1.Cluster) { c.Spec.KubernetesVersion = "v1.36.0" }, []string{
			`spec.kubernetesVersion: "v1.36.0": skips a minor version (was v1.34.2): upgrade to v1.35.x first`,
			// the defaulted pool follows to v1.36.0, which is a valid pool change
		}},
		{"downgrade", func(c *capnv1.Cluster) {
			c.Spec.KubernetesVersion = "v1.34.1"
			c.Spec.WorkerPools[0].Version = "v1.34.1"
		}, []string{
			`spec.kubernetesVersion: "v1.34.1": downgrade from v1.34.2: not supported`,
			`spec.workerPools[0].version: "v1.34.1": downgrade from v1.34.2: not supported`,
		}},
		{"pool newer than control plane", func(c *capnv1.Cluster) { c.Spec.WorkerPools[1].Version = "v1.35.0" }, []string{
			`spec.workerPools[1].version: "v1.35.0": newer than the control plane`,
		}},
		{"immutable", func(c *capnv1.Cluster) {
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
		{"network left out equals the default", func(c *capnv1.Cluster) { c.Spec.Network = nil }, nil},
		{"control-plane type", func(c *capnv1.Cluster) {
			c.Spec.ControlPlane.Type = capnv1.ControlPlaneHosted
			c.Spec.ControlPlane.Provider, c.Spec.ControlPlane.MaxSurge = "", nil
		}, []string{
			"spec.controlPlane.type: is machines, cannot change to hosted on a live cluster; create a new cluster",
		}},
		{"control-plane type machines is the default", func(c *capnv1.Cluster) { c.Spec.ControlPlane.Type = capnv1.ControlPlaneMachines }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := valid()
			c := valid()
			tt.modify(c)
			err := ValidateUpdate(old, c)
			// The edge's way: check once, then only the update rules.
			checked := Validator{}.Check(proto.CloneOf(c)).ValidateUpdate(old)
			if errText(checked) != errText(err) {
				t.Errorf("Checked.ValidateUpdate:\n%v\nValidator.ValidateUpdate:\n%v", checked, err)
			}
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
	if err := (Validator{}).Check(valid()).ValidateUpdate(nil); err != nil {
		t.Errorf("create, checked: %v", err)
	}
}

func TestCheck(t *testing.T) {
	c := valid()
	c.Spec.Network = nil
	k := Validator{}.Check(c)
	if k.Cluster() != c || k.Err() != nil {
		t.Fatalf("Check(valid) = %v, %v; want the same cluster, valid", k.Cluster(), k.Err())
	}
	if c.Spec.GetNetwork().GetServiceDomain() != DefaultServiceDomain {
		t.Errorf("Check did not default in place: network %v", c.Spec.Network)
	}
	bad := valid()
	bad.Spec.WorkerPools[0].Replicas = 11
	if err, want := (Validator{MaxPoolReplicas: 10}).Check(bad).Err(), (Validator{MaxPoolReplicas: 10}).Validate(bad); err == nil || errText(err) != errText(want) {
		t.Errorf("Check(over bound).Err() = %v, want %v", err, want)
	}
	var zero Checked
	if zero.Cluster() != nil || errText(zero.Err()) != errText(Validate(nil)) {
		t.Errorf("zero Checked = %v, %v; want no cluster", zero.Cluster(), zero.Err())
	}
	if errText(zero.ValidateUpdate(valid())) != errText(ValidateUpdate(valid(), nil)) {
		t.Errorf("zero Checked update = %v", zero.ValidateUpdate(valid()))
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
