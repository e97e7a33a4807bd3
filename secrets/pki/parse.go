package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// ParseCertificate reads the first PEM CERTIFICATE block.
func ParseCertificate(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, errors.New("certificate: no PEM block found")
	}
	if block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("certificate: PEM block is %q, want CERTIFICATE", block.Type)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	return c, nil
}

// ParsePrivateKey reads an unencrypted RSA or ECDSA private key in PEM
// (EC PRIVATE KEY, RSA PRIVATE KEY or PKCS#8 PRIVATE KEY). Errors never
// contain key material.
func ParsePrivateKey(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("private key: no PEM block found")
	}
	if _, encrypted := block.Headers["Proc-Type"]; encrypted || block.Type == "ENCRYPTED PRIVATE KEY" {
		return nil, errors.New("private key: encrypted; supply it unencrypted (it is sealed at rest by capn)")
	}
	var (
		key any
		err error
	)
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("private key: PEM block is %q, want EC PRIVATE KEY, RSA PRIVATE KEY or PRIVATE KEY", block.Type)
	}
	if err != nil {
		// The x509 parse errors name the problem, never the bytes.
		return nil, fmt.Errorf("private key: %s: %w", block.Type, err)
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		return k, nil
	case *rsa.PrivateKey:
		return k, nil
	default:
		return nil, fmt.Errorf("private key: %T is not supported by kubeadm; use RSA or ECDSA", key)
	}
}

// CA is a parsed, checked certificate authority ready to sign.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	Pair KeyPair // the PEMs exactly as given
}

// ParseCA checks that kp is a usable CA at now: the certificate parses, is
// a CA (basic constraints CA:TRUE) allowed to sign certificates, is within
// its validity period, and the private key matches it.
func ParseCA(kp KeyPair, now time.Time) (*CA, error) {
	cert, err := ParseCertificate(kp.CertPEM)
	if err != nil {
		return nil, err
	}
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return nil, fmt.Errorf("certificate %q is not a CA (basic constraints CA:TRUE missing)", cert.Subject)
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("certificate %q is a CA without the keyCertSign key usage", cert.Subject)
	}
	if now.After(cert.NotAfter) {
		return nil, fmt.Errorf("certificate %q expired at %s", cert.Subject, cert.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Add(Backdate).Before(cert.NotBefore) {
		return nil, fmt.Errorf("certificate %q is not valid before %s", cert.Subject, cert.NotBefore.UTC().Format(time.RFC3339))
	}
	key, err := ParsePrivateKey(kp.KeyPEM)
	if err != nil {
		return nil, err
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, fmt.Errorf("private key does not match the public key of certificate %q", cert.Subject)
	}
	return &CA{Cert: cert, Key: key, Pair: kp}, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}

// ParseServiceAccountKey checks that the private key parses and the public
// key is its public half.
func ParseServiceAccountKey(sa ServiceAccountKey) error {
	key, err := ParsePrivateKey(sa.PrivatePEM)
	if err != nil {
		return fmt.Errorf("service-account %w", err)
	}
	block, _ := pem.Decode(sa.PublicPEM)
	if block == nil || block.Type != "PUBLIC KEY" {
		return errors.New("service-account public key: want a PEM PUBLIC KEY block")
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return fmt.Errorf("service-account public key: %w", err)
	}
	if !publicKeysEqual(pub, key.Public()) {
		return errors.New("service-account public key does not match its private key")
	}
	return nil
}

// sameCertificate compares the DER of two PEM certificates, ignoring PEM
// framing and white space.
func sameCertificate(a, b []byte) bool {
	ca, errA := ParseCertificate(a)
	cb, errB := ParseCertificate(b)
	return errA == nil && errB == nil && bytes.Equal(ca.Raw, cb.Raw)
}
