package controlplanehosted

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/capn-dev/capn/internal/atomicfile"
	"github.com/capn-dev/capn/secrets/kubeconfig"
	"github.com/capn-dev/capn/secrets/pki"
)

// writePKI writes the cluster's CAs (with their keys: the
// controller-manager signs with the cluster CA, as on a control-plane
// machine), the service-account key pair, and issues every leaf a hosted
// control plane needs, as kubeadm names them; every start issues them
// anew (they are cheap, and a start never serves with a stale one). The
// kubeconfigs of the controller-manager and scheduler point at the
// endpoint; admin.conf is capn's admin identity (pki.IssueAdmin, the one
// the bootstrapper's admin kubeconfig carries).
func writePKI(l layout, st *state, set pki.Set, now time.Time) error {
	files := map[string][]byte{
		"ca.crt": set.CA.CertPEM, "ca.key": set.CA.KeyPEM,
		"etcd/ca.crt": set.EtcdCA.CertPEM, "etcd/ca.key": set.EtcdCA.KeyPEM,
		"front-proxy-ca.crt": set.FrontProxyCA.CertPEM, "front-proxy-ca.key": set.FrontProxyCA.KeyPEM,
		"sa.pub": set.ServiceAccount.PublicPEM, "sa.key": set.ServiceAccount.PrivatePEM,
	}
	ca, err := pki.ParseCA(set.CA, now)
	if err != nil {
		return fmt.Errorf("cluster CA: %w", err)
	}
	etcdCA, err := pki.ParseCA(set.EtcdCA, now)
	if err != nil {
		return fmt.Errorf("etcd CA: %w", err)
	}
	fpCA, err := pki.ParseCA(set.FrontProxyCA, now)
	if err != nil {
		return fmt.Errorf("front-proxy CA: %w", err)
	}
	svcIP, err := firstServiceIP(st.ServiceCIDR)
	if err != nil {
		return err
	}
	loop := net.ParseIP(loopback)
	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	leaves := []struct {
		name string
		ca   *pki.CA
		req  pki.LeafRequest
	}{
		{"apiserver", ca, pki.LeafRequest{CommonName: "kube-apiserver", Usages: server,
			DNSNames:    []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + st.DNSDomain, "localhost"},
			IPAddresses: []net.IP{loop, net.IP(svcIP.AsSlice())}}},
		{"apiserver-kubelet-client", ca, pki.LeafRequest{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"kubeadm:cluster-admins"}, Usages: client}},
		{"apiserver-etcd-client", etcdCA, pki.LeafRequest{CommonName: "kube-apiserver-etcd-client", Usages: client}},
		{"front-proxy-client", fpCA, pki.LeafRequest{CommonName: "front-proxy-client", Usages: client}},
	}
	for i := range st.Members {
		for name, kp := range etcdMemberLeaves(etcdCA, i, now, &err) {
			files[name] = kp
		}
		if err != nil {
			return err
		}
	}
	for _, leaf := range leaves {
		kp, err := pki.IssueLeaf(leaf.ca, leaf.req, now)
		if err != nil {
			return fmt.Errorf("%s: %w", leaf.name, err)
		}
		files[leaf.name+".crt"], files[leaf.name+".key"] = kp.CertPEM, kp.KeyPEM
	}
	for name, data := range files {
		mode := os.FileMode(0o600)
		if filepath.Ext(name) == ".crt" || filepath.Ext(name) == ".pub" {
			mode = 0o644
		}
		if err := writeFile(filepath.Join(l.pki(), filepath.FromSlash(name)), data, mode); err != nil {
			return err
		}
	}
	// Kubeconfigs: the components' and capn's admin.
	kubeconfigs := map[string]pki.LeafRequest{
		"controller-manager": {CommonName: "system:kube-controller-manager", Usages: client},
		"scheduler":          {CommonName: "system:kube-scheduler", Usages: client},
	}
	for name, req := range kubeconfigs {
		kp, err := pki.IssueLeaf(ca, req, now)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := writeKubeconfig(l.kubeconfig(name), st, set.CA.CertPEM, kp); err != nil {
			return err
		}
	}
	admin, err := pki.IssueAdmin(ca, now)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	return writeKubeconfig(l.kubeconfig("admin"), st, set.CA.CertPEM, admin)
}

// etcdMemberLeaves are etcd member i's server and peer certificates and
// keys (etcd/server-<i>.crt …), by file name; *errp is set on a failure.
func etcdMemberLeaves(etcdCA *pki.CA, i int, now time.Time, errp *error) map[string][]byte {
	name := etcdName(i)
	req := pki.LeafRequest{CommonName: name, DNSNames: []string{"localhost", name}, IPAddresses: []net.IP{net.ParseIP(loopback)},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	out := map[string][]byte{}
	for _, kind := range []string{"server", "peer"} {
		leaf := "etcd/" + kind + "-" + strconv.Itoa(i)
		kp, err := pki.IssueLeaf(etcdCA, req, now)
		if err != nil {
			*errp = fmt.Errorf("%s: %w", leaf, err)
			return nil
		}
		out[leaf+".crt"], out[leaf+".key"] = kp.CertPEM, kp.KeyPEM
	}
	return out
}

// writeEtcdMemberPKI issues etcd member i's leaves from the etcd CA in the
// data dir (a scale adds the member to a running control plane).
func writeEtcdMemberPKI(l layout, i int, now time.Time) error {
	set, err := readPKI(l)
	if err != nil {
		return err
	}
	etcdCA, err := pki.ParseCA(set.EtcdCA, now)
	if err != nil {
		return fmt.Errorf("etcd CA: %w", err)
	}
	files := etcdMemberLeaves(etcdCA, i, now, &err)
	if err != nil {
		return err
	}
	for name, data := range files {
		mode := os.FileMode(0o600)
		if filepath.Ext(name) == ".crt" {
			mode = 0o644
		}
		if err := writeFile(l.pkiFile(name), data, mode); err != nil {
			return err
		}
	}
	return nil
}

// removeEtcdMemberPKI removes etcd member i's leaves.
func removeEtcdMemberPKI(l layout, i int) error {
	var errs []error
	for _, kind := range []string{"server", "peer"} {
		for _, ext := range []string{".crt", ".key"} {
			if err := os.Remove(l.pkiFile("etcd/" + kind + "-" + strconv.Itoa(i) + ext)); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func writeKubeconfig(path string, st *state, caPEM []byte, kp pki.KeyPair) error {
	b, err := kubeconfig.Render(kubeconfig.Input{ClusterName: st.Cluster, Host: loopback, Port: int32(st.Endpoint),
		CACertPEM: caPEM, ClientCertPEM: kp.CertPEM, ClientKeyPEM: kp.KeyPEM})
	if err != nil {
		return err
	}
	return writeFile(path, b, 0o600)
}

// firstServiceIP is the `kubernetes` Service's cluster IP (10.96.0.1 for
// 10.96.0.0/12).
func firstServiceIP(cidr string) (netip.Addr, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("service CIDR %q: %w", cidr, err)
	}
	ip := p.Masked().Addr().Next()
	if !p.Contains(ip) {
		return netip.Addr{}, fmt.Errorf("service CIDR %q: no first address", cidr)
	}
	return ip, nil
}

// writeFile writes atomically with mode; the directories it makes are
// the service's alone (0700).
func writeFile(dst string, data []byte, mode os.FileMode) error {
	return atomicfile.Write(dst, data, mode, 0o700)
}
