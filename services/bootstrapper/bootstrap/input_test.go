package bootstrap_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/builtin"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestNewInputCutsPKIByRole(t *testing.T) {
	set := bootstraptest.PKI(t)
	hash, _ := pki.CACertHash(set.CA.CertPEM)
	tests := []struct {
		machine bootstraptest.Machine
		keys    bool
	}{{bootstraptest.Init, true}, {bootstraptest.JoinControl, true}, {bootstraptest.JoinWorker, false}}
	for _, tt := range tests {
		t.Run(tt.machine.Name(), func(t *testing.T) {
			in := bootstraptest.NewInput(t, tt.machine, nil, nil, nil)
			if in.PKI.HasPrivateKeys() != tt.keys {
				t.Fatalf("private keys given: %v, want %v", in.PKI.HasPrivateKeys(), tt.keys)
			}
			if !bytes.Equal(in.PKI.CACert, set.CA.CertPEM) || in.CACertHash != hash {
				t.Fatal("CA certificate or hash missing")
			}
			if !tt.keys && len(in.PKI.EtcdCACert)+len(in.PKI.FrontProxyCACert)+len(in.PKI.ServiceAccountPublic) > 0 {
				t.Fatal("worker given control-plane material")
			}
			if in.TokenTTL != token.DefaultTTL || in.Spec == nil {
				t.Fatalf("defaults: ttl %s, spec %v", in.TokenTTL, in.Spec)
			}
			if s := fmt.Sprintf("%v %+v", in, in.PKI); strings.Contains(s, "PRIVATE KEY") || strings.Contains(s, bootstraptest.Token.Secret) {
				t.Fatal("formatting an Input leaks a key or the token secret")
			}
		})
	}
}

func TestNewInputErrors(t *testing.T) {
	set := bootstraptest.PKI(t)
	_, err := bootstrap.NewInput(&capnv1.GenerateBootstrap{
		Machine: "m", Role: "master", Version: "1.33.0",
		Bootstrap: &capnv1.BootstrapSpec{TokenTtl: durationpb.New(time.Hour * 24 * 30)},
	}, bootstrap.Cluster{PKI: pki.Set{CA: set.CA}}, token.Token{})
	checkErrors(t, err, []string{
		"bootstrap.tokenTtl: token TTL 720h0m0s: want between",
		"cluster: empty",
		`role "master": want control-plane or worker`,
		"endpoint.host: empty; the infrastructure has not reported the control-plane endpoint",
		"endpoint.port 0: want 1-65535",
		"token: empty",
		"tokenTTL 0s: want a positive duration",
	})
	if err != nil && strings.Contains(err.Error(), "version") {
		t.Fatalf("version 1.33.0 should be accepted as v1.33.0: %v", err)
	}
}

func TestInputValidateControlPlaneNeedsPKI(t *testing.T) {
	in := bootstraptest.NewInput(t, bootstraptest.JoinControl, nil, nil, nil)
	in.PKI.EtcdCAKey = nil
	in.CACertHash = "sha256:abc"
	checkErrors(t, in.Validate(), []string{
		"pki.etcdCAKey: empty; control-plane machines need the shared cluster PKI",
		`caCertHash "sha256:abc": want sha256:<64 hex digits>`,
	})
}

func TestRegistryRender(t *testing.T) {
	in := bootstraptest.NewInput(t, bootstraptest.JoinWorker, nil, nil, nil)
	out, err := builtin.Registry().Render(in)
	if err != nil || out.Format != bootstrap.FormatCloudConfig {
		t.Fatalf("Render with the default provider: %v, %v", out.Format, err)
	}
	if !strings.HasPrefix(out.Checksum(), "sha256:") || len(out.Checksum()) != 71 {
		t.Fatalf("checksum %q", out.Checksum())
	}
	in.Spec = &capnv1.BootstrapSpec{Provider: "foo"}
	if _, err := builtin.Registry().Render(in); err == nil || !strings.Contains(err.Error(), `bootstrap.provider: unknown bootstrap provider "foo" (available: kube-local, kubeadm, script)`) {
		t.Fatalf("unknown provider: %v", err)
	}
	in.Spec = &capnv1.BootstrapSpec{Provider: "script"}
	if _, err := builtin.Registry().Render(in); err == nil || !strings.Contains(err.Error(), "bootstrap.userData: required by the script provider") {
		t.Fatalf("script without user data: %v", err)
	}
}

func TestNewInputStripsCAFromSpec(t *testing.T) {
	set := bootstraptest.PKI(t)
	spec := &capnv1.BootstrapSpec{Ca: &capnv1.CertificateAuthority{CertificatePem: string(set.CA.CertPEM), PrivateKeyPem: string(set.CA.KeyPEM)}}
	in := bootstraptest.NewInput(t, bootstraptest.JoinWorker, spec, nil, nil)
	if in.Spec.GetCa() != nil || spec.GetCa() == nil {
		t.Fatal("NewInput must drop the CA from the provider's spec without changing the command")
	}
	in.Spec = spec
	if err := in.Validate(); err == nil || !strings.Contains(err.Error(), "bootstrap.ca: must not reach a provider") {
		t.Fatalf("Validate with a CA in the spec: %v", err)
	}
	if s := fmt.Sprintf("%v|%+v|%#v|%s", in, in, in, in); strings.Contains(s, "PRIVATE KEY") || strings.Contains(s, bootstraptest.Token.Secret) {
		t.Fatalf("formatting an Input leaks secrets: %s", s)
	}
}

// A caller's CACertHash is asked for the pin of the certificate the
// machine trusts: the worker CA for a worker when there is one, the
// cluster CA otherwise.
func TestNewInputAsksTheCallersPin(t *testing.T) {
	set := bootstraptest.PKI(t)
	other, _, err := pki.Ensure(pki.Set{}, pki.Options{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		role     string
		workerCA []byte
		want     []byte
	}{
		{"worker", "worker", nil, set.CA.CertPEM},
		{"worker of a hosted control plane", "worker", other.CA.CertPEM, other.CA.CertPEM},
		{"control plane", "control-plane", other.CA.CertPEM, set.CA.CertPEM},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var asked []byte
			c := bootstrap.Cluster{Endpoint: bootstrap.Endpoint{Host: "h", Port: 6443}, PKI: set, WorkerCA: tt.workerCA,
				CACertHash: func(pem []byte) (string, error) { asked = pem; return "sha256:" + strings.Repeat("ab", 32), nil }}
			in, err := bootstrap.NewInput(&capnv1.GenerateBootstrap{Cluster: "c", Machine: "m", Role: tt.role, Version: "v1.34.2"}, c, bootstraptest.Token)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(asked, tt.want) || in.CACertHash != "sha256:"+strings.Repeat("ab", 32) {
				t.Fatalf("asked for the pin of the wrong certificate, or its answer not used (hash %s)", in.CACertHash)
			}
		})
	}
}
