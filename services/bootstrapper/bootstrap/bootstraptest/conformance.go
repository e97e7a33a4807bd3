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
	// Windows are the valid specs of Windows pools, by name, for a
	// provider that renders Windows machines (bootstrap.OSProvider): each
	// is rendered for a Windows worker. Empty: the provider must refuse
	// a Windows machine.
	Windows map[string]*capnv1.BootstrapSpec
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
//     leaks neither the token secret nor a key;
//   - Windows: every Features.Windows spec passes ValidateOS and renders
//     for a Windows worker as above (deterministic, known format, no
//     private key); a provider given no Windows specs refuses a Windows
//     worker. A Windows control plane never reaches a provider
//     (Input.Validate refuses it).
func Run(t *testing.T, p bootstrap.Provider, f Features) {
	if _, err := bootstrap.NewRegistry(p.Name(), p); err != nil {
		t.Fatalf("provider name: %v", err)
	}
	if len(f.Specs) == 0 {
		t.Fatal("Features.Specs is empty")
	}
	set := PKI(t)
	secrets := [][]byte{set.CA.KeyPEM, set.EtcdCA.KeyPEM, set.FrontProxyCA.KeyPEM, set.ServiceAccount.PrivatePEM}
	runWindows(t, p, f, secrets)
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

// runWindows is the Windows part of Run.
func runWindows(t *testing.T, p bootstrap.Provider, f Features, secrets [][]byte) {
	op, ok := p.(bootstrap.OSProvider)
	if len(f.Windows) == 0 {
		t.Run("refuses windows", func(t *testing.T) {
			for _, spec := range f.Specs {
				if _, err := p.Render(NewInput(t, WindowsWorker, spec, nil, nil)); err == nil || !strings.Contains(err.Error(), "windows") {
					t.Fatalf("Render of a windows worker: error %v, want one naming windows", err)
				}
				return
			}
		})
		return
	}
	if !ok {
		t.Fatal("Features.Windows is set but the provider does not implement bootstrap.OSProvider")
	}
	for name, spec := range f.Windows {
		t.Run("windows "+name, func(t *testing.T) {
			if err := op.ValidateOS("spec.workerPools[0].bootstrap", bootstrap.OSWindows, spec); err != nil {
				t.Fatalf("ValidateOS rejects the suite's spec: %v", err)
			}
			in := NewInput(t, WindowsWorker, spec, Labels, Taints)
			out, err := p.Render(in)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			checkFormat(t, out)
			again, err := p.Render(NewInput(t, WindowsWorker, spec, copyLabels(Labels), Taints))
			if err != nil || !bytes.Equal(again.Data, out.Data) {
				t.Fatalf("Render is not deterministic (err %v)", err)
			}
			for _, s := range secrets {
				if containsSecret(out.Data, s) {
					t.Fatal("windows worker bootstrap data contains a cluster private key")
				}
			}
			if f.Check != nil {
				f.Check(t, in, out)
			}
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
	case bootstrap.FormatIgnition:
		Ignition(t, out.Data)
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
