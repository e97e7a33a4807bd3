package controlplaneexternal

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/secrets/kubeconfig"
	"github.com/capn-dev/capn/secrets/token"
)

// What capn's workers need of a cluster to join it with a bootstrap token
// (what kubeadm's bootstrap-token phase sets up, and the kube-local node
// side's own addition; cmd/capn-node/kube JoinRBAC and ClusterInfo):
//
//   - a bootstrap token (group NodeGroup) may create a CSR
//     (system:node-bootstrapper), and get Nodes (kubeadm join checks for a
//     Node of its name);
//   - its node-client CSRs are approved by the controller-manager's
//     csrapprover (nodeclient), and nodes' renewals of their own
//     certificates too (selfnodeclient, group system:nodes);
//   - a kube-local worker's kwok, standing in for the kubelet with the
//     node's credentials, lists and watches Nodes and Leases;
//   - kube-public/cluster-info (the endpoint and CA, which kubeadm join
//     reads anonymously and checks with the token's signature), readable
//     by system:anonymous — created only when the cluster has none: a
//     kubeadm cluster's own is left as it is.
//
// Nothing else. Every object is named capn:<cluster>:<what> (so that two
// capn clusters on one external cluster, or the cluster's own kubeadm
// objects, never share one) and labelled managed-by capn and
// capn.dev/cluster: <cluster>; delete removes an object only when it
// still carries both. The token Secrets themselves
// (kube-system/bootstrap-token-<id>) are the bootstrapper's, created per
// joining machine.

// Labels on every object the service creates.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "capn-controlplane-external"
	LabelCluster   = "capn.dev/cluster"
)

// Default RBAC of every API server (its bootstrap policy) that the
// bindings name.
const (
	nodeBootstrapperRole = "system:node-bootstrapper"
	nodeClientCSRRole    = "system:certificates.k8s.io:certificatesigningrequests:nodeclient"
	selfNodeClientRole   = "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"
	nodesGroup           = "system:nodes"
	clusterInfo          = "cluster-info"
	kubePublic           = "kube-public"
	rbacV1               = "rbac.authorization.k8s.io/v1"
)

// object is one object the service applies: its identity and body.
type object struct {
	apiVersion, kind, namespace, name string
	body                              map[string]any
}

func (o object) String() string {
	if o.namespace != "" {
		return o.kind + " " + o.namespace + "/" + o.name
	}
	return o.kind + " " + o.name
}

// objName is capn:<cluster>:<what>.
func objName(cluster, what string) string { return "capn:" + cluster + ":" + what }

func labels(cluster string) map[string]any {
	return map[string]any{LabelManagedBy: ManagedBy, LabelCluster: cluster}
}

func meta(cluster, namespace, name string) map[string]any {
	m := map[string]any{"name": name, "labels": labels(cluster)}
	if namespace != "" {
		m["namespace"] = namespace
	}
	return m
}

func subject(kind, name string) map[string]any {
	return map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}
}

func newObject(cluster, apiVersion, kind, namespace, name string, fields map[string]any) object {
	body := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta(cluster, namespace, name)}
	for k, v := range fields {
		body[k] = v
	}
	return object{apiVersion: apiVersion, kind: kind, namespace: namespace, name: name, body: body}
}

func clusterRole(cluster, what string, rules ...map[string]any) object {
	return newObject(cluster, rbacV1, "ClusterRole", "", objName(cluster, what), map[string]any{"rules": rules})
}

func clusterRoleBinding(cluster, what, role string, subj map[string]any) object {
	return newObject(cluster, rbacV1, "ClusterRoleBinding", "", objName(cluster, what), map[string]any{
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
		"subjects": []any{subj},
	})
}

func rule(group string, resources, verbs []string, names ...string) map[string]any {
	r := map[string]any{"apiGroups": []string{group}, "resources": resources, "verbs": verbs}
	if len(names) > 0 {
		r["resourceNames"] = names
	}
	return r
}

