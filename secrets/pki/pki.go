// Package pki makes and checks the certificates of one cluster: the four
// sets kubeadm expects (cluster CA, etcd CA, front-proxy CA, service-account
// key pair), the admin client certificate, and any leaf a later feature
// needs.
//
// Keys are ECDSA P-256. A P-256 key takes tens of microseconds to make where
// an RSA 2048 key takes tens of milliseconds with a long tail, which matters
// when a fleet of a thousand clusters is created at once (five keys each).
// kubeadm accepts ECDSA CAs and service-account keys it is handed and, from
// v1.31 (kubeadm.k8s.io/v1beta4), makes its own keys ECDSA too with
// encryptionAlgorithm: ECDSA-P256. User-supplied CAs may be RSA or ECDSA;
// they are used exactly as given.
//
// Private keys are PEM "EC PRIVATE KEY" (SEC1), as kubeadm writes them; the
// service-account public key is PEM "PUBLIC KEY" (PKIX), as sa.pub.
// Nothing here logs, and no error carries key material.
package pki

import (
	"bytes"
	"fmt"
	"time"
)

// Defaults, as Cluster API and kubeadm.
const (
	// CAValidity is how long a generated CA is valid: 3650 days.
	CAValidity = 3650 * 24 * time.Hour
	// ClientCertValidity is how long the admin client certificate is valid.
	ClientCertValidity = 365 * 24 * time.Hour
	// ClientCertRenewBefore: the admin certificate is renewed when less than
	// this remains (half its validity, about 6 months, as Cluster API's
	// ClientCertificateRenewalDuration).
	ClientCertRenewBefore = ClientCertValidity / 2
	// LeafValidity is the default validity of IssueLeaf certificates.
	LeafValidity = 365 * 24 * time.Hour
	// Backdate is subtracted from NotBefore so a node whose clock is a little
	// behind accepts a new certificate (kubeadm does the same).
	Backdate = 5 * time.Minute
)

// Common names of the generated CAs, as kubeadm names its own.
const (
	CACommonName           = "kubernetes"
	EtcdCACommonName       = "etcd-ca"
	FrontProxyCACommonName = "front-proxy-ca"
	AdminCommonName        = "kubernetes-admin"
	AdminOrganization      = "system:masters"
)

// KeyPair is a PEM certificate and its PEM private key. Printing a KeyPair
// with fmt never prints the key.
type KeyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// IsZero is true when neither the certificate nor the key is set.
func (kp KeyPair) IsZero() bool { return len(kp.CertPEM) == 0 && len(kp.KeyPEM) == 0 }

// Equal is true when both PEMs are byte-for-byte equal.
func (kp KeyPair) Equal(o KeyPair) bool {
	return bytes.Equal(kp.CertPEM, o.CertPEM) && bytes.Equal(kp.KeyPEM, o.KeyPEM)
}

// Format prints the certificate's subject and never the key.
func (kp KeyPair) Format(f fmt.State, _ rune) {
	subject := "none"
	if c, err := ParseCertificate(kp.CertPEM); err == nil {
		subject = c.Subject.String()
	}
	key := "none"
	if len(kp.KeyPEM) > 0 {
		key = "redacted"
	}
	fmt.Fprintf(f, "pki.KeyPair{cert: %q, key: %s}", subject, key)
}

// ServiceAccountKey is the key pair that signs service-account tokens
// (kubeadm's sa.key and sa.pub). Printing it with fmt never prints the key.
type ServiceAccountKey struct {
	PublicPEM  []byte
	PrivatePEM []byte
}

// IsZero is true when neither key is set.
func (s ServiceAccountKey) IsZero() bool { return len(s.PublicPEM) == 0 && len(s.PrivatePEM) == 0 }

// Format never prints the private key.
func (s ServiceAccountKey) Format(f fmt.State, _ rune) {
	key := "none"
	if len(s.PrivatePEM) > 0 {
		key = "redacted"
	}
	fmt.Fprintf(f, "pki.ServiceAccountKey{public: %d bytes, private: %s}", len(s.PublicPEM), key)
}

// Set is the PKI of one cluster: what kubeadm needs on every control-plane
// machine under /etc/kubernetes/pki.
type Set struct {
	CA             KeyPair // ca.crt, ca.key
	EtcdCA         KeyPair // etcd/ca.crt, etcd/ca.key
	FrontProxyCA   KeyPair // front-proxy-ca.crt, front-proxy-ca.key
	ServiceAccount ServiceAccountKey
}

// Part names one member of a Set, e.g. for the KV key pki.<cluster>.<part>.
type Part string

// The parts of a Set.
const (
	PartCA             Part = "ca"
	PartEtcdCA         Part = "etcd-ca"
	PartFrontProxyCA   Part = "front-proxy-ca"
	PartServiceAccount Part = "sa"
)

// Parts lists every part in a fixed order.
func Parts() []Part { return []Part{PartCA, PartEtcdCA, PartFrontProxyCA, PartServiceAccount} }
