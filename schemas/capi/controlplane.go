package capi

import (
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// controlPlane maps a KubeadmControlPlane (v1beta1 or v1beta2).
func (c *converter) controlPlane(kcp *object) error {
	spec := kcp.at().field("spec")
	cp := &capnv1.ControlPlaneSpec{Replicas: 1}
	if r, ok := spec.field("replicas").integer(); ok {
		cp.Replicas = int32(r)
	}
	if v, ok := spec.field("version").str(); ok {
		c.out.Spec.KubernetesVersion = normalizeVersion(v)
	}

	mt := spec.field("machineTemplate")
	ref := mt.get("spec.infrastructureRef") // v1beta2
	if !ref.exists() {
		ref = mt.field("infrastructureRef") // v1beta1
	}
	tmpl, err := c.machineTemplate(kcp, ref)
	if err != nil {
		return err
	}
	cp.Provider, cp.Template = tmpl.provider, tmpl.template
	c.controlPlaneSettings(kcp, spec, cp)
	c.out.Spec.ControlPlane = cp
	return nil
}

// controlPlaneSettings maps the rollout and the bootstrap of a
// KubeadmControlPlane's spec or a KubeadmControlPlaneTemplate's
// spec.template.spec.
func (c *converter) controlPlaneSettings(kcp *object, spec node, cp *capnv1.ControlPlaneSpec) {
	// Rollout: v1beta2 spec.rollout.strategy, v1beta1 spec.rolloutStrategy.
	strategy := spec.get("rollout.strategy")
	if !strategy.exists() {
		strategy = spec.field("rolloutStrategy")
	}
	if t := strategy.field("type"); t.exists() {
		if s, _ := t.v.(string); s == "RollingUpdate" {
			t.use()
		} else {
			c.note(kcp, t, reasonCPStrategy)
		}
	}
	if ms := strategy.get("rollingUpdate.maxSurge"); ms.exists() {
		if v, ok := intOrPercent(ms); ok && (v == "0" || v == "1") {
			ms.use()
			s := int32(0)
			if v == "1" {
				s = 1
			}
			cp.MaxSurge = &s
		} else {
			c.note(kcp, ms, reasonCPSurge)
		}
	}

	boot, taints := c.kubeadmSpec(kcp, spec.field("kubeadmConfigSpec"), true)
	cp.Bootstrap = boot
	for _, t := range taints {
		c.note(kcp, t, reasonCPTaints)
	}
}
