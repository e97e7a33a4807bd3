package pki

import (
	"crypto/sha256"
	"encoding/hex"
)

// CACertHash is the CA pin kubeadm join expects in
// discovery.bootstrapToken.caCertHashes: "sha256:" and the hex SHA-256 of
// the certificate's DER SubjectPublicKeyInfo.
func CACertHash(certPEM []byte) (string, error) {
	c, err := ParseCertificate(certPEM)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
