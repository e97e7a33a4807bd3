package kubeconfig

import "testing"

// TestClusterInfo: kubeadm's cluster-info kubeconfig, byte for byte what
// controlplane-hosted and controlplane-external wrote before they shared
// it (a changed ConfigMap would be rewritten on every cluster).
func TestClusterInfo(t *testing.T) {
	b, err := ClusterInfo("https://10.0.0.7:6443", []byte("CA PEM"))
	if err != nil {
		t.Fatal(err)
	}
	want := `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0EgUEVN
    server: https://10.0.0.7:6443
  name: ""
contexts: []
kind: Config
users: []
`
	if string(b) != want {
		t.Errorf("cluster-info:\n%s\nwant:\n%s", b, want)
	}
}
