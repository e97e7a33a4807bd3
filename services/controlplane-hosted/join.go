package controlplanehosted

import (
	"context"
	"fmt"
	"os"

	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/secrets/kubeconfig"
	"github.com/capn-dev/capn/secrets/token"
)

// What workers need of a hosted cluster to join it with a bootstrap token
// (the same bootstrap token + CSR flow as a cluster whose control plane
// runs on machines, where the first control plane's agent applies them:
// cmd/capn-node/kube JoinRBAC and ClusterInfo, whose names these are):
//
//   - a bootstrap token (group system:bootstrappers:kubeadm:default-node-token)
//     may create a CSR (system:node-bootstrapper) and get Nodes;
//   - its node-client CSRs are approved by the controller-manager's
//     csrapprover, and nodes' renewals of their own certificates too;
//   - the API server's kubelet client may use the kubelet API;
//   - a kube-local worker's kwok, standing in for the kubelet with the
//     node's credentials, lists and watches Nodes and Leases;
//   - kube-public/cluster-info (the endpoint and CA), readable by
//     system:anonymous, which kubeadm join reads and checks with the
//     token's signature.
//
// The token Secrets themselves are the bootstrapper's, per joining
// machine. The hosted cluster is capn's alone: the objects are applied
// (server-side, field manager capn) once an API server answers, after every
// start and adoption, and go with the cluster's etcd on delete.

const rbacV1 = "rbac.authorization.k8s.io/v1"

func joinMeta(name, namespace string) map[string]any {
	m := map[string]any{"name": name, "labels": map[string]any{"app.kubernetes.io/managed-by": "capn-controlplane-hosted"}}
	if namespace != "" {
		m["namespace"] = namespace
	}
	return m
}

func rbacSubject(kind, name string) map[string]any {
	return map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}
}

func binding(name, role string, subj map[string]any) map[string]any {
	return map[string]any{"apiVersion": rbacV1, "kind": "ClusterRoleBinding", "metadata": joinMeta(name, ""),
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
		"subjects": []any{subj}}
}

func rbacRule(group string, resources, verbs []string, names ...string) map[string]any {
	r := map[string]any{"apiGroups": []string{group}, "resources": resources, "verbs": verbs}
	if len(names) > 0 {
		r["resourceNames"] = names
	}
	return r
}

// joinObjects are the join RBAC and cluster-info for server and the
// cluster CA caPEM, roles before the bindings that name them.
func joinObjects(server string, caPEM []byte) ([]map[string]any, error) {
	bootstrappers := rbacSubject("Group", token.NodeGroup)
	nodes := rbacSubject("Group", "system:nodes")
	data, err := kubeconfig.ClusterInfo(server, caPEM)
	if err != nil {
		return nil, err
	}
	return []map[string]any{
		binding("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", bootstrappers),
		{"apiVersion": rbacV1, "kind": "ClusterRole", "metadata": joinMeta("kubeadm:get-nodes", ""),
			"rules": []any{rbacRule("", []string{"nodes"}, []string{"get"})}},
		binding("kubeadm:get-nodes", "kubeadm:get-nodes", bootstrappers),
		binding("kubeadm:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", bootstrappers),
		binding("kubeadm:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", nodes),
		binding("kubeadm:apiserver-kubelet-client", "system:kubelet-api-admin", rbacSubject("User", "kube-apiserver-kubelet-client")),
		{"apiVersion": rbacV1, "kind": "ClusterRole", "metadata": joinMeta("capn:kube-local:kwok-node", ""),
			"rules": []any{
				rbacRule("", []string{"nodes"}, []string{"get", "list", "watch"}),
				rbacRule("coordination.k8s.io", []string{"leases"}, []string{"list", "watch"}),
			}},
		binding("capn:kube-local:kwok-node", "capn:kube-local:kwok-node", nodes),
		{"apiVersion": rbacV1, "kind": "Role", "metadata": joinMeta("kubeadm:bootstrap-signer-clusterinfo", "kube-public"),
			"rules": []any{rbacRule("", []string{"configmaps"}, []string{"get"}, "cluster-info")}},
		{"apiVersion": rbacV1, "kind": "RoleBinding", "metadata": joinMeta("kubeadm:bootstrap-signer-clusterinfo", "kube-public"),
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kubeadm:bootstrap-signer-clusterinfo"},
			"subjects": []any{rbacSubject("User", "system:anonymous")}},
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": joinMeta("cluster-info", "kube-public"),
			"data": map[string]string{"kubeconfig": string(data)}},
	}, nil
}

// prepareJoin applies the join objects through the endpoint as capn's
// admin; it stops at the first failure, naming the object.
func (c *controlPlane) prepareJoin(ctx context.Context) error {
	c.mu.Lock()
	server := "https://" + c.st.endpointAddr()
	client := &kubeapi.Client{Server: server, HTTP: c.client}
	c.mu.Unlock()
	ca, err := os.ReadFile(c.l.pkiFile("ca.crt"))
	if err != nil {
		return err
	}
	objs, err := joinObjects(server, ca)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if _, err := client.ServerSideApply(ctx, o, kubeapi.ApplyOptions{Force: true}, nil); err != nil {
			md := o["metadata"].(map[string]any)
			return fmt.Errorf("apply %s %v: %w", o["kind"], md["name"], err)
		}
	}
	return nil
}
