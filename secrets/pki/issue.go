package pki

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"time"
)

// LeafRequest describes a certificate for IssueLeaf.
type LeafRequest struct {
	CommonName   string
	Organization []string
	DNSNames     []string
	IPAddresses  []net.IP
	// Usages defaults to server authentication.
	Usages []x509.ExtKeyUsage
	// Validity defaults to LeafValidity; the certificate never outlives its CA.
	Validity time.Duration
}

// IssueLeaf makes a new ECDSA P-256 key and a certificate for it signed by
// ca, valid from now (backdated by Backdate).
func IssueLeaf(ca *CA, req LeafRequest, now time.Time) (KeyPair, error) {
	if ca == nil {
		return KeyPair{}, errors.New("issue certificate: no CA")
	}
	if req.CommonName == "" {
		return KeyPair{}, errors.New("issue certificate: empty common name")
	}
	validity := req.Validity
	if validity == 0 {
		validity = LeafValidity
	}
	if validity < 0 {
		return KeyPair{}, fmt.Errorf("issue certificate %s: negative validity %s", req.CommonName, validity)
	}
	usages := req.Usages
	if len(usages) == 0 {
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	if !notAfter.After(now) {
		return KeyPair{}, fmt.Errorf("issue certificate %s: CA %q expired at %s", req.CommonName, ca.Cert.Subject, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := newKey()
	if err != nil {
		return KeyPair{}, err
	}
	serial, err := newSerial()
	if err != nil {
		return KeyPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: req.CommonName, Organization: req.Organization},
		DNSNames:              req.DNSNames,
		IPAddresses:           req.IPAddresses,
		NotBefore:             now.Add(-Backdate).UTC(),
		NotAfter:              notAfter.UTC(),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           usages,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("issue certificate %s: %w", req.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return KeyPair{}, err
	}
	return KeyPair{CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// IssueAdmin makes the cluster admin's client certificate: CN
// kubernetes-admin, O system:masters, client authentication, valid for
// ClientCertValidity.
func IssueAdmin(ca *CA, now time.Time) (KeyPair, error) {
	return IssueLeaf(ca, LeafRequest{
		CommonName:   AdminCommonName,
		Organization: []string{AdminOrganization},
		Usages:       []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		Validity:     ClientCertValidity,
	}, now)
}

// NeedsRenewal is true when the certificate has less than
// ClientCertRenewBefore left at now, or cannot be read at all (a broken
// certificate is replaced rather than kept).
func NeedsRenewal(certPEM []byte, now time.Time) bool {
	c, err := ParseCertificate(certPEM)
	if err != nil {
		return true
	}
	return c.NotAfter.Sub(now) < ClientCertRenewBefore
}
