package kube

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/capn-dev/capn/internal/atomicfile"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// RenewBefore: a leaf certificate with less than this left is issued anew
// on the next start (kubeadm's leaves live a year).
const RenewBefore = 30 * 24 * time.Hour

// Leaf is one certificate the node issues: what it must say, and which CA
// signs it.
type Leaf struct {
	// Name is the file name under the PKI dir without .crt/.key
	// ("apiserver", "etcd/server"), or the kubeconfig's name for
	// Kubeconfig leaves.
	Name string
	// CA is the signer's file name under the PKI dir ("ca", "etcd/ca",
	// "front-proxy-ca").
	CA           string
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []netip.Addr
	Usages       []x509.ExtKeyUsage
	// Kubeconfig is true for a client certificate embedded in
	// <rootfs>/etc/kubernetes/<Name>.conf instead of a .crt/.key pair.
	Kubeconfig bool
}

var (
	serverAuth = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	clientAuth = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	bothAuth   = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
)

// Leaves lists what a control-plane machine issues, as kubeadm names them.
func Leaves(cfg *kubelocal.NodeConfig, address netip.Addr) ([]Leaf, error) {
	svcIP, err := FirstServiceIP(cfg.ServiceCIDR)
	if err != nil {
		return nil, err
	}
	loopback := netip.MustParseAddr("127.0.0.1")
	apiDNS := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + cfg.DNSDomain, "localhost", cfg.NodeName}
	apiIPs := []netip.Addr{svcIP, loopback, address}
	if ip, err := netip.ParseAddr(cfg.Endpoint.Host); err == nil {
		apiIPs = append(apiIPs, ip)
	} else {
		apiDNS = append(apiDNS, cfg.Endpoint.Host)
	}
	etcdDNS := []string{"localhost", cfg.NodeName}
	etcdIPs := []netip.Addr{loopback, address}
	return []Leaf{
		{Name: "apiserver", CA: "ca", CommonName: "kube-apiserver", DNSNames: apiDNS, IPs: apiIPs, Usages: serverAuth},
		{Name: "apiserver-kubelet-client", CA: "ca", CommonName: "kube-apiserver-kubelet-client", Usages: clientAuth},
		{Name: "apiserver-etcd-client", CA: "etcd/ca", CommonName: "kube-apiserver-etcd-client", Usages: clientAuth},
		{Name: "etcd/server", CA: "etcd/ca", CommonName: cfg.NodeName, DNSNames: etcdDNS, IPs: etcdIPs, Usages: bothAuth},
		{Name: "etcd/peer", CA: "etcd/ca", CommonName: cfg.NodeName, DNSNames: etcdDNS, IPs: etcdIPs, Usages: bothAuth},
		{Name: "front-proxy-client", CA: "front-proxy-ca", CommonName: "front-proxy-client", Usages: clientAuth},
		{Name: "controller-manager", CA: "ca", CommonName: "system:kube-controller-manager", Usages: clientAuth, Kubeconfig: true},
		{Name: "scheduler", CA: "ca", CommonName: "system:kube-scheduler", Usages: clientAuth, Kubeconfig: true},
		{Name: "admin", CA: "ca", CommonName: "kubernetes-admin", Organization: []string{"system:masters"}, Usages: clientAuth, Kubeconfig: true},
	}, nil
}

// FirstServiceIP is the first address of the service CIDR: the
// `kubernetes` Service's cluster IP (10.96.0.1 for 10.96.0.0/12).
func FirstServiceIP(cidr string) (netip.Addr, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("serviceCIDR %q: %w", cidr, err)
	}
	ip := p.Masked().Addr().Next()
	if !p.Contains(ip) {
		return netip.Addr{}, fmt.Errorf("serviceCIDR %q: no first address", cidr)
	}
	return ip, nil
}

// IssueResult says which leaves were issued anew and which were kept.
type IssueResult struct {
	Issued, Kept []string
}

