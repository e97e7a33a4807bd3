package script_test

import (
	"bytes"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/script"
	yaml "go.yaml.in/yaml/v2"
)

const (
	shellScript = "#!/bin/bash\nset -euo pipefail\nkubeadm join \"$CAPN_API_ENDPOINT\" --token \"$CAPN_JOIN_TOKEN\" --discovery-token-ca-cert-hash \"$CAPN_CA_CERT_HASH\"\n"
	pyScript    = "#!/usr/bin/env python3\nimport os\nprint(os.environ['CAPN_JOIN_TOKEN'])\n"
	userConfig  = `#cloud-config
# the user's own cloud-config
package_update: true
packages: [containerd]
write_files:
- path: /etc/motd
  content: "hello: world\n"
runcmd:
- [sh, -c, '. /run/capn/join.env && kubeadm join "$CAPN_API_ENDPOINT" --token "$CAPN_JOIN_TOKEN" --discovery-token-ca-cert-hash "$CAPN_CA_CERT_HASH"']
`
	minimalConfig = "#cloud-config\nruncmd:\n- echo hi\n"
)

func specs() map[string]*capnv1.BootstrapSpec {
	files := bootstraptest.FullSpec("").Files
	args := map[string]string{"max-pods": "110"}
	return map[string]*capnv1.BootstrapSpec{
		"shell":                   {Provider: script.Name, UserData: shellScript},
		"shell with files":        {Provider: script.Name, UserData: shellScript, Files: files, KubeletExtraArgs: args},
		"python":                  {Provider: script.Name, UserData: pyScript},
		"cloud-config":            {Provider: script.Name, UserData: userConfig},
		"cloud-config with files": {Provider: script.Name, UserData: userConfig, Files: files, KubeletExtraArgs: args},
		"minimal cloud-config":    {Provider: script.Name, UserData: minimalConfig},
	}
}

func TestConformance(t *testing.T) {
	bootstraptest.Run(t, script.New(), bootstraptest.Features{Specs: specs(), Check: checkOutput})
}

func checkOutput(t *testing.T, in bootstrap.Input, out bootstrap.Output) {
	var files map[string][]byte
	if out.Format == bootstrap.FormatScript {
		bootstraptest.RequireTool(t, "sh")
		p := filepath.Join(t.TempDir(), "user-data.sh")
		if err := os.WriteFile(p, out.Data, 0o600); err != nil {
			t.Fatal(err)
		}
		if o, err := exec.Command("sh", "-n", p).CombinedOutput(); err != nil {
			t.Fatalf("sh -n: %v\n%s", err, o)
		}
		files = heredocFiles(t, out.Data)
		if got := files[script.UserDataFile]; !bytes.Equal(got, []byte(in.Spec.GetUserData())) {
			t.Fatalf("user script not kept byte for byte:\n%s", got)
		}
		if !bytes.HasSuffix(out.Data, []byte("exec '/run/capn/user-data'\n")) {
			t.Fatal("wrapper does not end by exec'ing the user script")
		}
	} else {
		files = writeFiles(t, out.Data)
		var user, got map[string]any
		_ = yaml.Unmarshal([]byte(in.Spec.GetUserData()), &user)
		_ = yaml.Unmarshal(out.Data, &got)
		for k, v := range user {
			if k != "write_files" && !equalYAML(v, got[k]) {
				t.Errorf("user key %s changed: %v -> %v", k, v, got[k])
			}
		}
		if strings.Contains(in.Spec.GetUserData(), "/etc/motd") && string(files["/etc/motd"]) != "hello: world\n" {
			t.Error("user's own write_files entry lost")
		}
	}

	env := string(files[script.EnvFile])
	for _, want := range []string{
		"CAPN_JOIN_TOKEN='" + bootstraptest.Token.Value() + "'\n",
		"CAPN_API_ENDPOINT='api.prod-1.example.com:6443'\n",
		"CAPN_CA_CERT_HASH='" + in.CACertHash + "'\n",
		"CAPN_ROLE='" + string(in.Role) + "'\n",
		"CAPN_NODE_TAINTS='dedicated=web:NoSchedule,example.com/gpu:NoExecute'\n",
		"CAPN_NODE_LABELS='example.com/team=a,node.kubernetes.io/pool=md-0,tier=web'\n",
	} {
		if !strings.Contains(env, want) {
			t.Errorf("join.env lacks %q:\n%s", want, env)
		}
	}
	if !bytes.Equal(files[script.CACertFile], in.PKI.CACert) {
		t.Error("CA certificate not written to /run/capn/ca.crt")
	}
	_, hasKey := files["/etc/kubernetes/pki/ca.key"]
	if hasKey != (in.Role == bootstrap.RoleControlPlane) {
		t.Errorf("ca.key written %v for role %s", hasKey, in.Role)
	}
	for _, f := range in.Spec.GetFiles() {
		if string(files[f.GetPath()]) != f.GetContent() {
			t.Errorf("user file %s did not round-trip", f.GetPath())
		}
	}
}

