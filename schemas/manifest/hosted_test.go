package manifest

import (
	"strings"
	"testing"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// noMachines clears the fields that shape control-plane machines, which a
// hosted control plane must leave empty.
func noMachines(cp *capnv1.ControlPlaneSpec) {
	cp.Provider, cp.MaxSurge, cp.Template, cp.Os = "", nil, nil, ""
}

func TestValidateHosted(t *testing.T) {
	tests := []struct {
		name   string
		modify func(cp *capnv1.ControlPlaneSpec)
		want   string // "" valid
	}{
		{"hosted 1", func(cp *capnv1.ControlPlaneSpec) { noMachines(cp); cp.Type, cp.Replicas = capnv1.ControlPlaneHosted, 1 }, ""},
		{"hosted 3 with settings", func(cp *capnv1.ControlPlaneSpec) {
			noMachines(cp)
			cp.Type, cp.Replicas, cp.Hosted = capnv1.ControlPlaneHosted, 3, &capnv1.HostedControlPlaneSpec{}
		}, ""},
		{"hosted 5", func(cp *capnv1.ControlPlaneSpec) { cp.Type, cp.Replicas = capnv1.ControlPlaneHosted, 5 },
			"spec.controlPlane.replicas: 5: a hosted control plane runs 1 or 3 replicas"},
		{"hosted 7", func(cp *capnv1.ControlPlaneSpec) { cp.Type, cp.Replicas = capnv1.ControlPlaneHosted, 7 },
			"spec.controlPlane.replicas: 7: a hosted control plane runs 1 or 3 replicas"},
		{"hosted settings on machines", func(cp *capnv1.ControlPlaneSpec) { cp.Hosted = &capnv1.HostedControlPlaneSpec{} },
			"spec.controlPlane.hosted: only with type hosted (type is machines)"},
		{"hosted settings on external", func(cp *capnv1.ControlPlaneSpec) {
			cp.Type, cp.Hosted = capnv1.ControlPlaneExternal, &capnv1.HostedControlPlaneSpec{}
		}, "spec.controlPlane.hosted: only with type hosted (type is external)"},
		{"machines 5 still fine", func(cp *capnv1.ControlPlaneSpec) { cp.Replicas = 5 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.modify(c.Spec.ControlPlane)
			err := Validate(c)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("want an error containing %q, got %v", tt.want, err)
			}
		})
	}
}
