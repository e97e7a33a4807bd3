package manifest

import (
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Names and defaults of the Cluster resource.
const (
	// ControlPlanePool is the pool name of control-plane machines; no worker
	// pool may take it.
	ControlPlanePool = "control-plane"

	StrategyRollingUpdate = "RollingUpdate"
	StrategyOnDelete      = "OnDelete"

	DeletionOrderRandom = "Random"
	DeletionOrderNewest = "Newest"
	DeletionOrderOldest = "Oldest"

	TaintNoSchedule       = "NoSchedule"
	TaintPreferNoSchedule = "PreferNoSchedule"
	TaintNoExecute        = "NoExecute"

	DefaultControlPlaneReplicas = 1
	DefaultControlPlaneMaxSurge = 1
	DefaultMaxSurge             = "1"
	DefaultMaxUnavailable       = "0"
	DefaultPodCIDR              = "192.168.0.0/16"
	DefaultServiceCIDR          = "10.96.0.0/12"
	DefaultServiceDomain        = "cluster.local"
	DefaultBootstrapProvider    = "kubeadm"

	// Operating systems of machines (os; empty is linux, and Default
	// leaves it empty so that no stored spec changes).
	OSLinux   = "linux"
	OSWindows = "windows"

	// Bootstrap data formats (bootstrap.format; empty: the provider's).
	FormatCloudConfig = "cloud-config"
	FormatScript      = "script"
	FormatIgnition    = "ignition"

	// Bounds of bootstrap.commandTimeout (unset: 5m).
	MinCommandTimeout = time.Second
	MaxCommandTimeout = 24 * time.Hour
)

// WindowsBootstrapProviders are the bootstrap providers that render
// windows machines, IgnitionBootstrapProviders those that render
// format: ignition. A deployment with more providers may append to them
// at start-up, as to KnownBootstrapProviders.
var (
	WindowsBootstrapProviders  = []string{"kubeadm"}
	IgnitionBootstrapProviders = []string{"kubeadm"}
)

// OSOf is an os as written: "" is linux.
func OSOf(os string) string {
	if os == "" {
		return OSLinux
	}
	return os
}

// KnownBootstrapProviders are the bootstrap providers Validate accepts unless
// a Validator is given its own list. A deployment with more providers may
// append to it at start-up, before any validation runs.
var KnownBootstrapProviders = []string{"kube-local", "kubeadm", "script"}

// Default fills what a manifest may leave out, in place; it is idempotent.
// Missing required parts (metadata, spec, spec.controlPlane) are left missing
// for Validate to report.
//
//   - spec.controlPlane.replicas 0 → 1 (proto3 cannot tell 0 from absent, and
//     0 is never valid); spec.controlPlane.maxSurge absent → 1 (type
//     machines only: a hosted or external control plane has no machines).
//   - every pool: strategy RollingUpdate with maxSurge "1" and maxUnavailable
//     "0" (only for RollingUpdate); deletionOrder Random; version = the
//     cluster's kubernetesVersion. Pool replicas stay as written: 0 is valid.
//   - network: pod CIDR 192.168.0.0/16, service CIDR 10.96.0.0/12, service
//     domain cluster.local.
//   - spec.bootstrap.provider kubeadm; a control-plane or pool bootstrap
//     override without a provider gets the cluster's.
//
// Nothing here changes a machine's template hash on its own: defaults land in
// the stored spec once, at apply time, so a new default in a later capn
// release never rolls existing machines.
func Default(c *capnv1.Cluster) {
	s := c.GetSpec()
	if s == nil {
		return
	}
	if s.Bootstrap == nil {
		s.Bootstrap = &capnv1.BootstrapSpec{}
	}
	if s.Bootstrap.Provider == "" {
		s.Bootstrap.Provider = DefaultBootstrapProvider
	}
	if cp := s.ControlPlane; cp != nil {
		if cp.Replicas == 0 {
			cp.Replicas = DefaultControlPlaneReplicas
		}
		if cp.MaxSurge == nil && cp.Implementation() == capnv1.ControlPlaneMachines {
			surge := int32(DefaultControlPlaneMaxSurge)
			cp.MaxSurge = &surge
		}
		if cp.Bootstrap != nil && cp.Bootstrap.Provider == "" {
			cp.Bootstrap.Provider = s.Bootstrap.Provider
		}
	}
	for _, p := range s.WorkerPools {
		if p == nil {
			continue
		}
		if p.Strategy == nil {
			p.Strategy = &capnv1.RolloutStrategy{}
		}
		if p.Strategy.Type == "" {
			p.Strategy.Type = StrategyRollingUpdate
		}
		if p.Strategy.Type == StrategyRollingUpdate {
			if p.Strategy.MaxSurge == "" {
				p.Strategy.MaxSurge = DefaultMaxSurge
			}
			if p.Strategy.MaxUnavailable == "" {
				p.Strategy.MaxUnavailable = DefaultMaxUnavailable
			}
		}
		if p.DeletionOrder == "" {
			p.DeletionOrder = DeletionOrderRandom
		}
		if p.Version == "" {
			p.Version = s.KubernetesVersion
		}
		if p.Bootstrap != nil && p.Bootstrap.Provider == "" {
			p.Bootstrap.Provider = s.Bootstrap.Provider
		}
	}
	if s.Network == nil {
		s.Network = &capnv1.NetworkSpec{}
	}
	if len(s.Network.PodCidrs) == 0 {
		s.Network.PodCidrs = []string{DefaultPodCIDR}
	}
	if len(s.Network.ServiceCidrs) == 0 {
		s.Network.ServiceCidrs = []string{DefaultServiceCIDR}
	}
	if s.Network.ServiceDomain == "" {
		s.Network.ServiceDomain = DefaultServiceDomain
	}
}
