package agent_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/capn-dev/capn/cmd/capn-node/agent"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubeadm"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/script"
)

// render makes real bootstrap data with the shipped providers.
func render(t *testing.T, p bootstrap.Provider, m bootstraptest.Machine, spec *capnv1.BootstrapSpec) (bootstrap.Input, bootstrap.Output) {
	t.Helper()
	in := bootstraptest.NewInput(t, m, spec, nil, nil)
	out, err := p.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	return in, out
}

func TestParseAndVerifyTheShippedProviders(t *testing.T) {
	userScript := "#!/bin/bash\necho hello\n"
	userCloud := "#cloud-config\nruncmd:\n- echo hi\n"
	tests := []struct {
		name      string
		provider  bootstrap.Provider
		spec      *capnv1.BootstrapSpec
		machine   bootstraptest.Machine
		wantFiles []string
		wantCmd   string
	}{
		{"kubeadm init", kubeadm.New(), nil, bootstraptest.Init, []string{"/etc/kubernetes/pki/ca.crt", "/etc/kubernetes/pki/ca.key", agent.KubeadmInitConfig}, "kubeadm init"},
		{"kubeadm control-plane join", kubeadm.New(), nil, bootstraptest.JoinControl, []string{"/etc/kubernetes/pki/ca.crt", agent.KubeadmJoinConfig}, "kubeadm join"},
		{"kubeadm worker join", kubeadm.New(), bootstraptest.FullSpec("kubeadm"), bootstraptest.JoinWorker, []string{agent.KubeadmJoinConfig, "/opt/tricky.yaml"}, "kubeadm join"},
		{"script wrapper", script.New(), &capnv1.BootstrapSpec{Provider: "script", UserData: userScript}, bootstraptest.JoinWorker, []string{agent.JoinEnv, "/run/capn/ca.crt", "/run/capn/user-data"}, "exec '/run/capn/user-data'"},
		{"script cloud-config", script.New(), &capnv1.BootstrapSpec{Provider: "script", UserData: userCloud}, bootstraptest.JoinControl, []string{agent.JoinEnv, "/run/capn/ca.crt", "/etc/kubernetes/pki/ca.key"}, "echo hi"},
		{"kube-local init", kubelocal.New(), &capnv1.BootstrapSpec{Provider: "kube-local"}, bootstraptest.Init, []string{agent.KubeLocalConfig, "/etc/kubernetes/pki/ca.key", "/etc/kubernetes/pki/sa.key"}, ""},
		{"kube-local worker", kubelocal.New(), &capnv1.BootstrapSpec{Provider: "kube-local"}, bootstraptest.JoinWorker, []string{agent.KubeLocalConfig, "/etc/kubernetes/pki/ca.crt"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, out := render(t, tt.provider, tt.machine, tt.spec)
			plan, err := agent.Parse(string(out.Format), out.Data)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range tt.wantFiles {
				if _, ok := plan.File(f); !ok {
					t.Errorf("no file %s in %d files", f, len(plan.Files))
				}
			}
			if !strings.Contains(strings.Join(plan.Commands, "\n"), tt.wantCmd) {
				t.Errorf("commands %q do not hold %q", plan.Commands, tt.wantCmd)
			}
			got, err := agent.VerifyJoin(plan, in.CACertHash)
			if err != nil || got != in.CACertHash {
				t.Fatalf("VerifyJoin = %q, %v; want %s", got, err, in.CACertHash)
			}
			if _, err := agent.VerifyJoin(plan, "sha256:"+strings.Repeat("0", 64)); !errors.Is(err, agent.ErrJoinMaterial) {
				t.Fatalf("another pin: err = %v, want ErrJoinMaterial", err)
			}
		})
	}
}

