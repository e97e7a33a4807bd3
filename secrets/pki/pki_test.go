package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustSet(t *testing.T) Set {
	t.Helper()
	s, added, err := Ensure(Set{}, Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(added, Parts()) {
		t.Fatalf("Ensure on an empty set added %v, want %v", added, Parts())
	}
	return s
}

func mustCA(t *testing.T, kp KeyPair) *CA {
	t.Helper()
	ca, err := ParseCA(kp, now)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestGeneratedCAs(t *testing.T) {
	s := mustSet(t)
	tests := []struct {
		name string
		kp   KeyPair
		cn   string
	}{
		{"cluster CA", s.CA, CACommonName},
		{"etcd CA", s.EtcdCA, EtcdCACommonName},
		{"front-proxy CA", s.FrontProxyCA, FrontProxyCACommonName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ca := mustCA(t, tt.kp)
			c := ca.Cert
			if c.Subject.CommonName != tt.cn {
				t.Errorf("CN %q, want %q", c.Subject.CommonName, tt.cn)
			}
			if !c.IsCA || !c.BasicConstraintsValid {
				t.Error("not CA:TRUE")
			}
			want := x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
			if c.KeyUsage != want {
				t.Errorf("key usage %b, want %b (keyCertSign, digitalSignature, keyEncipherment)", c.KeyUsage, want)
			}
			if got := c.NotAfter.Sub(now); got != CAValidity {
				t.Errorf("validity %s, want %s", got, CAValidity)
			}
			if _, ok := c.PublicKey.(*ecdsa.PublicKey); !ok {
				t.Errorf("public key %T, want ECDSA", c.PublicKey)
			}
			if !bytes.HasPrefix(tt.kp.KeyPEM, []byte("-----BEGIN EC PRIVATE KEY-----")) {
				t.Error("private key is not PEM EC PRIVATE KEY")
			}
			opensslVerify(t, tt.kp.CertPEM, tt.kp.CertPEM, now)
			opensslCAUsages(t, tt.kp.CertPEM)
		})
	}
	if err := ParseServiceAccountKey(s.ServiceAccount); err != nil {
		t.Fatal(err)
	}
}

// opensslCAUsages checks the extensions as openssl prints them.
func opensslCAUsages(t *testing.T, certPEM []byte) {
	t.Helper()
	out, err := exec.Command("openssl", "x509", "-noout", "-ext", "basicConstraints,keyUsage", "-in", writeTemp(t, "ca.crt", certPEM)).CombinedOutput()
	if err != nil {
		t.Fatalf("openssl x509: %v\n%s", err, out)
	}
	for _, want := range []string{"CA:TRUE", "Digital Signature", "Key Encipherment", "Certificate Sign"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("openssl shows no %q in\n%s", want, out)
		}
	}
}

func TestIssueAdmin(t *testing.T) {
	s := mustSet(t)
	rsaCA := rsaCAPair(t, caTemplate(now.Add(-time.Hour), now.Add(CAValidity), true, x509.KeyUsageCertSign))
	for _, tt := range []struct {
		name string
		ca   KeyPair
	}{{"generated ECDSA CA", s.CA}, {"user RSA CA", rsaCA}} {
		t.Run(tt.name, func(t *testing.T) {
			admin, err := IssueAdmin(mustCA(t, tt.ca), now)
			if err != nil {
				t.Fatal(err)
			}
			c, err := ParseCertificate(admin.CertPEM)
			if err != nil {
				t.Fatal(err)
			}
			if c.Subject.CommonName != AdminCommonName || !slices.Equal(c.Subject.Organization, []string{"system:masters"}) {
				t.Errorf("subject %s, want CN=kubernetes-admin O=system:masters", c.Subject)
			}
			if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
				t.Errorf("ext key usage %v, want clientAuth", c.ExtKeyUsage)
			}
			if c.IsCA {
				t.Error("admin certificate is a CA")
			}
			if got := c.NotAfter.Sub(now); got != ClientCertValidity {
				t.Errorf("validity %s, want %s", got, ClientCertValidity)
			}
			key, err := ParsePrivateKey(admin.KeyPEM)
			if err != nil || !publicKeysEqual(c.PublicKey, key.Public()) {
				t.Fatalf("admin key does not match its certificate: %v", err)
			}
			opensslVerify(t, tt.ca.CertPEM, admin.CertPEM, now)
			requireTool(t, "openssl")
			out, err := exec.Command("openssl", "verify", "-purpose", "sslclient", "-CAfile", writeTemp(t, "ca.crt", tt.ca.CertPEM), writeTemp(t, "admin.crt", admin.CertPEM)).CombinedOutput()
			if err != nil {
				t.Fatalf("openssl verify -purpose sslclient: %v\n%s", err, out)
			}
		})
	}
}