// IssueAll makes sure every leaf exists, is signed by its current CA, says
// what it must, and has more than RenewBefore left; the others are
// issued anew. Kubeconfigs point at server. It is idempotent: a second run
// with the same inputs keeps everything.
func IssueAll(l Layout, cluster, server string, leaves []Leaf, now time.Time) (IssueResult, error) {
	var res IssueResult
	cas := map[string]*pki.CA{}
	// The trust bundle is ca.crt until a CA rotation writes one.
	if err := ensureBundle(l); err != nil {
		return res, fmt.Errorf("trust bundle: %w", err)
	}
	trust, err := trustBundle(l)
	if err != nil {
		return res, fmt.Errorf("trust bundle: %w", err)
	}
	chain, err := intermediate(l)
	if err != nil {
		return res, fmt.Errorf("intermediate: %w", err)
	}
	for _, leaf := range leaves {
		ca, ok := cas[leaf.CA]
		if !ok {
			var err error
			ca, err = loadCA(l.PKIDir(), leaf.CA, now)
			if err != nil {
				return res, err
			}
			cas[leaf.CA] = ca
		}
		kept, err := ensureLeaf(l, cluster, server, ca, trustFor(leaf, ca, trust), chainFor(leaf, chain), leaf, now)
		if err != nil {
			return res, fmt.Errorf("%s: %w", leaf.Name, err)
		}
		if kept {
			res.Kept = append(res.Kept, leaf.Name)
		} else {
			res.Issued = append(res.Issued, leaf.Name)
		}
	}
	return res, nil
}

func loadCA(dir, name string, now time.Time) (*pki.CA, error) {
	certPEM, err1 := os.ReadFile(filepath.Join(dir, name+".crt"))
	keyPEM, err2 := os.ReadFile(filepath.Join(dir, name+".key"))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("CA %s: %w (the kube-local bootstrap data writes it on control-plane machines)", name, err)
	}
	ca, err := pki.ParseCA(pki.KeyPair{CertPEM: certPEM, KeyPEM: keyPEM}, now)
	if err != nil {
		return nil, fmt.Errorf("CA %s: %w", name, err)
	}
	return ca, nil
}

// trustFor is the CA data a kubeconfig leaf carries: the cluster CA's
// trust bundle (both CAs during a rotation), the signer's alone for the
// other CAs.
func trustFor(leaf Leaf, ca *pki.CA, bundle []byte) []byte {
	if leaf.CA == "ca" && len(bundle) > 0 {
		return bundle
	}
	return ca.Pair.CertPEM
}

// chainFor is what the API server's serving certificate file carries
// after the certificate: the rotation's intermediate, if any.
func chainFor(leaf Leaf, chain []byte) []byte {
	if leaf.Name == "apiserver" {
		return chain
	}
	return nil
}

// ensureLeaf keeps a good existing leaf (true) or writes a new one.
// Kubeconfigs carry trust as CA data; a certificate file carries chain
// after the certificate.
func ensureLeaf(l Layout, cluster, server string, ca *pki.CA, trust, chain []byte, leaf Leaf, now time.Time) (bool, error) {
	if leaf.Kubeconfig {
		path := l.KubeconfigPath(leaf.Name)
		if kc, err := readKubeconfig(path); err == nil && kc.server() == server &&
			bytes.Equal(kc.caData(), trust) && Satisfies(kc.certData(), kc.keyData(), ca, leaf, now) == nil {
			return true, nil
		}
		kp, err := issue(ca, leaf, now)
		if err != nil {
			return false, err
		}
		data, err := RenderKubeconfig(cluster, leaf.CommonName, server, trust, kp)
		if err != nil {
			return false, err
		}
		return false, writeFile(path, data, 0o600)
	}
	crt := filepath.Join(l.PKIDir(), filepath.FromSlash(leaf.Name)+".crt")
	key := filepath.Join(l.PKIDir(), filepath.FromSlash(leaf.Name)+".key")
	certPEM, err1 := os.ReadFile(crt)
	keyPEM, err2 := os.ReadFile(key)
	if err1 == nil && err2 == nil && Satisfies(certPEM, keyPEM, ca, leaf, now) == nil {
		// The same certificate; only the chain after it may differ.
		want := append(firstPEM(certPEM), chain...)
		if bytes.Equal(certPEM, want) {
			return true, nil
		}
		return true, writeFile(crt, want, 0o644)
	}
	kp, err := issue(ca, leaf, now)
	if err != nil {
		return false, err
	}
	// The key first: a crash in between leaves a pair that fails Satisfies
	// and is issued again.
	if err := writeFile(key, kp.KeyPEM, 0o600); err != nil {
		return false, err
	}
	return false, writeFile(crt, append(kp.CertPEM, chain...), 0o644)
}

