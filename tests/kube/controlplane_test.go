//go:build linux

package kube_test

import (
	"fmt"
	"testing"

	"github.com/capn-dev/capn/providers/conformance"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// TestControlPlaneConformance runs the provider conformance suite's
// control-plane section (conformance.RunControlPlane: Initialise,
// EndpointReachable, Scale, Upgrade, DeleteLeavesNothing) against every
// control-plane implementation with real binaries: a capn deployment of
// programs per implementation, one cluster of one control-plane replica
// and no workers.
func TestControlPlaneConformance(t *testing.T) {
	// machines: the planner's own control plane, kube-local machines on the
	// process provider; it scales (1 → 3 → 1, etcd members with it) and
	// upgrades (a new machine at the new version replaces the old).
	t.Run("machines", func(t *testing.T) {
		var state string
		conformance.RunControlPlane(t, conformance.ControlPlane{
			Type:      capnv1.ControlPlaneMachines,
			Providers: []string{"process"},
			Setup: func(t *testing.T, e *conformance.ControlPlaneEnv) {
				state = startProcessProvider(t, e.KubeBin, e.NATSURL)
			},
			Manifest: func(name, version string, replicas int32) string {
				return fmt.Sprintf(machinesCPManifest, name, version, replicas)
			},
			Leftovers: func(t *testing.T, e *conformance.ControlPlaneEnv, cluster string, _ *capnv1.ControlPlaneRecord) []string {
				return processLeftovers(state, cluster)
			},
		}, conformance.ControlPlaneFeatures{Scale: true, ScaleTo: 3, Upgrade: true})
	})

	// hosted: controlplane-hosted's processes on the management side; a
	// live control plane scales 1 <-> 3 (etcd members and API servers one
	// at a time).
	t.Run("hosted", func(t *testing.T) {
		var dataDir string
		conformance.RunControlPlane(t, conformance.ControlPlane{
			Type: capnv1.ControlPlaneHosted,
			Setup: func(t *testing.T, e *conformance.ControlPlaneEnv) {
				dataDir = conformance.StartHosted(t, e.NATSURL, e.KubeBin)
			},
			Manifest: func(name, version string, replicas int32) string {
				return fmt.Sprintf(hostedCPManifest, name, version, replicas)
			},
			Leftovers: func(t *testing.T, e *conformance.ControlPlaneEnv, cluster string, last *capnv1.ControlPlaneRecord) []string {
				return conformance.HostedLeftovers(dataDir, cluster, last)
			},
		}, conformance.ControlPlaneFeatures{Scale: true, ScaleTo: 3, Upgrade: true})
	})

	// external: an API server the test runs outside capn, registered with
	// capn external-kubeconfig set. capn neither scales nor upgrades it:
	// replicas other than 1 are refused at apply, and the record reports
	// the version the server runs.
	t.Run("external", func(t *testing.T) {
		var ext *externalCluster
		conformance.RunControlPlane(t, conformance.ControlPlane{
			Type: capnv1.ControlPlaneExternal,
			Setup: func(t *testing.T, e *conformance.ControlPlaneEnv) {
				ext = startExternalCluster(t)
				conformance.StartExternal(t, e.Capn, e.NATSURL, "--external-resync=2s")
				e.Kubeconfig = ext.register(t, e.Capn, "ext")
				e.ObservedVersion = ext.Version
			},
			Manifest: func(name, version string, replicas int32) string {
				return fmt.Sprintf(externalCPManifest, name, version, replicas)
			},
			// The join objects capn made there gone; the API server
			// answering, with what capn did not make.
			Leftovers: func(t *testing.T, e *conformance.ControlPlaneEnv, cluster string, _ *capnv1.ControlPlaneRecord) []string {
				return append(ext.joinObjects(t, cluster), ext.untouched(t)...)
			},
		}, conformance.ControlPlaneFeatures{Scale: false, Upgrade: false})
	})
}

// The section's clusters: a control plane of the given replicas, no
// worker pool.
const (
	machinesCPManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  bootstrap:
    provider: kube-local
  controlPlane:
    provider: process
    replicas: %d
`
	hostedCPManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  bootstrap:
    provider: kube-local
  controlPlane:
    type: hosted
    replicas: %d
`
	externalCPManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  bootstrap:
    provider: kube-local
  controlPlane:
    type: external
    replicas: %d
    external: {kubeconfig: ext}
`
)
