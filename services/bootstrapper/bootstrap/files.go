package bootstrap

import (
	"path"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Paths on the machine, as kubeadm and Cluster API use them.
const (
	// PKIDir is where kubeadm looks for the cluster PKI.
	PKIDir = "/etc/kubernetes/pki"
	// KubeadmInitConfig is the kubeadm config of the first control-plane
	// machine; KubeadmJoinConfig that of every other machine.
	KubeadmInitConfig = "/run/kubeadm/kubeadm.yaml"
	KubeadmJoinConfig = "/run/kubeadm/kubeadm-join-config.yaml"
	// SentinelFile is written once kubeadm init or join has succeeded
	// (Cluster API's bootstrap success sentinel).
	SentinelFile = "/run/cluster-api/bootstrap-success.complete"
	// CapnDir holds the join material the script provider writes.
	CapnDir = "/run/capn"
	// CapnEtcDir holds what capn writes to last across reboots: the
	// kube-local node config, the Ignition bootstrap script and its
	// kubeadm config.
	CapnEtcDir = "/etc/capn"
)

// File is a file a provider writes on the machine.
type File struct {
	Path    string
	Content []byte
	// Owner is "user[:group]"; empty means the tool's default (root).
	Owner string
	// Permissions in octal, e.g. "0600"; empty means the tool's default.
	Permissions string
}

// PKIFiles lists the PKI files of p under PKIDir in a fixed order, with
// kubeadm's modes (certificates 0644, keys 0600); parts p lacks are left
// out, so a worker's PKI gives just ca.crt.
func PKIFiles(p PKI) []File {
	all := []struct {
		name string
		data []byte
		mode string
	}{
		{"ca.crt", p.CACert, "0644"},
		{"ca.key", p.CAKey, "0600"},
		{"etcd/ca.crt", p.EtcdCACert, "0644"},
		{"etcd/ca.key", p.EtcdCAKey, "0600"},
		{"front-proxy-ca.crt", p.FrontProxyCACert, "0644"},
		{"front-proxy-ca.key", p.FrontProxyCAKey, "0600"},
		{"sa.pub", p.ServiceAccountPublic, "0644"},
		{"sa.key", p.ServiceAccountKey, "0600"},
	}
	var files []File
	for _, f := range all {
		if len(f.data) > 0 {
			files = append(files, File{Path: path.Join(PKIDir, f.name), Content: f.data, Owner: "root:root", Permissions: f.mode})
		}
	}
	return files
}

// UserFiles converts the spec's files, in order. Permissions written with
// three digits get a leading zero.
func UserFiles(spec *capnv1.BootstrapSpec) []File {
	var files []File
	for _, f := range spec.GetFiles() {
		perm := f.GetPermissions()
		if len(perm) == 3 {
			perm = "0" + perm
		}
		files = append(files, File{Path: f.GetPath(), Content: []byte(f.GetContent()), Owner: f.GetOwner(), Permissions: perm})
	}
	return files
}

// IsReservedPath is true for paths capn writes itself, which user files may
// not replace: the PKI files, the kubeadm configs, the sentinel, and
// anything under CapnDir or CapnEtcDir.
func IsReservedPath(p string) bool {
	switch p {
	case KubeadmInitConfig, KubeadmJoinConfig, SentinelFile:
		return true
	}
	for _, dir := range []string{CapnDir, CapnEtcDir} {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			return true
		}
	}
	for _, f := range PKIFiles(PKI{
		CACert: []byte{1}, CAKey: []byte{1}, EtcdCACert: []byte{1}, EtcdCAKey: []byte{1},
		FrontProxyCACert: []byte{1}, FrontProxyCAKey: []byte{1}, ServiceAccountPublic: []byte{1}, ServiceAccountKey: []byte{1},
	}) {
		if p == f.Path {
			return true
		}
	}
	return false
}