// firstPEM is the first PEM block of b, encoded again.
func firstPEM(b []byte) []byte {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil
	}
	return pem.EncodeToMemory(block)
}

func issue(ca *pki.CA, leaf Leaf, now time.Time) (pki.KeyPair, error) {
	ips := make([]net.IP, len(leaf.IPs))
	for i, ip := range leaf.IPs {
		ips[i] = net.IP(ip.AsSlice())
	}
	return pki.IssueLeaf(ca, pki.LeafRequest{
		CommonName: leaf.CommonName, Organization: leaf.Organization,
		DNSNames: dedupe(leaf.DNSNames), IPAddresses: dedupeIPs(ips), Usages: leaf.Usages,
	}, now)
}

// Satisfies is nil when certPEM/keyPEM is a pair signed by ca that says
// exactly what leaf asks (subject, SANs, usages) and has more than
// RenewBefore left at now; otherwise it says what is wrong.
func Satisfies(certPEM, keyPEM []byte, ca *pki.CA, leaf Leaf, now time.Time) error {
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		return err
	}
	key, err := pki.ParsePrivateKey(keyPEM)
	if err != nil {
		return err
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return errors.New("the key does not match the certificate")
	}
	if err := cert.CheckSignatureFrom(ca.Cert); err != nil {
		return fmt.Errorf("not signed by the current CA %q: %w", ca.Cert.Subject.CommonName, err)
	}
	if now.Before(cert.NotBefore) || cert.NotAfter.Sub(now) < RenewBefore {
		return fmt.Errorf("valid %s to %s: renew", cert.NotBefore.Format(time.RFC3339), cert.NotAfter.Format(time.RFC3339))
	}
	if cert.Subject.CommonName != leaf.CommonName || !slices.Equal(cert.Subject.Organization, leaf.Organization) {
		return fmt.Errorf("subject %s, want CN=%s O=%v", cert.Subject, leaf.CommonName, leaf.Organization)
	}
	if !sameSet(cert.DNSNames, dedupe(leaf.DNSNames)) {
		return fmt.Errorf("DNS names %v, want %v", cert.DNSNames, leaf.DNSNames)
	}
	var have, want []string
	for _, ip := range cert.IPAddresses {
		have = append(have, ip.String())
	}
	for _, ip := range leaf.IPs {
		want = append(want, ip.String())
	}
	if !sameSet(have, dedupe(want)) {
		return fmt.Errorf("IP addresses %v, want %v", have, want)
	}
	if !sameSet(usageNames(cert.ExtKeyUsage), usageNames(leaf.Usages)) {
		return fmt.Errorf("usages %v, want %v", usageNames(cert.ExtKeyUsage), usageNames(leaf.Usages))
	}
	return nil
}

