package kube_test

import (
	"crypto/x509"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
)

func leafByName(t *testing.T, leaves []kube.Leaf, name string) kube.Leaf {
	t.Helper()
	for _, l := range leaves {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("no leaf %s", name)
	return kube.Leaf{}
}

func TestFirstServiceIP(t *testing.T) {
	for cidr, want := range map[string]string{"10.96.0.0/12": "10.96.0.1", "10.128.0.0/16": "10.128.0.1", "fd00:10:96::/108": "fd00:10:96::1"} {
		got, err := kube.FirstServiceIP(cidr)
		if err != nil || got.String() != want {
			t.Errorf("FirstServiceIP(%s) = %s, %v; want %s", cidr, got, err, want)
		}
	}
	if _, err := kube.FirstServiceIP("nope"); err == nil || !strings.Contains(err.Error(), "serviceCIDR") {
		t.Errorf("bad CIDR: %v", err)
	}
}

func TestLeavesSANs(t *testing.T) {
	set := bootstraptest.PKI(t)
	cfg, _ := machine{Host: "api.kl.example.com", Port: 6443, Network: &capnv1.NetworkSpec{ServiceCidrs: []string{"10.128.0.0/16"}, ServiceDomain: "corp.internal"}}.render(t, set)
	leaves, err := kube.Leaves(cfg, netip.MustParseAddr("127.0.0.7"))
	if err != nil {
		t.Fatal(err)
	}
	api := leafByName(t, leaves, "apiserver")
	wantDNS := []string{"api.kl.example.com", "kl-cp-0", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.corp.internal", "localhost"}
	if got := slices.Sorted(slices.Values(api.DNSNames)); !slices.Equal(got, wantDNS) {
		t.Errorf("apiserver DNS SANs %v, want %v", got, wantDNS)
	}
	if got := ipStrings(api.IPs); !slices.Equal(got, []string{"10.128.0.1", "127.0.0.1", "127.0.0.7"}) {
		t.Errorf("apiserver IP SANs %v", got)
	}
	for _, name := range []string{"etcd/server", "etcd/peer"} {
		l := leafByName(t, leaves, name)
		if got := slices.Sorted(slices.Values(l.DNSNames)); !slices.Equal(got, []string{"kl-cp-0", "localhost"}) || !slices.Equal(ipStrings(l.IPs), []string{"127.0.0.1", "127.0.0.7"}) || l.CA != "etcd/ca" {
			t.Errorf("%s: DNS %v IPs %v CA %s", name, l.DNSNames, ipStrings(l.IPs), l.CA)
		}
	}
	// An IP endpoint is an IP SAN, not a DNS one.
	cfg, _ = machine{Host: "127.0.0.1", Port: 7000}.render(t, set)
	leaves, _ = kube.Leaves(cfg, netip.MustParseAddr("127.0.0.9"))
	api = leafByName(t, leaves, "apiserver")
	if slices.Contains(api.DNSNames, "127.0.0.1") || !slices.Equal(ipStrings(api.IPs), []string{"10.96.0.1", "127.0.0.1", "127.0.0.9"}) {
		t.Errorf("IP endpoint: DNS %v IPs %v", api.DNSNames, ipStrings(api.IPs))
	}
	for name, want := range map[string]string{
		"controller-manager": "system:kube-controller-manager", "scheduler": "system:kube-scheduler", "admin": "kubernetes-admin",
		"apiserver-kubelet-client": "kube-apiserver-kubelet-client", "apiserver-etcd-client": "kube-apiserver-etcd-client", "front-proxy-client": "front-proxy-client",
	} {
		if l := leafByName(t, leaves, name); l.CommonName != want {
			t.Errorf("%s: CN %s, want %s", name, l.CommonName, want)
		}
	}
	if l := leafByName(t, leaves, "admin"); !slices.Equal(l.Organization, []string{"system:masters"}) || !l.Kubeconfig {
		t.Errorf("admin: %+v", l)
	}
}

func ipStrings(ips []netip.Addr) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// verify checks a leaf on disk with crypto/x509 as its peer would: chain
// to the CA for the usage, and the SANs.
func verify(t *testing.T, l kube.Layout, caName, name string, usage x509.ExtKeyUsage, host string) *x509.Certificate {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(l.PKIDir(), caName+".crt"))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := os.ReadFile(filepath.Join(l.PKIDir(), name+".crt"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(l.PKIDir(), name+".key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s.key: %v mode %v, want 0600", name, err, fi.Mode().Perm())
	}
	cert, _ := pki.ParseCertificate(certPEM)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: host}); err != nil {
		t.Errorf("%s does not verify for %s: %v", name, host, err)
	}
	return cert
}

