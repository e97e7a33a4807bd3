package kube

import "github.com/capn-dev/capn/kubeapi"

// The REST client is shared with the bootstrapper (which registers join
// tokens in workload clusters): package kubeapi. These names keep the node
// side's code and tests as they were.
type (
	Client      = kubeapi.Client
	StatusError = kubeapi.StatusError
	Object      = kubeapi.Object
)

// IsStatus is true when err is a StatusError with code.
func IsStatus(err error, code int) bool { return kubeapi.IsStatus(err, code) }

// NewClient trusts the kubeconfig's CA for its server and authenticates
// with its client certificate.
func NewClient(kc *Kubeconfig) (*Client, error) {
	pair := kc.Client()
	return kubeapi.NewClient(kc.Server(), kc.CA(), pair.CertPEM, pair.KeyPEM)
}

// NewTokenClient trusts caPEM for server and authenticates with a bearer
// token: how a joining node asks for its certificate.
func NewTokenClient(server string, caPEM []byte, token string) (*Client, error) {
	return kubeapi.NewTokenClient(server, caPEM, token)
}
