package kubeconfig

import "sigs.k8s.io/yaml"

// ClusterInfo is the kubeconfig kube-public/cluster-info holds, as kubeadm
// writes it: one unnamed cluster (server and CA) and no user or context.
// Joining nodes read it anonymously and check it with their bootstrap
// token's signature (the controller-manager's bootstrapsigner adds it).
func ClusterInfo(server string, caPEM []byte) ([]byte, error) {
	return yaml.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Config",
		"clusters": []any{map[string]any{"name": "", "cluster": map[string]any{"server": server, "certificate-authority-data": caPEM}}},
		"contexts": []any{}, "users": []any{},
	})
}