func TestIssueAllAndKeep(t *testing.T) {
	set := bootstraptest.PKI(t)
	cfg, dir := machine{Host: "api.kl.example.com"}.render(t, set)
	l := kube.Layout{RootFS: filepath.Join(dir, "rootfs")}
	addr := netip.MustParseAddr("127.0.0.7")
	leaves, err := kube.Leaves(cfg, addr)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	server := "https://127.0.0.7:6443"
	res, err := kube.IssueAll(l, "kl", server, leaves, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Issued) != 9 || len(res.Kept) != 0 {
		t.Fatalf("first run issued %v kept %v", res.Issued, res.Kept)
	}
	for _, host := range []string{"api.kl.example.com", "127.0.0.7", "127.0.0.1", "10.96.0.1", "kubernetes.default.svc.cluster.local", "localhost", "kl-cp-0"} {
		verify(t, l, "ca", "apiserver", x509.ExtKeyUsageServerAuth, host)
	}
	verify(t, l, "ca", "apiserver-kubelet-client", x509.ExtKeyUsageClientAuth, "")
	verify(t, l, "etcd/ca", "apiserver-etcd-client", x509.ExtKeyUsageClientAuth, "")
	verify(t, l, "front-proxy-ca", "front-proxy-client", x509.ExtKeyUsageClientAuth, "")
	for _, name := range []string{"etcd/server", "etcd/peer"} {
		verify(t, l, "etcd/ca", name, x509.ExtKeyUsageServerAuth, "127.0.0.7")
		verify(t, l, "etcd/ca", name, x509.ExtKeyUsageClientAuth, "")
	}
	if _, err := os.Stat(filepath.Join(l.PKIDir(), "apiserver.crt")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"admin", "controller-manager", "scheduler"} {
		kc, err := kube.ReadKubeconfig(l.KubeconfigPath(name))
		if err != nil {
			t.Fatal(err)
		}
		if kc.Server() != server || string(kc.CA()) != string(set.CA.CertPEM) {
			t.Errorf("%s.conf: server %s", name, kc.Server())
		}
		if fi, _ := os.Stat(l.KubeconfigPath(name)); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s.conf mode %v", name, fi.Mode().Perm())
		}
		if err := kube.Satisfies(kc.Client().CertPEM, kc.Client().KeyPEM, mustCA(t, set.CA), leafByName(t, leaves, name), now); err != nil {
			t.Errorf("%s.conf client certificate: %v", name, err)
		}
	}
	before, _ := os.ReadFile(filepath.Join(l.PKIDir(), "apiserver.crt"))

	// A restart with the same facts keeps everything, byte for byte.
	res, err = kube.IssueAll(l, "kl", server, leaves, now.Add(time.Hour))
	if err != nil || len(res.Issued) != 0 || len(res.Kept) != 9 {
		t.Fatalf("second run: issued %v kept %v err %v", res.Issued, res.Kept, err)
	}
	if after, _ := os.ReadFile(filepath.Join(l.PKIDir(), "apiserver.crt")); string(after) != string(before) {
		t.Fatal("a kept certificate was rewritten")
	}

	// A new address: the certificates naming it are issued again, and so
	// are the kubeconfigs pointing at it.
	moved, _ := kube.Leaves(cfg, netip.MustParseAddr("127.0.0.8"))
	res, err = kube.IssueAll(l, "kl", "https://127.0.0.8:6443", moved, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"admin", "apiserver", "controller-manager", "etcd/peer", "etcd/server", "scheduler"}; !slices.Equal(slices.Sorted(slices.Values(res.Issued)), want) {
		t.Errorf("after moving: issued %v, want %v", res.Issued, want)
	}

	// A broken key, or one that is not the certificate's, is replaced.
	if err := os.WriteFile(filepath.Join(l.PKIDir(), "front-proxy-client.key"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := os.ReadFile(filepath.Join(l.PKIDir(), "apiserver-etcd-client.key"))
	if err := os.WriteFile(filepath.Join(l.PKIDir(), "apiserver-kubelet-client.key"), other, 0o600); err != nil {
		t.Fatal(err)
	}
	res, _ = kube.IssueAll(l, "kl", "https://127.0.0.8:6443", moved, now)
	if want := []string{"apiserver-kubelet-client", "front-proxy-client"}; !slices.Equal(slices.Sorted(slices.Values(res.Issued)), want) {
		t.Errorf("after breaking keys: issued %v, want %v", res.Issued, want)
	}

	// 40 days before expiry nothing moves; 20 days before, everything is renewed.
	cert, _ := pki.ParseCertificate(before)
	res, _ = kube.IssueAll(l, "kl", "https://127.0.0.8:6443", moved, cert.NotAfter.Add(-40*24*time.Hour))
	if len(res.Issued) != 0 {
		t.Errorf("40 days left: issued %v", res.Issued)
	}
	res, _ = kube.IssueAll(l, "kl", "https://127.0.0.8:6443", moved, cert.NotAfter.Add(-20*24*time.Hour))
	if len(res.Issued) != 9 {
		t.Errorf("20 days left: issued %v, want all", res.Issued)
	}
}

func TestIssueAllNewCA(t *testing.T) {
	set := bootstraptest.PKI(t)
	cfg, dir := machine{}.render(t, set)
	l := kube.Layout{RootFS: filepath.Join(dir, "rootfs")}
	leaves, _ := kube.Leaves(cfg, netip.MustParseAddr("127.0.0.1"))
	if _, err := kube.IssueAll(l, "kl", "https://127.0.0.1:6443", leaves, time.Now()); err != nil {
		t.Fatal(err)
	}
	// The front-proxy CA is replaced: only its leaf is issued again.
	ca, err := pki.NewCA("front-proxy-ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(l.PKIDir(), "front-proxy-ca.crt"), ca.CertPEM, 0o644)
	os.WriteFile(filepath.Join(l.PKIDir(), "front-proxy-ca.key"), ca.KeyPEM, 0o600)
	res, err := kube.IssueAll(l, "kl", "https://127.0.0.1:6443", leaves, time.Now())
	if err != nil || !slices.Equal(res.Issued, []string{"front-proxy-client"}) {
		t.Fatalf("issued %v err %v", res.Issued, err)
	}
	verify(t, l, "front-proxy-ca", "front-proxy-client", x509.ExtKeyUsageClientAuth, "")

	// No CA key at all: a clear error naming the CA.
	os.Remove(filepath.Join(l.PKIDir(), "etcd/ca.key"))
	_, err = kube.IssueAll(l, "kl", "https://127.0.0.1:6443", leaves, time.Now())
	if err == nil || !strings.Contains(err.Error(), "CA etcd/ca") {
		t.Fatalf("missing CA key: %v", err)
	}
}

func mustCA(t *testing.T, kp pki.KeyPair) *pki.CA {
	t.Helper()
	ca, err := pki.ParseCA(kp, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
