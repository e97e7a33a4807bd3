package kubeapi_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/secrets/pki"
)

func TestReadyReportsFailingChecks(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			w.WriteHeader(404)
			return
		}
		if !ready.Load() {
			w.WriteHeader(500)
			io.WriteString(w, "[+]ping ok\n[-]etcd failed: reason withheld\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed\n")
			return
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	c := &kubeapi.Client{Server: srv.URL, HTTP: srv.Client()}
	err := c.Ready(t.Context())
	if err == nil || err.Error() != "/readyz: 500 failing: etcd, poststarthook/rbac/bootstrap-roles" {
		t.Errorf("not ready: %v", err)
	}
	ready.Store(true)
	if err := c.Ready(t.Context()); err != nil {
		t.Errorf("ready: %v", err)
	}
}

// A client made by NewClient trusts only the given CA and presents its
// client certificate, which the server verifies against the same CA.
func TestNewClientMutualTLS(t *testing.T) {
	now := time.Now()
	caPair, ca, admin := newCA(t, "kubernetes")
	serving, err := pki.IssueLeaf(ca, pki.LeafRequest{CommonName: "kube-apiserver", IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}, now)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	cert, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	var deleted atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := r.TLS.PeerCertificates[0].Subject
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/version":
			io.WriteString(w, `{"gitVersion":"v1.37.2"}`)
		case r.Method == http.MethodDelete && r.URL.Path == "/api/v1/namespaces/kube-system/secrets/there" && user.CommonName == "kubernetes-admin":
			deleted.Add(1)
			io.WriteString(w, `{"kind":"Status","status":"Success"}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"kind":"Status","reason":"NotFound","message":"secrets \"gone\" not found"}`)
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()

	c, err := kubeapi.NewClient(srv.URL+"/", caPair.CertPEM, admin.CertPEM, admin.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v, err := c.Version(t.Context()); err != nil || v != "v1.37.2" {
		t.Fatalf("Version = %q, %v", v, err)
	}
	if gone, err := c.Delete(t.Context(), "/api/v1/namespaces/kube-system/secrets/there"); err != nil || !gone || deleted.Load() != 1 {
		t.Fatalf("Delete of an existing object = %v, %v (server saw %d)", gone, err, deleted.Load())
	}
	if gone, err := c.Delete(t.Context(), "/api/v1/namespaces/kube-system/secrets/gone"); err != nil || gone {
		t.Fatalf("Delete of a missing object = %v, %v; want false, nil", gone, err)
	}

	// Another CA's server is not trusted.
	other, err := pki.NewCA("other", now)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := kubeapi.NewClient(srv.URL, other.CertPEM, admin.CertPEM, admin.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Version(t.Context()); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("a server of another CA: %v", err)
	}
	if _, err := kubeapi.NewClient(srv.URL, nil, admin.CertPEM, admin.KeyPEM); err == nil {
		t.Fatal("NewClient without a CA succeeded")
	}
}