func TestIssueLeaf(t *testing.T) {
	s := mustSet(t)
	ca := mustCA(t, s.CA)
	kp, err := IssueLeaf(ca, LeafRequest{
		CommonName:  "kube-apiserver",
		DNSNames:    []string{"kubernetes", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.ParseIP("10.96.0.1")},
		Validity:    20 * CAValidity,
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := ParseCertificate(kp.CertPEM)
	if !c.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("leaf outlives its CA: %s > %s", c.NotAfter, ca.Cert.NotAfter)
	}
	if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || c.DNSNames[1] != "kubernetes.default.svc" || !c.IPAddresses[0].Equal(net.ParseIP("10.96.0.1")) {
		t.Errorf("leaf: usages %v, SANs %v %v", c.ExtKeyUsage, c.DNSNames, c.IPAddresses)
	}
	opensslVerify(t, s.CA.CertPEM, kp.CertPEM, now)
	requireTool(t, "openssl")
	out, err := exec.Command("openssl", "verify", "-purpose", "sslserver", "-CAfile", writeTemp(t, "ca.crt", s.CA.CertPEM), writeTemp(t, "leaf.crt", kp.CertPEM)).CombinedOutput()
	if err != nil {
		t.Fatalf("openssl verify -purpose sslserver: %v\n%s", err, out)
	}
	if _, err := IssueLeaf(ca, LeafRequest{}, now); err == nil {
		t.Error("IssueLeaf with no common name succeeded")
	}
	if _, err := IssueLeaf(ca, LeafRequest{CommonName: "x"}, now.Add(CAValidity+time.Hour)); err == nil {
		t.Error("IssueLeaf from an expired CA succeeded")
	}
}

func TestNeedsRenewal(t *testing.T) {
	s := mustSet(t)
	admin, err := IssueAdmin(mustCA(t, s.CA), now)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cert []byte
		at   time.Time
		want bool
	}{
		{"fresh", admin.CertPEM, now, false},
		{"five months in", admin.CertPEM, now.AddDate(0, 5, 0), false},
		{"exactly half left", admin.CertPEM, now.Add(ClientCertRenewBefore), false},
		{"just under six months left", admin.CertPEM, now.Add(ClientCertRenewBefore + time.Minute), true},
		{"eleven months in", admin.CertPEM, now.AddDate(0, 11, 0), true},
		{"expired", admin.CertPEM, now.AddDate(2, 0, 0), true},
		{"missing", nil, now, true},
		{"garbage", []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), now, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NeedsRenewal(tt.cert, tt.at); got != tt.want {
				t.Fatalf("NeedsRenewal = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCACertHash(t *testing.T) {
	s := mustSet(t)
	got, err := CACertHash(s.CA.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := ParseCertificate(s.CA.CertPEM)
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	if want := "sha256:" + hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("hash %s, want %s", got, want)
	}
	// The recipe from the kubeadm documentation.
	requireTool(t, "openssl")
	cmd := exec.Command("sh", "-c", `openssl x509 -pubkey -noout -in "$1" | openssl pkey -pubin -outform der | openssl dgst -sha256 -hex | sed 's/^.* //'`, "sh", writeTemp(t, "ca.crt", s.CA.CertPEM))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("openssl: %v\n%s", err, out)
	}
	if want := "sha256:" + strings.TrimSpace(string(out)); got != want {
		t.Fatalf("hash %s, openssl says %s", got, want)
	}
	if _, err := CACertHash([]byte("nope")); err == nil {
		t.Fatal("CACertHash of garbage succeeded")
	}
}

func TestEnsureKeepsExisting(t *testing.T) {
	s := mustSet(t)
	again, added, err := Ensure(s, Options{Now: now.AddDate(1, 0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if len(added) != 0 || !again.CA.Equal(s.CA) || !again.EtcdCA.Equal(s.EtcdCA) || !again.FrontProxyCA.Equal(s.FrontProxyCA) ||
		!bytes.Equal(again.ServiceAccount.PrivatePEM, s.ServiceAccount.PrivatePEM) {
		t.Fatalf("Ensure on a complete set changed it (added %v)", added)
	}

	partial := Set{CA: s.CA}
	got, added, err := Ensure(partial, Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if !got.CA.Equal(s.CA) || !slices.Equal(added, []Part{PartEtcdCA, PartFrontProxyCA, PartServiceAccount}) {
		t.Fatalf("pre-loaded CA: added %v, CA kept %v", added, got.CA.Equal(s.CA))
	}
}

func TestEnsureUserCA(t *testing.T) {
	user := rsaCAPair(t, caTemplate(now.Add(-time.Hour), now.AddDate(5, 0, 0), true, x509.KeyUsageCertSign|x509.KeyUsageDigitalSignature))
	s, added, err := Ensure(Set{}, Options{Now: now, UserCA: &user})
	if err != nil {
		t.Fatal(err)
	}
	if !s.CA.Equal(user) || !slices.Equal(added, Parts()) {
		t.Fatalf("user CA not used as is (added %v)", added)
	}
	// Idempotent with the user CA still in the spec.
	if _, added, err := Ensure(s, Options{Now: now, UserCA: &user}); err != nil || len(added) != 0 {
		t.Fatalf("second Ensure: added %v, err %v", added, err)
	}
	// A different CA in the spec later never replaces the one in use.
	other := mustSet(t).CA
	if _, _, err := Ensure(s, Options{Now: now, UserCA: &other}); !errors.Is(err, ErrCAConflict) {
		t.Fatalf("conflicting user CA: err %v, want ErrCAConflict", err)
	}
}

func TestParseCAErrors(t *testing.T) {
	good := mustSet(t).CA
	otherKey := mustSet(t).CA.KeyPEM
	notCA := rsaCAPair(t, caTemplate(now.Add(-time.Hour), now.AddDate(1, 0, 0), false, x509.KeyUsageDigitalSignature))
	noCertSign := rsaCAPair(t, caTemplate(now.Add(-time.Hour), now.AddDate(1, 0, 0), true, x509.KeyUsageDigitalSignature))
	expired := rsaCAPair(t, caTemplate(now.AddDate(-2, 0, 0), now.AddDate(-1, 0, 0), true, x509.KeyUsageCertSign))
	future := rsaCAPair(t, caTemplate(now.AddDate(0, 1, 0), now.AddDate(1, 0, 0), true, x509.KeyUsageCertSign))
	edDER, _ := func() ([]byte, error) {
		_, k, _ := ed25519.GenerateKey(rand.Reader)
		return x509.MarshalPKCS8PrivateKey(k)
	}()
	edPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: edDER})
	encrypted := []byte("-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\nAAAA\n-----END EC PRIVATE KEY-----\n")

	tests := []struct {
		name string
		kp   KeyPair
		want string
	}{
		{"no certificate", KeyPair{KeyPEM: good.KeyPEM}, "certificate: no PEM block"},
		{"key in certificate field", KeyPair{CertPEM: good.KeyPEM, KeyPEM: good.KeyPEM}, `PEM block is "EC PRIVATE KEY", want CERTIFICATE`},
		{"not a CA", notCA, "is not a CA"},
		{"no keyCertSign", noCertSign, "without the keyCertSign"},
		{"expired", expired, "expired at"},
		{"not yet valid", future, "not valid before"},
		{"no key", KeyPair{CertPEM: good.CertPEM}, "private key: no PEM block"},
		{"wrong key", KeyPair{CertPEM: good.CertPEM, KeyPEM: otherKey}, "does not match"},
		{"ed25519 key", KeyPair{CertPEM: good.CertPEM, KeyPEM: edPEM}, "not supported by kubeadm"},
		{"encrypted key", KeyPair{CertPEM: good.CertPEM, KeyPEM: encrypted}, "encrypted"},
		{"certificate in key field", KeyPair{CertPEM: good.CertPEM, KeyPEM: good.CertPEM}, `PEM block is "CERTIFICATE"`},
		{"corrupt key", KeyPair{CertPEM: good.CertPEM, KeyPEM: []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n")}, "private key: EC PRIVATE KEY:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseCA(tt.kp, now)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseCA error = %v, want containing %q", err, tt.want)
			}
			for _, k := range [][]byte{good.KeyPEM, otherKey, tt.kp.KeyPEM} {
				if len(k) > 0 && strings.Contains(err.Error(), strings.TrimSpace(pemBody(k))) {
					t.Fatal("error contains key material")
				}
			}
		})
	}
}

func TestFormatRedactsKeys(t *testing.T) {
	s := mustSet(t)
	for _, out := range []string{
		fmt.Sprintf("%v %+v %#v %s", s, s, s, s),
		fmt.Sprint(s.CA), fmt.Sprint(s.ServiceAccount),
	} {
		for _, key := range [][]byte{s.CA.KeyPEM, s.EtcdCA.KeyPEM, s.FrontProxyCA.KeyPEM, s.ServiceAccount.PrivatePEM} {
			if strings.Contains(out, pemBody(key)[:20]) {
				t.Fatalf("formatting leaks a private key: %s", out)
			}
		}
	}
	if !strings.Contains(fmt.Sprint(s.CA), "CN=kubernetes") {
		t.Fatalf("KeyPair formatting lost the subject: %v", s.CA)
	}
}

func pemBody(p []byte) string {
	lines := strings.Split(string(p), "\n")
	return strings.Join(lines[1:len(lines)-2], "\n")
}

func caTemplate(notBefore, notAfter time.Time, isCA bool, usage x509.KeyUsage) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber:          big.NewInt(42),
		Subject:               pkix.Name{CommonName: "user-ca", Organization: []string{"Example"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              usage,
		BasicConstraintsValid: true,
		IsCA:                  isCA,
	}
}

var testRSAKey = func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
}()

// rsaCAPair self-signs tmpl with an RSA key, the shape of a typical
// user-supplied CA (PKCS#1 key).
func rsaCAPair(t *testing.T, tmpl *x509.Certificate) KeyPair {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &testRSAKey.PublicKey, testRSAKey)
	if err != nil {
		t.Fatal(err)
	}
	return KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(testRSAKey)}),
	}
}

func TestECDSAUserCAPKCS8(t *testing.T) {
	k, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	tmpl := caTemplate(now.Add(-time.Hour), now.AddDate(1, 0, 0), true, x509.KeyUsageCertSign)
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	p8, _ := x509.MarshalPKCS8PrivateKey(k)
	kp := KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}),
	}
	ca := mustCA(t, kp)
	admin, err := IssueAdmin(ca, now)
	if err != nil {
		t.Fatal(err)
	}
	opensslVerify(t, kp.CertPEM, admin.CertPEM, now)
}
