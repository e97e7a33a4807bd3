package kube

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/capn-dev/capn/secrets/pki"
)

// Node client certificates, as the kubelet's TLS bootstrap asks for them.
const (
	NodeClientSigner = "kubernetes.io/kube-apiserver-client-kubelet"
	CSRCollection    = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
)

// NodeUser is the user a node's client certificate names.
func NodeUser(nodeName string) string { return "system:node:" + nodeName }

// nodeLeaf is what a node's client certificate must say.
func nodeLeaf(nodeName string) Leaf {
	return Leaf{Name: "kubelet", CA: "ca", CommonName: NodeUser(nodeName), Organization: []string{NodesGroup}, Usages: clientAuth, Kubeconfig: true}
}

// runWorker joins this machine as a worker, as a kubelet's TLS bootstrap
// does: with the bootstrap token it posts a CSR for system:node:<name>,
// which the controller-manager approves (kubeadm's nodeclient binding) and
// signs with the cluster CA; with that certificate it registers its Node
// and runs kwok for it. A restart keeps a certificate with more than
// RenewBefore left, and renews one that is running out with the
// certificate itself (kubeadm's selfnodeclient binding), so an expired
// bootstrap token does not matter then.
func (r *Runtime) runWorker(ctx context.Context) error {
	log := r.opts.Log
	if err := checkPresent(r.opts.BinDir, []string{"kwok"}); err != nil {
		return err
	}
	caPEM, err := os.ReadFile(filepath.Join(r.layout.PKIDir(), "ca.crt"))
	if err != nil {
		return fmt.Errorf("kube-local: the cluster CA certificate: %w", err)
	}
	if h, err := pki.CACertHash(caPEM); err != nil || (h != r.cfg.CACertHash && h != r.rotatedPin()) {
		return fmt.Errorf("kube-local: %s/ca.crt is not the CA %s pinned by the node config, nor one a CA rotation installed (%s, %v)", r.layout.PKIDir(), r.cfg.CACertHash, h, err)
	}
	if err := ensureBundle(r.layout); err != nil {
		return fmt.Errorf("kube-local trust bundle: %w", err)
	}
	if err := writeFile(r.layout.KwokConfig(), KwokStages, 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(r.opts.DataDir, "home"), 0o700); err != nil {
		return err
	}
	server := "https://" + r.cfg.Endpoint.String()
	defer r.sup.Stop()
	defer r.ready.Store(false)
	if !r.retry(ctx, "get this node's client certificate", func() error { return r.ensureNodeCredentials(ctx, server, caPEM) }) {
		return nil
	}
	log.Info().Dur("after", r.mark("credentials")).Str("user", NodeUser(r.cfg.NodeName)).Msg("node client certificate ready")
	client, stop, err := r.connect(ctx, r.layout.KubeconfigPath("kubelet"))
	if err != nil {
		return err
	}
	defer stop()
	r.mu.Lock()
	r.client = client // a CA rotation reloads its credentials (rotate.go)
	r.mu.Unlock()
	if !r.waitReady(ctx) {
		return nil
	}
	r.mark("apiserver-ready")
	if !r.retry(ctx, "register the Node", func() error {
		n := NodeFor(r.cfg, r.opts.Address, r.opts.ProviderID)
		n.Capacity = r.opts.Capacity
		return RegisterNode(ctx, client, n)
	}) {
		return nil
	}
	log.Info().Dur("after", r.mark("registered")).Str("node", r.cfg.NodeName).Msg("Node registered")
	if err := r.sup.Start(KwokProcess(r.cfg, r.opts, r.layout, r.layout.KubeconfigPath("kubelet"))); err != nil {
		return err
	}
	log.Info().Dur("after", r.mark("kwok-started")).Msg("kwok started in place of the kubelet")
	<-ctx.Done()
	return nil
}

