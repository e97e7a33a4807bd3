package manifest

import (
	"strings"
	"testing"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// TestValidateExternal: type external needs external.kubeconfig (a DNS
// label), and an external block with any other type is refused, each with
// one error naming the field.
func TestValidateExternal(t *testing.T) {
	ext := func(name string) *capnv1.ExternalControlPlaneSpec {
		return &capnv1.ExternalControlPlaneSpec{Kubeconfig: name}
	}
	tests := []struct {
		name string
		typ  string
		ext  *capnv1.ExternalControlPlaneSpec
		want string // "" valid
		// replicas of an external control plane (0: 1, as defaulted)
		replicas int32
	}{
		{"external with its kubeconfig", capnv1.ControlPlaneExternal, ext("prod-eks"), "", 0},
		{"machines without external", "", nil, "", 0},
		{"external without the block", capnv1.ControlPlaneExternal, nil,
			"spec.controlPlane.external.kubeconfig: required with type external: the name of the external cluster's kubeconfig, registered with `capn external-kubeconfig set NAME --kubeconfig FILE`", 0},
		{"external with an empty name", capnv1.ControlPlaneExternal, ext(""), "spec.controlPlane.external.kubeconfig: required with type external", 0},
		{"external with a bad name", capnv1.ControlPlaneExternal, ext("Prod_EKS"), `spec.controlPlane.external.kubeconfig: "Prod_EKS": must be a DNS-1123 label`, 0},
		{"external block with type machines", capnv1.ControlPlaneMachines, ext("prod-eks"),
			"spec.controlPlane.external: only with type external (type is machines): remove it, or set type: external", 0},
		{"external block with the default type", "", ext("prod-eks"), "spec.controlPlane.external: only with type external (type is machines)", 0},
		{"external block with type hosted", capnv1.ControlPlaneHosted, ext("prod-eks"), "spec.controlPlane.external: only with type external (type is hosted)", 0},
		{"external with 3 replicas", capnv1.ControlPlaneExternal, ext("prod-eks"),
			"spec.controlPlane.replicas: 3: must be 1 or left out with type external: the external cluster's owner runs its API servers", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			c.Spec.ControlPlane.Type, c.Spec.ControlPlane.External = tt.typ, tt.ext
			if tt.typ == capnv1.ControlPlaneExternal {
				c.Spec.ControlPlane.Replicas = tt.replicas
				if tt.replicas == 0 {
					c.Spec.ControlPlane.Replicas = 1 // Default's
				}
			}
			var errs fieldErrors
			validateExternal(c.Spec.ControlPlane, "spec.controlPlane", &errs)
			if tt.want == "" {
				if len(errs) != 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), tt.want) {
				t.Fatalf("got %v, want one error starting %q", errs, tt.want)
			}
		})
	}
	// Through Validate: the error reaches the manifest's check.
	c := valid()
	c.Spec.ControlPlane.External = ext("prod-eks")
	if err := Validate(c); err == nil || !strings.Contains(err.Error(), "spec.controlPlane.external: only with type external") {
		t.Fatalf("Validate: %v", err)
	}
}