var heredocRe = regexp.MustCompile(`(?m)^base64 -d > '([^']*)' <<'CAPN_EOF'\n((?:[A-Za-z0-9+/=]+\n)*)CAPN_EOF$`)

func heredocFiles(t *testing.T, data []byte) map[string][]byte {
	files := map[string][]byte{}
	for _, m := range heredocRe.FindAllSubmatch(data, -1) {
		b, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(string(m[2]), "\n", ""))
		if err != nil {
			t.Fatalf("%s: %v", m[1], err)
		}
		files[string(m[1])] = b
	}
	return files
}

func writeFiles(t *testing.T, data []byte) map[string][]byte {
	var cc struct {
		WriteFiles []struct{ Path, Encoding, Content string } `yaml:"write_files"`
	}
	if err := yaml.Unmarshal(data, &cc); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, f := range cc.WriteFiles {
		b := []byte(f.Content)
		if f.Encoding == "b64" {
			var err error
			if b, err = base64.StdEncoding.DecodeString(f.Content); err != nil {
				t.Fatal(err)
			}
		}
		files[f.Path] = b
	}
	return files
}

func equalYAML(a, b any) bool {
	x, _ := yaml.Marshal(a)
	y, _ := yaml.Marshal(b)
	return bytes.Equal(x, y)
}

