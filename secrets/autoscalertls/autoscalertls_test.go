package autoscalertls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/secrets/pki"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestEnsureKeepsWhatIsGood(t *testing.T) {
	dir := t.TempDir()
	wrote, err := Ensure(dir, []string{"127.0.0.1", "localhost"}, t0)
	if err != nil || !wrote {
		t.Fatalf("first Ensure: wrote %v, %v", wrote, err)
	}
	if wrote, err = Ensure(dir, []string{"localhost", "127.0.0.1"}, t0.Add(time.Hour)); err != nil || wrote {
		t.Fatalf("second Ensure: wrote %v, %v; want nothing written", wrote, err)
	}
	if wrote, _ = Ensure(dir, []string{"127.0.0.1", "capn.example"}, t0); !wrote {
		t.Error("a new host did not reissue the server certificate")
	}
	if wrote, _ = Ensure(dir, []string{"127.0.0.1", "capn.example"}, t0.Add(pki.LeafValidity-renewBefore/2)); !wrote {
		t.Error("a server certificate about to expire was kept")
	}
	for _, f := range []string{CAKeyFile, ServerKeyFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", f, st.Mode(), err)
		}
	}
}

// serve runs one TLS handshake with the server config of dir and returns
// the cluster the client's certificate speaks for.
func serve(t *testing.T, dir string, client tls.Certificate, roots *x509.CertPool) (string, error) {
	t.Helper()
	cfg, err := ServerConfig(filepath.Join(dir, ServerCertFile), filepath.Join(dir, ServerKeyFile), filepath.Join(dir, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan error, 1)
	var cluster string
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			got <- err
			return
		}
		cluster, err = ClusterOf(tc.ConnectionState().PeerCertificates[0])
		got <- err
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{Certificates: []tls.Certificate{client}, RootCAs: roots, ServerName: "127.0.0.1"})
	if err == nil {
		// TLS 1.3: the server's verdict on the client arrives with the
		// first read.
		_, _ = conn.Read(make([]byte, 1))
		conn.Close()
	}
	return cluster, <-got
}

func TestClientCertificateNamesItsCluster(t *testing.T) {
	dir := t.TempDir()
	if _, err := Ensure(dir, []string{"127.0.0.1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	c, err := IssueClient(dir, "demo", "127.0.0.1:8086", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(c.CloudConfig)
	if err != nil || !strings.Contains(string(cfg), `address: "127.0.0.1:8086"`) || !strings.Contains(string(cfg), c.Key) {
		t.Fatalf("cloud config %s, %v", cfg, err)
	}
	pair, err := tls.LoadX509KeyPair(c.Cert, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(c.CA)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	if cluster, err := serve(t, dir, pair, roots); err != nil || cluster != "demo" {
		t.Fatalf("handshake: cluster %q, %v; want demo", cluster, err)
	}

	// The attack: a certificate of another CA, though it names the
	// cluster and the organization, is refused at the handshake.
	other, _ := pki.NewCA(CACommonName, time.Now())
	oca, _ := pki.ParseCA(other, time.Now())
	forged, _ := pki.IssueLeaf(oca, pki.LeafRequest{CommonName: "demo", Organization: []string{ClientOrganization},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, time.Now())
	fpair, _ := tls.X509KeyPair(forged.CertPEM, forged.KeyPEM)
	if _, err := serve(t, dir, fpair, roots); err == nil {
		t.Fatal("a client certificate of another CA was accepted")
	}
	// One of the right CA without the autoscaler's organization is not an
	// autoscaler's.
	ca, _ := loadCA(dir, time.Now())
	plain, _ := pki.IssueLeaf(ca, pki.LeafRequest{CommonName: "demo", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, time.Now())
	ppair, _ := tls.X509KeyPair(plain.CertPEM, plain.KeyPEM)
	if _, err := serve(t, dir, ppair, roots); !errors.Is(err, ErrNotAutoscaler) {
		t.Fatalf("a certificate without %s: %v, want ErrNotAutoscaler", ClientOrganization, err)
	}

	// Issuing again keeps the certificate; another cluster gets its own.
	before, _ := os.ReadFile(c.Cert)
	if _, err := IssueClient(dir, "demo", "127.0.0.1:8086", time.Now()); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(c.Cert); string(after) != string(before) {
		t.Error("IssueClient replaced a good certificate")
	}
	if _, err := IssueClient(dir, "demo", "no-port", time.Now()); err == nil {
		t.Error("an address without a port was accepted")
	}
	if _, err := IssueClient(t.TempDir(), "demo", "127.0.0.1:1", time.Now()); err == nil {
		t.Error("a client issued without a CA")
	}
}
