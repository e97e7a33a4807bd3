package kube

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// Names kubeadm gives the objects of its bootstrap-token phase
// (cmd/kubeadm/app/constants, phases/bootstraptoken).
const (
	NodeBootstrapTokenAuthGroup = token.NodeGroup
	NodesGroup                  = "system:nodes"

	KubeletBootstrapBinding       = "kubeadm:kubelet-bootstrap"
	NodeBootstrapperClusterRole   = "system:node-bootstrapper"
	GetNodesRole                  = "kubeadm:get-nodes"
	AutoApproveBootstrapBinding   = "kubeadm:node-autoapprove-bootstrap"
	NodeClientCSRClusterRole      = "system:certificates.k8s.io:certificatesigningrequests:nodeclient"
	AutoApproveRotationBinding    = "kubeadm:node-autoapprove-certificate-rotation"
	SelfNodeClientCSRClusterRole  = "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"
	APIServerKubeletClientBinding = "kubeadm:apiserver-kubelet-client"
	KubeletAPIAdminClusterRole    = "system:kubelet-api-admin"
	ClusterInfoRole               = "kubeadm:bootstrap-signer-clusterinfo"
	ClusterInfoConfigMap          = "cluster-info"
	// KwokNodeRole is capn's addition: what kwok, standing in for a
	// worker's kubelet with the node's own credentials, reads beyond what
	// the Node authorizer allows a node (it lists nodes once at start and
	// keeps the node leases in an informer).
	KwokNodeRole = "capn:kube-local:kwok-node"
)

// Node labels and annotations the node side sets.
const (
	ControlPlaneRoleLabel = "node-role.kubernetes.io/control-plane"
	// ExcludeFromLBLabel is what kubeadm's mark-control-plane phase adds.
	ExcludeFromLBLabel = "node.kubernetes.io/exclude-from-external-load-balancers"
	// KwokAnnotation=KwokAnnotationValue marks a Node run by kwok (each
	// machine's kwok manages its own Node only: --manage-single-node).
	KwokAnnotation      = "kwok.x-k8s.io/node"
	KwokAnnotationValue = "fake"
)

const (
	rbacPath = "/apis/rbac.authorization.k8s.io/v1"
	rbacAPI  = "rbac.authorization.k8s.io/v1"
)

func meta(name string, labels map[string]string) map[string]any {
	m := map[string]any{"name": name}
	if len(labels) > 0 {
		m["labels"] = labels
	}
	return m
}

func clusterRoleBinding(name, role string, subjects ...map[string]any) Object {
	return Object{Collection: rbacPath + "/clusterrolebindings", Name: name, Body: map[string]any{
		"apiVersion": rbacAPI, "kind": "ClusterRoleBinding", "metadata": meta(name, nil),
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
		"subjects": subjects,
	}}
}

func group(name string) map[string]any {
	return map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}
}

func user(name string) map[string]any {
	return map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}
}