func TestFileContentAndModesSurviveParsing(t *testing.T) {
	spec := bootstraptest.FullSpec("kubeadm")
	for _, p := range []struct {
		name string
		spec *capnv1.BootstrapSpec
		prov bootstrap.Provider
	}{
		{"cloud-config", spec, kubeadm.New()},
		{"script", &capnv1.BootstrapSpec{Provider: "script", UserData: "#!/bin/sh\n", Files: spec.Files}, script.New()},
	} {
		t.Run(p.name, func(t *testing.T) {
			_, out := render(t, p.prov, bootstraptest.JoinWorker, p.spec)
			plan, err := agent.Parse(string(out.Format), out.Data)
			if err != nil {
				t.Fatal(err)
			}
			f, ok := plan.File("/opt/tricky.yaml")
			if !ok || !bytes.Equal(f.Content, []byte(spec.Files[1].Content)) || f.Mode != 0o600 {
				t.Fatalf("tricky file = %q mode %v", f.Content, f.Mode)
			}
		})
	}
}

func TestVerifyJoinRefusesInconsistentMaterial(t *testing.T) {
	in, out := render(t, kubeadm.New(), bootstraptest.JoinControl, nil)
	ca, _ := selfSignedCA(t)
	tests := []struct {
		name   string
		mutate func(p *agent.Plan)
		want   string
	}{
		{"CA certificate of another cluster", func(p *agent.Plan) {
			for i := range p.Files {
				if p.Files[i].Path == "/etc/kubernetes/pki/ca.crt" {
					p.Files[i].Content = ca
				}
			}
		}, "2 different CAs"},
		{"no join material", func(p *agent.Plan) { p.Files = nil }, "names no cluster CA"},
		{"join config without hashes", func(p *agent.Plan) {
			p.Files = []agent.File{{Path: agent.KubeadmJoinConfig, Content: []byte("kind: JoinConfiguration\n")}}
		}, "no discovery.bootstrapToken.caCertHashes"},
		{"kube-local config naming another CA", func(p *agent.Plan) {
			p.Files = append(p.Files, agent.File{Path: agent.KubeLocalConfig, Content: []byte(`{"caCertHash": "sha256:` + strings.Repeat("1", 64) + `"}`)})
		}, "2 different CAs"},
		{"kube-local config without a hash", func(p *agent.Plan) {
			p.Files = append(p.Files, agent.File{Path: agent.KubeLocalConfig, Content: []byte(`{}`)})
		}, "kube-local.json: no caCertHash"},
		{"CA file that is not a certificate", func(p *agent.Plan) {
			p.Files = append(p.Files, agent.File{Path: "/run/capn/ca.crt", Content: []byte("junk")})
		}, "not a PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := agent.Parse(string(out.Format), out.Data)
			if err != nil {
				t.Fatal(err)
			}
			tt.mutate(plan)
			_, err = agent.VerifyJoin(plan, in.CACertHash)
			if !errors.Is(err, agent.ErrJoinMaterial) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrJoinMaterial saying %q", err, tt.want)
			}
		})
	}
}

func TestParseRefusesMalformedData(t *testing.T) {
	tests := []struct {
		name, format, data, want string
	}{
		{"unknown format", "yaml", "{}", "unknown bootstrap format"},
		{"ignition", "ignition", `{"ignition":{"version":"3.4.0"}}`, "bootstrap format not run by capn-node: ignition is for machines that boot with Ignition"},
		{"no header", "cloud-config", "write_files: []\n", "not #cloud-config"},
		{"bad yaml", "cloud-config", "#cloud-config\nwrite_files: [\n", "cloud-config"},
		{"relative path", "cloud-config", "#cloud-config\nwrite_files:\n- path: etc/x\n  content: a\n", "clean absolute path"},
		{"escaping path", "cloud-config", "#cloud-config\nwrite_files:\n- path: /etc/../../x\n  content: a\n", "clean absolute path"},
		{"bad base64", "cloud-config", "#cloud-config\nwrite_files:\n- path: /x\n  encoding: b64\n  content: '@@'\n", "not base64"},
		{"gzip", "cloud-config", "#cloud-config\nwrite_files:\n- path: /x\n  encoding: gz+b64\n  content: a\n", "not supported"},
		{"bad mode", "cloud-config", "#cloud-config\nwrite_files:\n- path: /x\n  permissions: '0999'\n  content: a\n", "octal"},
		{"script without #!", "script", "echo hi\n", "no #! line"},
		{"unclosed here document", "script", "#!/bin/sh\nbase64 -d > '/x' <<'CAPN_EOF'\nYQ==\n", "not closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := agent.Parse(tt.format, []byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one saying %q", err, tt.want)
			}
		})
	}
}
