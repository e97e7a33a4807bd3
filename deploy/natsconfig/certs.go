package natsconfig

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"slices"
	"time"
)

// Lifetimes of the local certificates. A leaf that expires within
// renewBefore, is not signed by the current CA or lacks a name it needs is
// issued again by the next render; a CA is kept while it is valid.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 825 * 24 * time.Hour
	renewBefore  = 30 * 24 * time.Hour
)

// authority is a local CA: its certificate (PEM too) and key.
type authority struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
}

// loadOrCreateCA reads the CA in certPath and keyPath, or creates one named
// cn when either is missing or unusable.
func loadOrCreateCA(certPath, keyPath, cn string, now time.Time) (*authority, bool, error) {
	if ca, err := loadCA(certPath, keyPath, now); err == nil {
		return ca, false, nil
	} else if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, errRenew) {
		return nil, false, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, false, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"capn local"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, false, fmt.Errorf("create CA %s: %w", cn, err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &authority{cert: cert, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
	keyPEM, err := keyToPEM(key)
	if err != nil {
		return nil, false, err
	}
	if err := writeFile(keyPath, keyPEM, 0o600); err != nil {
		return nil, false, err
	}
	if err := writeFile(certPath, ca.certPEM, 0o644); err != nil {
		return nil, false, err
	}
	return ca, true, nil
}

var errRenew = errors.New("certificate must be issued again")

func loadCA(certPath, keyPath string, now time.Time) (*authority, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certPath, err)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	if !cert.IsCA || !key.PublicKey.Equal(cert.PublicKey) || now.After(cert.NotAfter.Add(-renewBefore)) {
		return nil, errRenew
	}
	return &authority{cert: cert, certPEM: certPEM, key: key}, nil
}

// leaf is what a certificate must say.
type leaf struct {
	cn    string
	dns   []string
	ips   []net.IP
	usage []x509.ExtKeyUsage
}

// ensure writes a certificate for l signed by ca to certPath (key in
// keyPath) unless the one there is still good. It reports whether it
// issued one.
func (ca *authority) ensure(certPath, keyPath string, l leaf, now time.Time) (bool, error) {
	if ca.good(certPath, keyPath, l, now) {
		return false, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return false, fmt.Errorf("generate key for %s: %w", l.cn, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: l.cn, Organization: []string{"capn local"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  l.usage,
		DNSNames:     l.dns,
		IPAddresses:  l.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return false, fmt.Errorf("issue certificate for %s: %w", l.cn, err)
	}
	keyPEM, err := keyToPEM(key)
	if err != nil {
		return false, err
	}
	if err := writeFile(keyPath, keyPEM, 0o600); err != nil {
		return false, err
	}
	return true, writeFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// good tells whether certPath holds a certificate for l, signed by ca,
// matching the key in keyPath, and valid for a while yet.
func (ca *authority) good(certPath, keyPath string, l leaf, now time.Time) bool {
	certPEM, err1 := os.ReadFile(certPath)
	keyPEM, err2 := os.ReadFile(keyPath)
	if err1 != nil || err2 != nil {
		return false
	}
	cert, err1 := parseCert(certPEM)
	key, err2 := parseKey(keyPEM)
	if err1 != nil || err2 != nil || !key.PublicKey.Equal(cert.PublicKey) {
		return false
	}
	if cert.CheckSignatureFrom(ca.cert) != nil || now.After(cert.NotAfter.Add(-renewBefore)) || cert.Subject.CommonName != l.cn {
		return false
	}
	if !slices.Equal(cert.DNSNames, l.dns) || !slices.Equal(cert.ExtKeyUsage, l.usage) || len(cert.IPAddresses) != len(l.ips) {
		return false
	}
	for i, ip := range l.ips {
		if !cert.IPAddresses[i].Equal(ip) {
			return false
		}
	}
	return true
}

func parseCert(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(blk.Bytes)
}

func parseKey(b []byte) (*ecdsa.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM key")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key is a %T, not ECDSA", k)
	}
	return ek, nil
}

func keyToPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

// sameFile tells whether path already holds exactly b.
func sameFile(path string, b []byte) bool {
	old, err := os.ReadFile(path)
	return err == nil && bytes.Equal(old, b)
}