func TestValidateSpec(t *testing.T) {
	tests := []struct {
		name string
		spec *capnv1.BootstrapSpec
		want []string
	}{
		{"ok script", &capnv1.BootstrapSpec{UserData: "#!/bin/sh\n"}, nil},
		{"ok cloud-config", &capnv1.BootstrapSpec{UserData: "#cloud-config\n"}, nil},
		{"missing", &capnv1.BootstrapSpec{}, []string{"spec.bootstrap.userData: required by the script provider"}},
		{"not a script", &capnv1.BootstrapSpec{UserData: "echo hi"}, []string{"must start with #! (a script) or #cloud-config"}},
		{"jinja", &capnv1.BootstrapSpec{UserData: "## template: jinja\n#cloud-config\n"}, []string{"must start with"}},
		{"cloud-configx", &capnv1.BootstrapSpec{UserData: "#cloud-configx\n"}, []string{"must start with"}},
		{"format matches", &capnv1.BootstrapSpec{UserData: "#!/bin/sh\n", Format: "script"}, nil},
		{"format does not match", &capnv1.BootstrapSpec{UserData: "#cloud-config\nruncmd: []\n", Format: "script"},
			[]string{`spec.bootstrap.format: "script" does not match userData, which starts with "#cloud-config"`}},
		{"ignition", &capnv1.BootstrapSpec{UserData: "#!/bin/sh\n", Format: "ignition"},
			[]string{`spec.bootstrap.format: "ignition": the script provider renders what its userData is`}},
		{"ignore preflight errors", &capnv1.BootstrapSpec{UserData: "#!/bin/sh\n", IgnorePreflightErrors: []string{"ImagePull"}},
			[]string{"spec.bootstrap.ignorePreflightErrors: the script provider runs userData as is; pass --ignore-preflight-errors to kubeadm in userData"}},
		{"commands", &capnv1.BootstrapSpec{UserData: "#!/bin/sh\n", PreCommands: []string{"a"}, PostCommands: []string{"b"}},
			[]string{"spec.bootstrap.preCommands: the script provider runs userData as is", "spec.bootstrap.postCommands:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := script.New().ValidateSpec("spec.bootstrap", tt.spec)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("ValidateSpec accepted it")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestRenderRefusesBadCloudConfig(t *testing.T) {
	tests := []struct{ name, userData, want string }{
		{"not a mapping", "#cloud-config\n- a\n- b\n", "bootstrap.userData: parse cloud-config"},
		{"write_files not a list", "#cloud-config\nwrite_files: nope\n", "write_files: a string, want a list"},
		{"writes capn's file", "#cloud-config\nwrite_files:\n- path: /run/capn/join.env\n  content: x\n", "/run/capn/join.env is written by capn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := bootstraptest.NewInput(t, bootstraptest.JoinWorker, &capnv1.BootstrapSpec{Provider: script.Name, UserData: tt.userData}, nil, nil)
			_, err := script.New().Render(in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Render error = %v, want containing %q", err, tt.want)
			}
		})
	}
}

func TestEnvQuoting(t *testing.T) {
	in := bootstraptest.NewInput(t, bootstraptest.JoinWorker, &capnv1.BootstrapSpec{
		Provider: script.Name, UserData: "#!/bin/sh\n",
		KubeletExtraArgs: map[string]string{"b-flag": "it's", "a-flag": "x y"},
	}, nil, nil)
	env := script.Env(in)
	bootstraptest.RequireTool(t, "sh")
	out, err := exec.Command("sh", "-c", env+`printf '%s|%s|%s' "$CAPN_KUBELET_EXTRA_ARGS" "$CAPN_NODE_LABELS" "$CAPN_ROLE"`).CombinedOutput()
	if err != nil {
		t.Fatalf("sh: %v\n%s", err, out)
	}
	if got, want := string(out), "--a-flag=x y --b-flag=it's||worker"; got != want {
		t.Fatalf("sourced env gives %q, want %q", got, want)
	}
}

// TestWrapperRuns executes the generated wrapper with every absolute path
// moved under a temporary root, chown stubbed, and checks the files it
// writes and the environment the user's script runs with.
func TestWrapperRuns(t *testing.T) {
	bootstraptest.RequireTool(t, "sh")
	bootstraptest.RequireTool(t, "base64")
	spec := &capnv1.BootstrapSpec{
		Provider: script.Name,
		UserData: "#!/bin/sh\nprintf '%s %s %s' \"$CAPN_JOIN_TOKEN\" \"$CAPN_PKI_DIR\" \"$0\" > \"$ROOT/ran\"\n",
		Files:    bootstraptest.FullSpec("").Files,
	}
	in := bootstraptest.NewInput(t, bootstraptest.JoinControl, spec, nil, nil)
	out, err := script.New().Render(in)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "chown"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// "$$" is a literal "$" in a regexp replacement.
	rerooted := regexp.MustCompile(`'(/[^']*)'`).ReplaceAll(out.Data, []byte(`"$${ROOT}"'${1}'`))
	// Never run anything that could write outside the temporary root.
	if n, m := bytes.Count(rerooted, []byte(`'/`)), bytes.Count(rerooted, []byte(`"${ROOT}"'/`)); n != m || n == 0 {
		t.Fatalf("rerooting missed a path (%d of %d rerooted):\n%s", m, n, rerooted)
	}
	cmd := exec.Command("sh", "-c", string(rerooted))
	cmd.Env = append(os.Environ(), "ROOT="+root, "PATH="+bin+":"+os.Getenv("PATH"))
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("wrapper failed: %v\n%s", err, o)
	}
	ran, err := os.ReadFile(filepath.Join(root, "ran"))
	if err != nil {
		t.Fatalf("user script did not run: %v", err)
	}
	if want := bootstraptest.Token.Value() + " /etc/kubernetes/pki " + filepath.Join(root, "run/capn/user-data"); string(ran) != want {
		t.Fatalf("user script saw %q, want %q", ran, want)
	}
	for path, want := range map[string][]byte{
		"/etc/kubernetes/pki/ca.key": in.PKI.CAKey,
		"/etc/kubernetes/pki/sa.pub": in.PKI.ServiceAccountPublic,
		"/run/capn/ca.crt":           in.PKI.CACert,
		"/opt/tricky.yaml":           []byte(spec.Files[1].Content),
	} {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: not written as given (%v)", path, err)
		}
	}
	for path, mode := range map[string]os.FileMode{
		"/etc/kubernetes/pki/ca.key": 0o600, "/etc/kubernetes/pki/ca.crt": 0o644,
		"/run/capn/join.env": 0o600, "/opt/tricky.yaml": 0o600, "/etc/sysctl.d/99-k8s.conf": 0o644,
		"/etc/kubernetes/pki/etcd": 0o755,
	} {
		fi, err := os.Stat(filepath.Join(root, path))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v (%v), want %v", path, fi.Mode().Perm(), err, mode)
		}
	}
}
