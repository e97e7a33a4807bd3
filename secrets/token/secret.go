package token

import (
	"time"
)

// Bootstrap token Secret conventions of kubeadm (k8s.io/cluster-bootstrap).
const (
	// SecretNamespace is where bootstrap token Secrets live.
	SecretNamespace = "kube-system"
	// SecretType is the type of a bootstrap token Secret.
	SecretType = "bootstrap.kubernetes.io/token"
	// NodeGroup is the group kubeadm's node bootstrap RBAC is bound to.
	NodeGroup = "system:bootstrappers:kubeadm:default-node-token"
)

// SecretName is the name of the Secret holding t in the workload cluster.
func SecretName(t Token) string { return "bootstrap-token-" + t.ID }

// SecretData is the data of the bootstrap token Secret that makes t valid
// in a running cluster until expires: what `kubeadm token create` writes,
// and what the service creates (or updates, to renew) for every join after
// the first control-plane machine.
func SecretData(t Token, expires time.Time, description string) map[string]string {
	return map[string]string{
		"token-id":                       t.ID,
		"token-secret":                   t.Secret,
		"expiration":                     expires.UTC().Format(time.RFC3339),
		"usage-bootstrap-authentication": "true",
		"usage-bootstrap-signing":        "true",
		"auth-extra-groups":              NodeGroup,
		"description":                    description,
	}
}