// JoinRBAC is what kubeadm's bootstrap-token phase applies so that nodes
// can join with a bootstrap token: bootstrap tokens may post CSRs and get
// nodes, their node-client CSRs are auto-approved, nodes' own renewals
// too, and the API server's kubelet client may use the kubelet API; plus
// the cluster-info ConfigMap's RBAC (anonymous may read it in kube-public);
// and capn's KwokNodeRole for the nodes' kwok.
func JoinRBAC() []Object {
	return []Object{
		clusterRoleBinding(KubeletBootstrapBinding, NodeBootstrapperClusterRole, group(NodeBootstrapTokenAuthGroup)),
		{Collection: rbacPath + "/clusterroles", Name: GetNodesRole, Body: map[string]any{
			"apiVersion": rbacAPI, "kind": "ClusterRole", "metadata": meta(GetNodesRole, nil),
			"rules": []any{map[string]any{"verbs": []string{"get"}, "apiGroups": []string{""}, "resources": []string{"nodes"}}},
		}},
		clusterRoleBinding(GetNodesRole, GetNodesRole, group(NodeBootstrapTokenAuthGroup)),
		clusterRoleBinding(AutoApproveBootstrapBinding, NodeClientCSRClusterRole, group(NodeBootstrapTokenAuthGroup)),
		clusterRoleBinding(AutoApproveRotationBinding, SelfNodeClientCSRClusterRole, group(NodesGroup)),
		clusterRoleBinding(APIServerKubeletClientBinding, KubeletAPIAdminClusterRole, user("kube-apiserver-kubelet-client")),
		{Collection: rbacPath + "/clusterroles", Name: KwokNodeRole, Body: map[string]any{
			"apiVersion": rbacAPI, "kind": "ClusterRole", "metadata": meta(KwokNodeRole, nil),
			"rules": []any{
				map[string]any{"verbs": []string{"get", "list", "watch"}, "apiGroups": []string{""}, "resources": []string{"nodes"}},
				map[string]any{"verbs": []string{"list", "watch"}, "apiGroups": []string{"coordination.k8s.io"}, "resources": []string{"leases"}},
			},
		}},
		clusterRoleBinding(KwokNodeRole, KwokNodeRole, group(NodesGroup)),
		{Collection: rbacPath + "/namespaces/kube-public/roles", Name: ClusterInfoRole, Body: map[string]any{
			"apiVersion": rbacAPI, "kind": "Role", "metadata": map[string]any{"name": ClusterInfoRole, "namespace": "kube-public"},
			"rules": []any{map[string]any{"verbs": []string{"get"}, "apiGroups": []string{""}, "resources": []string{"configmaps"}, "resourceNames": []string{ClusterInfoConfigMap}}},
		}},
		{Collection: rbacPath + "/namespaces/kube-public/rolebindings", Name: ClusterInfoRole, Body: map[string]any{
			"apiVersion": rbacAPI, "kind": "RoleBinding", "metadata": map[string]any{"name": ClusterInfoRole, "namespace": "kube-public"},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ClusterInfoRole},
			"subjects": []any{user("system:anonymous")},
		}},
	}
}

// ClusterInfo is kube-public/cluster-info: a kubeconfig with the cluster's
// endpoint and CA and no user, which joining nodes read anonymously and
// verify with the bootstrap token's JWS signature (added by the
// controller-manager's bootstrapsigner).
func ClusterInfo(endpoint string, caPEM []byte) (Object, error) {
	var kc Kubeconfig
	kc.APIVersion, kc.Kind = "v1", "Config"
	kc.Clusters = []namedCluster{{Name: ""}}
	kc.Clusters[0].Cluster.Server = endpoint
	kc.Clusters[0].Cluster.CertificateAuthorityData = caPEM
	data, err := yaml.Marshal(kc)
	if err != nil {
		return Object{}, err
	}
	return Object{Collection: "/api/v1/namespaces/kube-public/configmaps", Name: ClusterInfoConfigMap, Body: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": ClusterInfoConfigMap, "namespace": "kube-public"},
		"data":     map[string]string{"kubeconfig": string(data)},
	}}, nil
}

// TokenSecret is kube-system/bootstrap-token-<id>, valid until now+ttl,
// as `kubeadm token create` writes it.
func TokenSecret(t token.Token, ttl time.Duration, now time.Time, cluster string) Object {
	return Object{Collection: "/api/v1/namespaces/" + token.SecretNamespace + "/secrets", Name: token.SecretName(t), Body: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": token.SecretType,
		"metadata":   map[string]any{"name": token.SecretName(t), "namespace": token.SecretNamespace},
		"stringData": token.SecretData(t, now.Add(ttl), "capn kube-local: join token of cluster "+cluster),
	}}
}

// NodeSpec is what the node side registers about its machine.
type NodeSpec struct {
	Name       string
	ProviderID string
	Address    string
	Version    string
	// Labels are the well-known labels the node side keeps (hostname, os,
	// arch, the control-plane role), set on every registration, as a
	// kubelet keeps its default labels.
	Labels map[string]string
	// LabelsOnCreate are the machine's pool labels: set when the Node is
	// created only, as a kubelet's --node-labels. Later changes are the
	// health-watcher's label sync's, which also removes a label a pool
	// dropped; a restarted node never brings one back.
	LabelsOnCreate map[string]string
	Taints         []kubelocal.Taint
	// TaintsOnCreate leaves taints out of updates: a node registering
	// itself may set taints when it creates its Node but never change
	// them (NodeRestriction), as a kubelet's --register-with-taints.
	TaintsOnCreate bool
	// Annotations are added to the Node's own (a control plane's etcd
	// client URLs).
	Annotations map[string]string
}

