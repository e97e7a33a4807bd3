package kube_test

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
)

// fakeSigner is the CSR API with the controller-manager's approver and
// signer behind it: a CSR is signed (or denied) on its second read.
type fakeSigner struct {
	t    *testing.T
	ca   *pki.CA
	deny bool

	mu    sync.Mutex
	auth  []string
	spec  map[string]any
	reads int
}

func (f *fakeSigner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	switch {
	case r.Method == http.MethodPost && r.URL.Path == kube.CSRCollection:
		var in struct {
			Spec map[string]any `json:"spec"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			w.WriteHeader(400)
			return
		}
		f.spec = in.Spec
		w.WriteHeader(201)
		w.Write([]byte("{}"))
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, kube.CSRCollection+"/node-csr-"):
		f.reads++
		status := map[string]any{}
		if f.reads >= 2 {
			if f.deny {
				status["conditions"] = []any{map[string]any{"type": "Denied", "reason": "NotMine", "message": "no"}}
			} else {
				status["certificate"] = f.sign(f.spec["request"].(string))
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"status": status})
	default:
		w.WriteHeader(404)
	}
}

// sign is what csrsigning does: the CSR's subject and key, the CA's
// signature, client auth; base64 of the PEM, as the API sends []byte.
func (f *fakeSigner) sign(request string) string {
	raw, err := base64.StdEncoding.DecodeString(request)
	if err != nil {
		f.t.Errorf("spec.request is not base64: %v", err)
		return ""
	}
	block, _ := pem.Decode(raw)
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil || csr.CheckSignature() != nil {
		f.t.Errorf("spec.request: %v", err)
		return ""
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: csr.Subject,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.ca.Cert, csr.PublicKey, f.ca.Key)
	if err != nil {
		f.t.Error(err)
	}
	return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func TestRequestNodeCertificate(t *testing.T) {
	set := bootstraptest.PKI(t)
	ca := mustCA(t, set.CA)
	f := &fakeSigner{t: t, ca: ca}
	srv := httptest.NewTLSServer(f)
	defer srv.Close()
	c := &kube.Client{Server: srv.URL, HTTP: srv.Client(), Token: bootstraptest.Token.Value()}

	kp, err := kube.RequestNodeCertificate(t.Context(), c, "kl-md-0", 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	leaf := kube.Leaf{CommonName: "system:node:kl-md-0", Organization: []string{"system:nodes"}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if err := kube.Satisfies(kp.CertPEM, kp.KeyPEM, ca, leaf, time.Now()); err != nil {
		t.Errorf("the node certificate and key: %v", err)
	}
	if f.spec["signerName"] != "kubernetes.io/kube-apiserver-client-kubelet" || !slices.Equal(toStrings(f.spec["usages"]), []string{"digital signature", "client auth"}) {
		t.Errorf("CSR spec %v", f.spec)
	}
	for _, a := range f.auth {
		if a != "Bearer abcdef.0123456789abcdef" {
			t.Errorf("request authorised with %q, want the bootstrap token", a)
		}
	}

	f.deny, f.reads = true, 0
	_, err = kube.RequestNodeCertificate(t.Context(), c, "kl-md-0", 10*time.Millisecond)
	if !errors.Is(err, kube.ErrCSRRefused) || !strings.Contains(err.Error(), "Denied: NotMine no") {
		t.Errorf("denied: %v", err)
	}
}

func TestNewNodeCSR(t *testing.T) {
	a, err := kube.NewNodeCSR("kl-md-0")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := kube.NewNodeCSR("kl-md-0")
	if a.Name == b.Name || !strings.HasPrefix(a.Name, "node-csr-kl-md-0-") {
		t.Errorf("names %s %s: want distinct, from the content", a.Name, b.Name)
	}
	block, _ := pem.Decode(a.PEM)
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if csr.Subject.String() != (pkix.Name{CommonName: "system:node:kl-md-0", Organization: []string{"system:nodes"}}).String() || len(csr.DNSNames)+len(csr.IPAddresses) != 0 {
		t.Errorf("CSR subject %s, SANs %v %v (the approver wants none)", csr.Subject, csr.DNSNames, csr.IPAddresses)
	}
	key, err := pki.ParsePrivateKey(a.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(csr.PublicKey) {
		t.Error("the key is not the CSR's")
	}
	body, _ := json.Marshal(a.Object().Body)
	if !strings.Contains(string(body), `"request":"`+base64.StdEncoding.EncodeToString(a.PEM)+`"`) {
		t.Errorf("CSR object %s", body)
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}
