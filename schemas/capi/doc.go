// Package capi converts Cluster API manifests (cluster.x-k8s.io v1beta1
// and v1beta2) into a capn Cluster: `capn import`.
//
// Import reads every document of the input, picks the Cluster and follows
// its references: the KubeadmControlPlane and its machine template, the
// MachineDeployments of the cluster with their KubeadmConfigTemplates and
// machine templates, and the MachineHealthChecks; for a topology, the
// ClusterClass and its templates. Every field it reads is
// marked consumed; every field left is reported as a Note with its path,
// so nothing is dropped silently. See README.md for the mapping.
//
// The package is pure: no I/O, no clocks.
package capi