// NodeFor is the Node of this machine from its config.
func NodeFor(cfg *kubelocal.NodeConfig, address, providerID string) NodeSpec {
	labels := map[string]string{
		"kubernetes.io/hostname":  cfg.NodeName,
		"kubernetes.io/os":        "linux",
		"kubernetes.io/arch":      runtime.GOARCH,
		"beta.kubernetes.io/os":   "linux",
		"beta.kubernetes.io/arch": runtime.GOARCH,
	}
	if cfg.IsControlPlane() {
		labels[ControlPlaneRoleLabel] = ""
		labels[ExcludeFromLBLabel] = ""
	}
	return NodeSpec{Name: cfg.NodeName, ProviderID: providerID, Address: address, Version: cfg.KubernetesVersion, Labels: labels,
		LabelsOnCreate: maps.Clone(cfg.Labels), Taints: cfg.Taints, TaintsOnCreate: !cfg.IsControlPlane()}
}

// Object is the Node as first created, status included.
func (n NodeSpec) Object() Object {
	spec := map[string]any{"taints": n.taints(nil)}
	if n.ProviderID != "" {
		spec["providerID"] = n.ProviderID
	}
	return Object{Collection: "/api/v1/nodes", Name: n.Name, Body: map[string]any{
		"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": n.Name, "labels": n.createLabels(), "annotations": n.annotations()},
		"spec":     spec,
		"status":   n.Status()["status"],
	}}
}

// createLabels are the labels of a new Node: the pool's, then the node
// side's own.
func (n NodeSpec) createLabels() map[string]string {
	out := maps.Clone(n.LabelsOnCreate)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, n.Labels)
	return out
}

func (n NodeSpec) annotations() map[string]string {
	a := map[string]string{KwokAnnotation: KwokAnnotationValue, "node.alpha.kubernetes.io/ttl": "0"}
	for k, v := range n.Annotations {
		a[k] = v
	}
	return a
}

// Patch is the merge patch that brings an existing Node to n: the node
// side's labels (not the pool's: LabelsOnCreate) and annotations added or
// updated, providerID set (it may only go from empty
// to a value), taints replaced by n's plus those the node controllers
// manage (node.kubernetes.io/..., kept as they are).
func (n NodeSpec) Patch(existingTaints []kubelocal.Taint) map[string]any {
	spec := map[string]any{}
	if !n.TaintsOnCreate {
		spec["taints"] = n.taints(existingTaints)
	}
	if n.ProviderID != "" {
		spec["providerID"] = n.ProviderID
	}
	return map[string]any{
		"metadata": map[string]any{"labels": n.Labels, "annotations": n.annotations()},
		"spec":     spec,
	}
}

func (n NodeSpec) taints(existing []kubelocal.Taint) []map[string]string {
	out := []map[string]string{}
	add := func(t kubelocal.Taint) {
		m := map[string]string{"key": t.Key, "effect": t.Effect}
		if t.Value != "" {
			m["value"] = t.Value
		}
		out = append(out, m)
	}
	for _, t := range n.Taints {
		add(t)
	}
	for _, t := range existing {
		own := slices.ContainsFunc(n.Taints, func(o kubelocal.Taint) bool { return o.Key == t.Key && o.Effect == t.Effect })
		if !own && strings.HasPrefix(t.Key, "node.kubernetes.io/") {
			add(t)
		}
	}
	return out
}

// Status is the merge patch of the Node's status subresource: the
// versions a kubelet would report — the machine's kubernetesVersion, so
// `kubectl get nodes` shows each Node's during a rollout — and the
// machine's addresses (kwok's node-initialize stage keeps what is there
// and fills conditions, capacity and the rest; without these it would
// report its own version, kwok-v0.8.0).
func (n NodeSpec) Status() map[string]any {
	return map[string]any{"status": map[string]any{
		"nodeInfo": map[string]any{
			"kubeletVersion":   n.Version,
			"kubeProxyVersion": n.Version,
			"operatingSystem":  "linux",
			"architecture":     runtime.GOARCH,
		},
		"addresses": []map[string]string{
			{"type": "InternalIP", "address": n.Address},
			{"type": "Hostname", "address": n.Name},
		},
	}}
}

func (n NodeSpec) String() string { return fmt.Sprintf("Node %s", n.Name) }
