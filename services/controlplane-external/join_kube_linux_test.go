//go:build linux

package controlplaneexternal

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/kubeapi/kubeapitest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/token"
)

// TestWorkerGetsANodeCertificateFromTheRecord: what a worker has — the
// record's endpoint and CA, and a bootstrap token whose Secret is
// registered in the external cluster (the bootstrapper's part) — is
// enough, once capn prepared the cluster, for the node client
// certificate a kubelet's TLS bootstrap (and capn-node's kube-local
// worker) asks for: the CSR is approved by the cluster's own csrapprover
// through capn's binding and signed by its csrsigning with the CA the
// record gives. Needs kube-controller-manager (skipped without it).
func TestWorkerGetsANodeCertificateFromTheRecord(t *testing.T) {
	kubeapitest.Require(t)
	if dir, why := kubeapitest.Newest("etcd", "kube-apiserver", "kube-controller-manager"); dir == "" {
		t.Skip(why)
	}
	caPair, _ := testCA(t, "kubernetes")
	sa, err := pki.NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	api := kubeapitest.Start(t, caPair, sa.PublicPEM, sa.PrivatePEM, "--enable-bootstrap-token-auth")
	dir := t.TempDir()
	for name, data := range map[string][]byte{"ca.crt": caPair.CertPEM, "ca.key": caPair.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	api.StartControllerManagerArgs(t, []string{"--cluster-signing-cert-file=" + filepath.Join(dir, "ca.crt"),
		"--cluster-signing-key-file=" + filepath.Join(dir, "ca.key")}, "csrapproving", "csrsigning")
	ctx := t.Context()
	admin := api.Admin
	applyFile(t, admin, "../../deploy/external/rbac.yaml")
	saToken := serviceAccountToken(t, admin, "kube-system", "capn-external")

	w := start(t)
	w.register("prod", tokenKubeconfig(api.URL, caPair.CertPEM, saToken))
	gen := w.apply("edge", "prod")
	w.command(keys.ControlPlaneEnsure, "edge", gen)
	rec := w.waitReady("edge", capnv1.ConditionTrue, ReasonAnswering)
	if j := conditions.Get(rec.GetConditions(), ConditionJoinPrepared); j.GetStatus() != capnv1.ConditionTrue.Wire() {
		t.Fatalf("JoinPrepared %v", j)
	}

	// The bootstrapper's part: the token's Secret in kube-system.
	tok, err := token.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Apply(ctx, kubeapi.Object{Collection: "/api/v1/namespaces/kube-system/secrets", Name: token.SecretName(tok), Body: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": token.SecretType,
		"metadata":   map[string]any{"name": token.SecretName(tok), "namespace": token.SecretNamespace},
		"stringData": token.SecretData(tok, time.Now().Add(time.Hour), "test: a joining worker"),
	}}); err != nil {
		t.Fatal(err)
	}

	// The worker's part, from the record alone.
	server := "https://" + net.JoinHostPort(rec.GetEndpoint().GetHost(), strconv.Itoa(int(rec.GetEndpoint().GetPort())))
	worker, err := kubeapi.NewTokenClient(server, []byte(rec.GetCaCertificatePem()), tok.Value())
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:w1", Organization: []string{nodesGroup}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	const csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
	// kube-apiserver's bootstrap-token authenticator reads Secrets from an
	// informer: a token registered a moment ago answers 401 until the
	// informer has it, and a kubelet retries. So does the worker here; a
	// token that never works fails the wait.
	var csrErr error
	testkit.WaitFor(t, 30*time.Second, "the worker's CSR accepted", func() bool {
		csrErr = worker.Do(ctx, http.MethodPost, csrs, "application/json", map[string]any{
			"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": map[string]any{"name": "node-csr-w1"},
			"spec": map[string]any{"request": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
				"signerName": "kubernetes.io/kube-apiserver-client-kubelet", "usages": []string{"digital signature", "client auth"}},
		}, nil)
		if csrErr != nil && !kubeapi.IsStatus(csrErr, http.StatusUnauthorized) {
			t.Fatalf("the worker's CSR: %v", csrErr)
		}
		return csrErr == nil
	})
	var csr struct {
		Status struct {
			Certificate []byte `json:"certificate"`
		} `json:"status"`
	}
	testkit.WaitFor(t, 60*time.Second, "the node CSR approved and signed", func() bool {
		return worker.Get(ctx, csrs+"/node-csr-w1", &csr) == nil && len(csr.Status.Certificate) > 0
	})
	cert, err := pki.ParseCertificate(csr.Status.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCertificate([]byte(rec.GetCaCertificatePem()))
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "system:node:w1" || cert.CheckSignatureFrom(ca) != nil {
		t.Fatalf("node certificate %s, signed by the record's CA: %v", cert.Subject, cert.CheckSignatureFrom(ca))
	}
}