// joinRBAC are the RBAC objects of cluster, in the order they are applied
// (roles before the bindings that name them).
func joinRBAC(cluster string) []object {
	bootstrappers := subject("Group", token.NodeGroup)
	nodes := subject("Group", nodesGroup)
	return []object{
		clusterRoleBinding(cluster, "kubelet-bootstrap", nodeBootstrapperRole, bootstrappers),
		clusterRole(cluster, "get-nodes", rule("", []string{"nodes"}, []string{"get"})),
		clusterRoleBinding(cluster, "get-nodes", objName(cluster, "get-nodes"), bootstrappers),
		clusterRoleBinding(cluster, "node-autoapprove-bootstrap", nodeClientCSRRole, bootstrappers),
		clusterRoleBinding(cluster, "node-autoapprove-certificate-rotation", selfNodeClientRole, nodes),
		clusterRole(cluster, "kwok-node",
			rule("", []string{"nodes"}, []string{"get", "list", "watch"}),
			rule("coordination.k8s.io", []string{"leases"}, []string{"list", "watch"})),
		clusterRoleBinding(cluster, "kwok-node", objName(cluster, "kwok-node"), nodes),
		newObject(cluster, rbacV1, "Role", kubePublic, objName(cluster, "cluster-info"), map[string]any{
			"rules": []any{rule("", []string{"configmaps"}, []string{"get"}, clusterInfo)},
		}),
		newObject(cluster, rbacV1, "RoleBinding", kubePublic, objName(cluster, "cluster-info"), map[string]any{
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": objName(cluster, "cluster-info")},
			"subjects": []any{subject("User", "system:anonymous")},
		}),
	}
}

// clusterInfoObject is kube-public/cluster-info as kubeadm writes it: a
// kubeconfig with the server and CA only.
func clusterInfoObject(cluster, server string, caPEM []byte) (object, error) {
	data, err := kubeconfig.ClusterInfo(server, caPEM)
	if err != nil {
		return object{}, err
	}
	return newObject(cluster, "v1", "ConfigMap", kubePublic, clusterInfo, map[string]any{"data": map[string]string{"kubeconfig": string(data)}}), nil
}

type objectMeta struct {
	Metadata struct {
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
}

// ours reports whether the object exists and carries cluster's labels.
func ours(ctx context.Context, c *kubeapi.Client, o object, cluster string) (exists, mine bool, err error) {
	var m objectMeta
	err = c.GetObject(ctx, o.apiVersion, o.kind, o.namespace, o.name, &m)
	switch {
	case kubeapi.IsStatus(err, http.StatusNotFound):
		return false, false, nil
	case err != nil:
		return false, false, err
	}
	l := m.Metadata.Labels
	return true, l[LabelManagedBy] == ManagedBy && l[LabelCluster] == cluster, nil
}

// prepareJoin applies cluster's join objects (field manager capn) and
// cluster-info when the cluster has none or it is capn's. It stops at the
// first failure, naming the object.
func prepareJoin(ctx context.Context, c *kubeapi.Client, cluster, server string, caPEM []byte) error {
	for _, o := range joinRBAC(cluster) {
		if _, err := c.ServerSideApply(ctx, o.body, kubeapi.ApplyOptions{Force: true}, nil); err != nil {
			return fmt.Errorf("%s: %w", o, err)
		}
	}
	ci, err := clusterInfoObject(cluster, server, caPEM)
	if err != nil {
		return err
	}
	exists, mine, err := ours(ctx, c, ci, cluster)
	if err != nil {
		return fmt.Errorf("%s: %w", ci, err)
	}
	if exists && !mine {
		return nil // the cluster's own (kubeadm's): left as it is
	}
	if _, err := c.ServerSideApply(ctx, ci.body, kubeapi.ApplyOptions{Force: true}, nil); err != nil {
		return fmt.Errorf("%s: %w", ci, err)
	}
	return nil
}

// removeJoin deletes every join object of cluster that still carries its
// labels (an object of the same name someone else made, or took over by
// removing the labels, is left). It returns what it deleted.
func removeJoin(ctx context.Context, c *kubeapi.Client, cluster string) ([]string, error) {
	objs := joinRBAC(cluster)
	ci, err := clusterInfoObject(cluster, "", nil)
	if err != nil {
		return nil, err
	}
	// Bindings first, then what they name.
	objs = append(objs, ci)
	var deleted []string
	var errs []error
	for i := len(objs) - 1; i >= 0; i-- {
		o := objs[i]
		exists, mine, err := ours(ctx, c, o, cluster)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o, err))
			continue
		}
		if !exists || !mine {
			continue
		}
		if _, err := c.DeleteObject(ctx, o.apiVersion, o.kind, o.namespace, o.name); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o, err))
			continue
		}
		deleted = append(deleted, o.String())
	}
	return deleted, errors.Join(errs...)
}
