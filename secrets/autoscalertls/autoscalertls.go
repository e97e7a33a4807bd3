// Package autoscalertls is the mutual TLS between the cluster autoscaler
// and capn's autoscaler-provider (docs/autoscaling.md): a CA of its own
// (pki.NewCA, ECDSA P-256, 10 years), the provider's server certificate,
// and one client certificate per workload cluster, whose common name is the
// cluster it speaks for (organization ClientOrganization). The provider
// serves a caller only its own cluster's node groups: an autoscaler holding
// demo's certificate can neither see nor scale another cluster.
//
// The files live in one directory (the deployment render's
// <dir>/autoscaler, capn dev's <data-dir>/autoscaler): ca.crt, ca.key,
// server.crt, server.key, and clients/<cluster>/{client.crt, client.key,
// ca.crt, cloud-config} for the autoscaler's --cloud-config. Keys are 0600.
// Like the rest of secrets/, nothing here logs or reads a clock.
package autoscalertls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/capn-dev/capn/secrets/pki"
)

// File names in the directory.
const (
	CACertFile     = "ca.crt"
	CAKeyFile      = "ca.key"
	ServerCertFile = "server.crt"
	ServerKeyFile  = "server.key"
	ClientsDir     = "clients"
	ClientCertFile = "client.crt"
	ClientKeyFile  = "client.key"
	// CloudConfigFile is the externalgrpc provider's --cloud-config.
	CloudConfigFile = "cloud-config"
)

// Names in the certificates.
const (
	CACommonName = "capn-autoscaler-ca"
	// ServerCommonName is the autoscaler-provider's certificate's.
	ServerCommonName = "autoscaler-provider"
	// ClientOrganization marks a client certificate of the cluster
	// autoscaler; its common name is the cluster.
	ClientOrganization = "capn:cluster-autoscaler"
)

// renewBefore: a server or client certificate with less left is issued
// again by Ensure and IssueClient.
const renewBefore = 30 * 24 * time.Hour

// Ensure makes dir's CA and the server certificate for hosts (DNS names or
// IP addresses the autoscaler dials), keeping those that are still good:
// the CA while valid, the server certificate while signed by it, for the
// same hosts and not about to expire. It reports whether it wrote anything.
func Ensure(dir string, hosts []string, now time.Time) (bool, error) {
	if len(hosts) == 0 {
		return false, errors.New("autoscaler TLS: no host for the server certificate")
	}
	ca, wrote, err := ensureCA(dir, now)
	if err != nil {
		return false, err
	}
	certPath, keyPath := filepath.Join(dir, ServerCertFile), filepath.Join(dir, ServerKeyFile)
	if !wrote && good(certPath, keyPath, ca, ServerCommonName, hosts, now) {
		return false, nil
	}
	req := pki.LeafRequest{CommonName: ServerCommonName, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			req.IPAddresses = append(req.IPAddresses, ip)
		} else {
			req.DNSNames = append(req.DNSNames, h)
		}
	}
	kp, err := pki.IssueLeaf(ca, req, now)
	if err != nil {
		return false, err
	}
	return true, writePair(certPath, keyPath, kp)
}

// ensureCA loads dir's CA, or makes one when there is none or it is not
// usable (then every certificate it signed must be issued again).
func ensureCA(dir string, now time.Time) (*pki.CA, bool, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	if ca, err := loadCA(dir, now); err == nil && now.Add(renewBefore).Before(ca.Cert.NotAfter) {
		return ca, false, nil
	}
	kp, err := pki.NewCA(CACommonName, now)
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, err
	}
	if err := writePair(certPath, keyPath, kp); err != nil {
		return nil, false, err
	}
	ca, err := pki.ParseCA(kp, now)
	return ca, true, err
}

func loadCA(dir string, now time.Time) (*pki.CA, error) {
	cert, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, err
	}
	key, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, err
	}
	return pki.ParseCA(pki.KeyPair{CertPEM: cert, KeyPEM: key}, now)
}