func usageNames(us []x509.ExtKeyUsage) []string {
	out := make([]string, len(us))
	for i, u := range us {
		switch u {
		case x509.ExtKeyUsageServerAuth:
			out[i] = "server"
		case x509.ExtKeyUsageClientAuth:
			out[i] = "client"
		default:
			out[i] = fmt.Sprint(int(u))
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = dedupe(a), dedupe(b)
	return slices.Equal(a, b)
}

// dedupe sorts and removes duplicates (a copy).
func dedupe(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

func dedupeIPs(ips []net.IP) []net.IP {
	var out []net.IP
	for _, ip := range ips {
		if !slices.ContainsFunc(out, ip.Equal) {
			out = append(out, ip)
		}
	}
	return out
}

// Kubeconfig is the subset of client-go's clientcmd v1 Config the node
// writes and reads: one cluster, one user with an embedded client
// certificate, one context.
type Kubeconfig struct {
	APIVersion     string         `json:"apiVersion"`
	Kind           string         `json:"kind"`
	Clusters       []namedCluster `json:"clusters"`
	Contexts       []namedContext `json:"contexts"`
	CurrentContext string         `json:"current-context"`
	Users          []namedUser    `json:"users"`
}

type namedCluster struct {
	Name    string `json:"name"`
	Cluster struct {
		Server                   string `json:"server"`
		CertificateAuthorityData []byte `json:"certificate-authority-data"`
	} `json:"cluster"`
}

type namedContext struct {
	Name    string `json:"name"`
	Context struct {
		Cluster string `json:"cluster"`
		User    string `json:"user"`
	} `json:"context"`
}

type namedUser struct {
	Name string `json:"name"`
	User struct {
		ClientCertificateData []byte `json:"client-certificate-data"`
		ClientKeyData         []byte `json:"client-key-data"`
	} `json:"user"`
}

// RenderKubeconfig writes a kubeconfig for user at server.
func RenderKubeconfig(cluster, user, server string, caPEM []byte, kp pki.KeyPair) ([]byte, error) {
	var kc Kubeconfig
	kc.APIVersion, kc.Kind = "v1", "Config"
	ctx := user + "@" + cluster
	kc.CurrentContext = ctx
	kc.Clusters = []namedCluster{{Name: cluster}}
	kc.Clusters[0].Cluster.Server = server
	kc.Clusters[0].Cluster.CertificateAuthorityData = caPEM
	kc.Users = []namedUser{{Name: user}}
	kc.Users[0].User.ClientCertificateData = kp.CertPEM
	kc.Users[0].User.ClientKeyData = kp.KeyPEM
	kc.Contexts = []namedContext{{Name: ctx}}
	kc.Contexts[0].Context.Cluster = cluster
	kc.Contexts[0].Context.User = user
	return yaml.Marshal(kc)
}

// ReadKubeconfig reads a kubeconfig written by RenderKubeconfig.
func ReadKubeconfig(path string) (*Kubeconfig, error) { return readKubeconfig(path) }

// ReadKubeadmKubeconfig reads a kubeconfig kubeadm wrote (admin.conf):
// as ReadKubeconfig, but the fields this one does not know (preferences)
// are ignored.
func ReadKubeadmKubeconfig(path string) (*Kubeconfig, error) {
	return parseKubeconfig(path, func(b []byte, v any) error { return yaml.Unmarshal(b, v) })
}

func readKubeconfig(path string) (*Kubeconfig, error) {
	return parseKubeconfig(path, func(b []byte, v any) error { return yaml.UnmarshalStrict(b, v) })
}

func parseKubeconfig(path string, unmarshal func([]byte, any) error) (*Kubeconfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var kc Kubeconfig
	if err := unmarshal(b, &kc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(kc.Clusters) != 1 || len(kc.Users) != 1 {
		return nil, fmt.Errorf("%s: want one cluster and one user", path)
	}
	return &kc, nil
}

func (k *Kubeconfig) server() string   { return k.Clusters[0].Cluster.Server }
func (k *Kubeconfig) caData() []byte   { return k.Clusters[0].Cluster.CertificateAuthorityData }
func (k *Kubeconfig) certData() []byte { return k.Users[0].User.ClientCertificateData }
func (k *Kubeconfig) keyData() []byte  { return k.Users[0].User.ClientKeyData }

// Server, CA and client pair of the kubeconfig.
func (k *Kubeconfig) Server() string { return k.server() }

// CA is the cluster CA certificate (PEM).
func (k *Kubeconfig) CA() []byte { return k.caData() }

// Client is the embedded client certificate and key (PEM).
func (k *Kubeconfig) Client() pki.KeyPair {
	return pki.KeyPair{CertPEM: k.certData(), KeyPEM: k.keyData()}
}

// writeFile writes atomically with mode, creating the directory.
func writeFile(dst string, data []byte, mode fs.FileMode) error {
	return atomicfile.Write(dst, data, mode, 0o755)
}

// serverURL is https://host:port with brackets for IPv6.
func serverURL(host string, port int) string {
	return "https://" + net.JoinHostPort(host, fmt.Sprint(port))
}
