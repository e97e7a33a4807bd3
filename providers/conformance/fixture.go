package conformance

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/replyseal"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// fixture stands in for the bootstrapper of the env's cluster: it answers
// capn.bootstrap.credential.<provider>.<cluster>.* with its credential and
// capn.bootstrap.fetch.<cluster>.* (with that credential only) with a
// small kubeadm-shaped cloud-config (a CA certificate and a
// JoinConfiguration pinning it), and publishes the CA pin in observed
// secrets.<cluster> as the bootstrapper does.
type fixture struct {
	data       []byte
	checksum   string
	credential string
	caHash     string
	fetches    atomic.Int32
}

// bootstrapFixture makes (once) the env's fixture, serving it when the
// provider's machines run a node agent.
func (e *Env) bootstrapFixture() *fixture {
	e.t.Helper()
	if e.fixture != nil {
		return e.fixture
	}
	f, err := newFixture(e.Cluster)
	if err != nil {
		e.t.Fatalf("bootstrap fixture: %v", err)
	}
	e.fixture = f
	if !e.s.f.NodeAgent {
		return f
	}
	nc, _ := e.Server.Connect(e.t)
	sub, err := nc.Subscribe(sdk.BootstrapFetchSubject(e.Cluster, "*"), f.answer)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	csub, err := nc.Subscribe(events.Subject(sdk.BootstrapCredentialRoot, e.Provider, e.Cluster, "*"), f.answerCredential)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = csub.Unsubscribe() })
	kv, err := e.JS.KeyValue(context.Background(), events.BucketObserved)
	if err != nil {
		e.t.Fatal(err)
	}
	statuses := store.NewBucket(kv, store.New[capnv1.ClusterSecretsStatus]())
	if _, err := statuses.Create(context.Background(), keys.Secrets(e.Cluster),
		&capnv1.ClusterSecretsStatus{Cluster: e.Cluster, PkiReady: true, CaCertHash: f.caHash}); err != nil {
		e.t.Fatal(err)
	}
	return f
}

func (f *fixture) answer(m *nats.Msg) {
	f.fetches.Add(1)
	reply := nats.NewMsg(m.Reply)
	switch {
	case m.Header.Get(sdk.HeaderBootstrapCredential) != f.credential:
		reply.Header.Set(sdk.HeaderServiceErrorCode, "403")
		reply.Header.Set(sdk.HeaderServiceError, "not the fixture's credential: the provider must hand its machine CreateMachine.bootstrap_credential")
	case m.Header.Get(sdk.HeaderBootstrapChecksum) != f.checksum:
		reply.Header.Set(sdk.HeaderServiceErrorCode, "409")
		reply.Header.Set(sdk.HeaderServiceError, "not the fixture's checksum")
	default:
		b, _ := proto.Marshal(&capnv1.BootstrapData{Format: "cloud-config", Data: f.data, Checksum: f.checksum})
		reply.Data, _ = replyseal.Seal(f.credential, m.Subject, b)
	}
	_ = m.RespondMsg(reply)
}

func (f *fixture) answerCredential(m *nats.Msg) {
	reply := nats.NewMsg(m.Reply)
	if m.Header.Get(sdk.HeaderBootstrapChecksum) != f.checksum {
		reply.Header.Set(sdk.HeaderServiceErrorCode, "409")
		reply.Header.Set(sdk.HeaderServiceError, "not the fixture's checksum")
	} else {
		reply.Data = []byte(f.credential)
	}
	_ = m.RespondMsg(reply)
}

func newFixture(cluster string) (*fixture, error) {
	certPEM, hash, err := fixtureCA(cluster)
	if err != nil {
		return nil, err
	}
	join := fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: 127.0.0.1:6443
    token: abcdef.0123456789abcdef
    caCertHashes:
    - %s
`, hash)
	b64 := base64.StdEncoding.EncodeToString
	data := []byte(fmt.Sprintf(`#cloud-config
write_files:
- path: /etc/kubernetes/pki/ca.crt
  permissions: "0644"
  encoding: b64
  content: %s
- path: /run/kubeadm/kubeadm-join-config.yaml
  permissions: "0600"
  encoding: b64
  content: %s
runcmd:
- kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml
`, b64(certPEM), b64([]byte(join))))
	cred := make([]byte, 32)
	if _, err := rand.Read(cred); err != nil {
		return nil, err
	}
	return &fixture{data: data, checksum: sdk.Checksum(data), caHash: hash, credential: hex.EncodeToString(cred)}, nil
}

// fixtureCA is a throwaway cluster CA certificate and its kubeadm pin.
func fixtureCA(cluster string) ([]byte, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "conformance-" + cluster},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, "", err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), "sha256:" + hex.EncodeToString(sum[:]), nil
}
