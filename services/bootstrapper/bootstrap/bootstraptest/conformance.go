package bootstraptest

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
)

// Features tells the suite how to drive a provider.
type Features struct {
	// Specs are the valid specs the provider is rendered with, by name;
	// every one is rendered for each machine kind. At least one.
	Specs map[string]*capnv1.BootstrapSpec
	// Check, if set, is called on every successful render for
	// provider-specific checks.
	Check func(t *testing.T, in bootstrap.Input, out bootstrap.Output)
}

// Run is the conformance suite. A provider passes when, for every spec and
// every machine kind (init, control-plane join, worker join):
//   - its name is valid and ValidateSpec accepts the spec;
//   - Render succeeds with a known Format whose data starts as that format
//     must (#cloud-config, #!), and every cloud-config passes
//     `cloud-init schema`;
//   - rendering the same Input again gives the same bytes;
//   - a worker's output holds no private key of the cluster, and a worker
//     Input that carries one is refused;
//   - an invalid Input is refused with an error that names the field and
//     leaks neither the token secret nor a key.
func Run(t *testing.T, p bootstrap.Provider, f Features) {
	if _, err := bootstrap.NewRegistry(p.Name(), p); err != nil {
		t.Fatalf("provider name: %v", err)
	}
	if len(f.Specs) == 0 {
		t.Fatal("Features.Specs is empty")
	}
	set := PKI(t)
	secrets := [][]byte{set.CA.KeyPEM, set.EtcdCA.KeyPEM, set.FrontProxyCA.KeyPEM, set.ServiceAccount.PrivatePEM}
	for specName, spec := range f.Specs {
		t.Run(specName, func(t *testing.T) {
			if err := p.ValidateSpec("spec.bootstrap", spec); err != nil {
				t.Fatalf("ValidateSpec rejects the suite's spec: %v", err)
			}
			for _, m := range []Machine{Init, JoinControl, JoinWorker} {
				t.Run(m.Name(), func(t *testing.T) {
					in := NewInput(t, m, spec, Labels, Taints)
					out, err := p.Render(in)
					if err != nil {
						t.Fatalf("Render: %v", err)
					}
					checkFormat(t, out)
					for range 3 {
						again, err := p.Render(NewInput(t, m, spec, copyLabels(Labels), Taints))
						if err != nil || !bytes.Equal(again.Data, out.Data) || again.Format != out.Format {
							t.Fatalf("Render is not deterministic (err %v)", err)
						}
					}
					if m.Role == bootstrap.RoleWorker {
						for _, s := range secrets {
							if containsSecret(out.Data, s) {
								t.Fatal("worker bootstrap data contains a cluster private key")
							}
						}
					}
					if f.Check != nil {
						f.Check(t, in, out)
					}
				})
			}
			t.Run("refuses worker with keys", func(t *testing.T) {
				in := NewInput(t, JoinWorker, spec, nil, nil)
				in.PKI.CAKey = set.CA.KeyPEM
				if _, err := p.Render(in); err == nil {
					t.Fatal("Render accepted a worker Input carrying the CA key")
				}
			})
			t.Run("refuses invalid input", func(t *testing.T) {
				in := NewInput(t, Init, spec, nil, nil)
				in.Machine = "Not_A_Node_Name"
				_, err := p.Render(in)
				if err == nil || !strings.Contains(err.Error(), "machine") {
					t.Fatalf("Render error = %v, want one naming the machine", err)
				}
				for _, s := range append(secrets, []byte(Token.Secret)) {
					if strings.Contains(err.Error(), string(s)) || strings.Contains(err.Error(), pemBody(s)) {
						t.Fatal("error leaks a secret")
					}
				}
			})
		})
	}
}

func checkFormat(t *testing.T, out bootstrap.Output) {
	t.Helper()
	switch out.Format {
	case bootstrap.FormatCloudConfig:
		if !bytes.HasPrefix(out.Data, []byte("#cloud-config\n")) {
			t.Fatalf("format cloud-config but data starts %q", head(out.Data))
		}
		CloudInitSchema(t, out.Data)
	case bootstrap.FormatScript:
		if !bytes.HasPrefix(out.Data, []byte("#!")) {
			t.Fatalf("format script but data starts %q", head(out.Data))
		}
	default:
		t.Fatalf("unknown format %q", out.Format)
	}
}

// containsSecret looks for a PEM as is, or base64-encoded whole (as a
// write_files entry or heredoc would carry it, line-wrapped or not).
func containsSecret(data, secret []byte) bool {
	flat := strings.NewReplacer("\n", "", " ", "").Replace(string(data))
	b64 := base64.StdEncoding.EncodeToString(secret)
	return bytes.Contains(data, secret) || strings.Contains(flat, b64[:64]) || strings.Contains(flat, pemBody(secret))
}

func pemBody(p []byte) string {
	s := string(p)
	if i := strings.Index(s, "-----\n"); i >= 0 {
		s = s[i+6:]
	}
	if i := strings.Index(s, "\n-----END"); i >= 0 {
		s = s[:i]
	}
	return strings.ReplaceAll(s, "\n", "")
}

func head(b []byte) []byte {
	if len(b) > 20 {
		return b[:20]
	}
	return b
}

func copyLabels(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