// good tells whether certPath holds a certificate of cn for hosts, signed
// by ca, matching keyPath's key, with more than renewBefore left.
func good(certPath, keyPath string, ca *pki.CA, cn string, hosts []string, now time.Time) bool {
	certPEM, err1 := os.ReadFile(certPath)
	keyPEM, err2 := os.ReadFile(keyPath)
	if err1 != nil || err2 != nil {
		return false
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return false
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil || cert.CheckSignatureFrom(ca.Cert) != nil || cert.Subject.CommonName != cn || !now.Add(renewBefore).Before(cert.NotAfter) {
		return false
	}
	var names []string
	names = append(names, cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		names = append(names, ip.String())
	}
	want := slices.Clone(hosts)
	for i, h := range want {
		if ip := net.ParseIP(h); ip != nil {
			want[i] = ip.String()
		}
	}
	slices.Sort(names)
	slices.Sort(want)
	return slices.Equal(names, want)
}

// Client is what an autoscaler of one cluster needs: the paths of its
// client certificate, key, the CA that verifies the server, and its
// --cloud-config.
type Client struct {
	Dir, Cert, Key, CA, CloudConfig string
}

// IssueClient writes dir/clients/<cluster>/: a client certificate for
// cluster signed by dir's CA (kept while good), the CA, and the cloud
// config that points the autoscaler's externalgrpc provider at address
// (host:port of the autoscaler-provider) with them. dir's CA must exist
// (Ensure).
func IssueClient(dir, cluster, address string, now time.Time) (Client, error) {
	if cluster == "" {
		return Client{}, errors.New("autoscaler TLS: no cluster for the client certificate")
	}
	if _, _, err := net.SplitHostPort(address); err != nil {
		return Client{}, fmt.Errorf("autoscaler TLS: address %q: want host:port of the autoscaler-provider", address)
	}
	ca, err := loadCA(dir, now)
	if err != nil {
		return Client{}, fmt.Errorf("autoscaler TLS: the CA in %s: %w (the deployment render or capn dev makes it)", dir, err)
	}
	cd := filepath.Join(dir, ClientsDir, cluster)
	c := Client{Dir: cd, Cert: filepath.Join(cd, ClientCertFile), Key: filepath.Join(cd, ClientKeyFile),
		CA: filepath.Join(cd, CACertFile), CloudConfig: filepath.Join(cd, CloudConfigFile)}
	if err := os.MkdirAll(cd, 0o700); err != nil {
		return Client{}, err
	}
	if !goodClient(c, ca, cluster, now) {
		kp, err := pki.IssueLeaf(ca, pki.LeafRequest{CommonName: cluster, Organization: []string{ClientOrganization},
			Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, now)
		if err != nil {
			return Client{}, err
		}
		if err := writePair(c.Cert, c.Key, kp); err != nil {
			return Client{}, err
		}
	}
	if err := os.WriteFile(c.CA, ca.Pair.CertPEM, 0o644); err != nil {
		return Client{}, err
	}
	return c, os.WriteFile(c.CloudConfig, CloudConfig(address, c), 0o644)
}

func goodClient(c Client, ca *pki.CA, cluster string, now time.Time) bool {
	certPEM, err := os.ReadFile(c.Cert)
	if err != nil {
		return false
	}
	keyPEM, err := os.ReadFile(c.Key)
	if err != nil {
		return false
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return false
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil || cert.CheckSignatureFrom(ca.Cert) != nil || !now.Add(renewBefore).Before(cert.NotAfter) {
		return false
	}
	got, err := ClusterOf(cert)
	return err == nil && got == cluster
}

// CloudConfig is the externalgrpc provider's --cloud-config: the
// autoscaler-provider's address and c's files (YAML, as the provider reads
// it: address, cert, key, cacert, grpc_timeout).
func CloudConfig(address string, c Client) []byte {
	return fmt.Appendf(nil, "address: %q\ncert: %q\nkey: %q\ncacert: %q\ngrpc_timeout: 10s\n", address, c.Cert, c.Key, c.CA)
}

// ServerConfig is the autoscaler-provider's TLS: its certificate, and a
// client certificate required and verified against the CA (TLS 1.3).
func ServerConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("autoscaler TLS: server certificate: %w", err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("autoscaler TLS: client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("autoscaler TLS: client CA %s holds no PEM certificate", caFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// ErrNotAutoscaler is ClusterOf's error for a certificate that is not a
// cluster autoscaler's.
var ErrNotAutoscaler = errors.New("not a cluster autoscaler's client certificate")

// ClusterOf is the cluster a verified client certificate speaks for: its
// common name, when its organization is ClientOrganization and it allows
// client authentication.
func ClusterOf(cert *x509.Certificate) (string, error) {
	switch {
	case cert == nil:
		return "", fmt.Errorf("%w: none", ErrNotAutoscaler)
	case !slices.Contains(cert.Subject.Organization, ClientOrganization):
		return "", fmt.Errorf("%w: organization %v, want %s", ErrNotAutoscaler, cert.Subject.Organization, ClientOrganization)
	case !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth):
		return "", fmt.Errorf("%w: no client authentication usage", ErrNotAutoscaler)
	case cert.Subject.CommonName == "":
		return "", fmt.Errorf("%w: no common name (the cluster)", ErrNotAutoscaler)
	}
	return cert.Subject.CommonName, nil
}

// writePair writes a certificate (0644) and its key (0600).
func writePair(certPath, keyPath string, kp pki.KeyPair) error {
	if err := os.MkdirAll(filepath.Dir(certPath), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, kp.KeyPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(certPath, kp.CertPEM, 0o644)
}