// ensureNodeCredentials keeps a good <rootfs>/etc/kubernetes/kubelet.conf
// or writes a new one with a certificate from a CSR.
func (r *Runtime) ensureNodeCredentials(ctx context.Context, server string, caPEM []byte) error {
	path := r.layout.KubeconfigPath("kubelet")
	caCert, err := pki.ParseCertificate(caPEM)
	if err != nil {
		return err
	}
	ca := &pki.CA{Cert: caCert}
	leaf := nodeLeaf(r.cfg.NodeName)
	now := r.Now()
	trust, err := trustBundle(r.layout)
	if err != nil {
		return err
	}
	var c *Client
	if kc, err := readKubeconfig(path); err == nil && kc.server() == server && bytes.Equal(kc.caData(), trust) {
		why := Satisfies(kc.certData(), kc.keyData(), ca, leaf, now)
		if why == nil {
			return nil
		}
		// Still valid, only running out: renew with it.
		if cert, err := pki.ParseCertificate(kc.certData()); err == nil && now.Before(cert.NotAfter) && cert.CheckSignatureFrom(caCert) == nil {
			r.opts.Log.Info().Str("why", why.Error()).Msg("renewing the node client certificate with itself")
			if c, err = NewClient(kc); err != nil {
				return err
			}
		}
	}
	if c == nil {
		if c, err = NewTokenClient(server, trust, r.cfg.BootstrapToken); err != nil {
			return err
		}
	}
	defer c.Close()
	kp, err := RequestNodeCertificate(ctx, c, r.cfg.NodeName, time.Second)
	if err != nil {
		return err
	}
	if err := Satisfies(kp.CertPEM, kp.KeyPEM, ca, leaf, now); err != nil {
		return fmt.Errorf("the signed node certificate: %w", err)
	}
	data, err := RenderKubeconfig(r.cfg.Cluster, NodeUser(r.cfg.NodeName), server, trust, kp)
	if err != nil {
		return err
	}
	return writeFile(path, data, 0o600)
}

// CSR is a node's certificate signing request and its private key.
type CSR struct {
	Name   string
	KeyPEM []byte
	PEM    []byte
}

// NewNodeCSR makes a key and a CSR for system:node:<name> in
// system:nodes — what the controller-manager's csrapprover approves for a
// bootstrap token of kubeadm's group, and csrsigning signs with the
// cluster CA. The CSR's name is derived from its content.
func NewNodeCSR(nodeName string) (CSR, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return CSR{}, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: NodeUser(nodeName), Organization: []string{NodesGroup}},
	}, key)
	if err != nil {
		return CSR{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return CSR{}, err
	}
	sum := sha256.Sum256(der)
	return CSR{
		Name:   fmt.Sprintf("node-csr-%s-%x", nodeName, sum[:5]),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		PEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
	}, nil
}

// Object is the CertificateSigningRequest to create.
func (c CSR) Object() Object {
	return Object{Collection: CSRCollection, Name: c.Name, Body: map[string]any{
		"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
		"metadata": map[string]any{"name": c.Name},
		"spec": map[string]any{
			"request":    c.PEM, // []byte: base64 in JSON, as the API wants
			"signerName": NodeClientSigner,
			"usages":     []string{"digital signature", "client auth"},
		},
	}}
}

// ErrCSRRefused is a CSR that was denied or failed.
var ErrCSRRefused = errors.New("certificate signing request refused")

// RequestNodeCertificate posts a node CSR as c's user and waits, polling
// every poll, until it is signed (or denied, or ctx ends).
func RequestNodeCertificate(ctx context.Context, c *Client, nodeName string, poll time.Duration) (pki.KeyPair, error) {
	csr, err := NewNodeCSR(nodeName)
	if err != nil {
		return pki.KeyPair{}, err
	}
	o := csr.Object()
	if _, err := c.Create(ctx, o); err != nil {
		return pki.KeyPair{}, err
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		var cur struct {
			Status struct {
				Certificate []byte `json:"certificate"`
				Conditions  []struct {
					Type, Reason, Message string
				} `json:"conditions"`
			} `json:"status"`
		}
		if err := c.Get(ctx, o.Path(), &cur); err != nil {
			return pki.KeyPair{}, err
		}
		for _, cond := range cur.Status.Conditions {
			if cond.Type == "Denied" || cond.Type == "Failed" {
				return pki.KeyPair{}, fmt.Errorf("%w: %s %s: %s %s", ErrCSRRefused, csr.Name, cond.Type, cond.Reason, cond.Message)
			}
		}
		if len(cur.Status.Certificate) > 0 {
			return pki.KeyPair{CertPEM: cur.Status.Certificate, KeyPEM: csr.KeyPEM}, nil
		}
		select {
		case <-ctx.Done():
			return pki.KeyPair{}, ctx.Err()
		case <-t.C:
		}
	}
}
