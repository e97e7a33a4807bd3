package cloudconfig_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capn-dev/capn/cmd/capn-node/cloudconfig"
	"github.com/capn-dev/capn/cmd/capn-node/runcmd"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubeadm"
)

// TestParsesCapnKubeadmData reads what capn's kubeadm provider renders for
// a first control plane: the PKI with kubeadm's modes, the user's files,
// the kubeadm config, and the commands in order, the kubeadm line as is.
func TestParsesCapnKubeadmData(t *testing.T) {
	spec := bootstraptest.FullSpec("kubeadm")
	in := bootstraptest.NewInput(t, bootstraptest.Init, spec, nil, nil)
	out, err := kubeadm.New().Render(in)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cloudconfig.Parse(out.Data)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]cloudconfig.WriteFile{}
	for _, f := range c.WriteFiles {
		files[f.Path] = f
	}
	if f := files["/etc/kubernetes/pki/ca.key"]; !bytes.Equal(f.Content, in.PKI.CAKey) || f.Permissions != 0o600 || f.Owner != "root:root" {
		t.Fatalf("ca.key: mode %s owner %q, content equal %v", f.Permissions, f.Owner, bytes.Equal(f.Content, in.PKI.CAKey))
	}
	if f := files["/etc/kubernetes/pki/ca.crt"]; !bytes.Equal(f.Content, in.PKI.CACert) || f.Permissions != 0o644 {
		t.Fatalf("ca.crt: mode %s", f.Permissions)
	}
	if f := files["/opt/tricky.yaml"]; string(f.Content) != spec.Files[1].Content || f.Permissions != 0o600 {
		t.Fatalf("user file: %q mode %s", f.Content, f.Permissions)
	}
	if f := files[bootstrap.KubeadmInitConfig]; !strings.Contains(string(f.Content), "kind: InitConfiguration") || f.Permissions != 0o600 {
		t.Fatalf("kubeadm config: mode %s\n%s", f.Permissions, f.Content)
	}
	want := []string{
		"timeout --kill-after=10s 300s /bin/sh -c 'sysctl --system'",
		`timeout --kill-after=10s 300s /bin/sh -c 'echo '\''pre: done'\'' > /tmp/pre'`,
		"kubeadm init --config /run/kubeadm/kubeadm.yaml && mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete",
		`timeout --kill-after=10s 300s /bin/sh -c 'echo "post" # comment'`,
		"timeout --kill-after=10s 300s /bin/sh -c 'touch /tmp/post'",
	}
	if strings.Join(c.RunCmd, "\n") != strings.Join(want, "\n") {
		t.Fatalf("runcmd:\n%s\nwant:\n%s", strings.Join(c.RunCmd, "\n"), strings.Join(want, "\n"))
	}
}

// TestRunWritesFilesThenRunsEveryCommand runs a document: files with
// their encodings, modes and owner, parents made; commands in order, a
// list's words reaching the shell as written, a failed command reported
// and the next one run (cloud-init's runcmd script has no -e).
func TestRunWritesFilesThenRunsEveryCommand(t *testing.T) {
	root := t.TempDir()
	out := filepath.Join(t.TempDir(), "out")
	doc := `#cloud-config
write_files:
- path: /etc/capn-test/plain.conf
  content: "a: 1\n"
- path: /etc/capn-test/deep/secret.key
  encoding: b64
  content: c2VjcmV0
  permissions: "0600"
  owner: root:root
- path: /usr/local/bin/tool
  encoding: base64
  content: IyEvYmluL3NoCg==
  permissions: "4755"
  owner: "0"
runcmd:
- echo one >> ` + out + `
- [sh, -c, "echo 'two words' \"$0\" >> ` + out + `", "it's"]
- exit 3
- echo four >> ` + out + `
`
	c, err := cloudconfig.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	r := cloudconfig.Runner{Root: root, Log: &log, Commands: runcmd.Runner{Dir: root}}
	rep, err := r.Run(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "1 of 4 runcmd entries failed: runcmd[2] `exit 3` exited with code 3") {
		t.Fatalf("error %v, want the failed entry named", err)
	}
	if len(rep.Files) != 3 || len(rep.Commands) != 4 {
		t.Fatalf("report: %d files, %d commands", len(rep.Files), len(rep.Commands))
	}
	for _, f := range []struct {
		path, content string
		mode          os.FileMode
	}{
		{"etc/capn-test/plain.conf", "a: 1\n", 0o644},
		{"etc/capn-test/deep/secret.key", "secret", 0o600},
		{"usr/local/bin/tool", "#!/bin/sh\n", 0o755 | os.ModeSetuid},
	} {
		st, err := os.Stat(filepath.Join(root, f.path))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(root, f.path))
		if string(b) != f.content || st.Mode() != f.mode {
			t.Errorf("%s: %q mode %s, want %q %s", f.path, b, st.Mode(), f.content, f.mode)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(root, "etc/capn-test/.*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	b, err := os.ReadFile(out)
	if err != nil || string(b) != "one\ntwo words it's\nfour\n" {
		t.Fatalf("commands wrote %q (%v)", b, err)
	}
	if !strings.Contains(log.String(), "cloud-config: wrote /etc/capn-test/deep/secret.key (-rw-------, 6 bytes)") {
		t.Fatalf("log:\n%s", log.String())
	}
}

// TestRunStopsBeforeCommandsWhenAFileFails: a file that cannot be written
// (its owner does not exist) stops the run before any command.
func TestRunStopsBeforeCommandsWhenAFileFails(t *testing.T) {
	root := t.TempDir()
	out := filepath.Join(t.TempDir(), "out")
	c, err := cloudconfig.Parse([]byte("#cloud-config\nwrite_files:\n- path: /x\n  content: y\n  owner: capn-no-such-user\nruncmd:\n- touch " + out + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := cloudconfig.Runner{Root: root}
	if _, err := r.Run(context.Background(), c); err == nil || !strings.Contains(err.Error(), `write_files[0] /x: owner "capn-no-such-user"`) {
		t.Fatalf("error %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("a command ran after a file failed: %v", err)
	}
}

func TestParseRefusesWhatItDoesNotRun(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"no header", "write_files: []\n", "the first line must be #cloud-config"},
		{"unknown key", "#cloud-config\npackages: [kubeadm]\n", `field packages not found`},
		{"unknown file field", "#cloud-config\nwrite_files:\n- path: /a\n  append: true\n", "field append not found"},
		{"relative path", "#cloud-config\nwrite_files:\n- path: etc/a\n", `write_files[0].path "etc/a": want a clean absolute file path`},
		{"unclean path", "#cloud-config\nwrite_files:\n- path: /etc/../a\n", `write_files[0].path "/etc/../a"`},
		{"encoding", "#cloud-config\nwrite_files:\n- path: /a\n  encoding: gzip\n", `write_files[0] (/a).encoding "gzip": want b64`},
		{"bad base64", "#cloud-config\nwrite_files:\n- path: /a\n  encoding: b64\n  content: '!!'\n", "write_files[0] (/a).content: not base64"},
		{"mode", "#cloud-config\nwrite_files:\n- path: /a\n  permissions: '0999'\n", `write_files[0] (/a).permissions "0999": want an octal mode`},
		{"runcmd map", "#cloud-config\nruncmd:\n- {a: b}\n", "runcmd[0]: a mapping, want a string or a list of words"},
		{"runcmd nested", "#cloud-config\nruncmd:\n- [a, [b]]\n", "runcmd[0][1]: a list, want a word"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cloudconfig.Parse([]byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one with %q", err, tt.want)
			}
		})
	}
}

func TestShellJoin(t *testing.T) {
	got := cloudconfig.ShellJoin([]string{"timeout", "--kill-after=10s", "300s", "/bin/sh", "-c", "echo 'x' && y", ""})
	if want := `timeout --kill-after=10s 300s /bin/sh -c 'echo '\''x'\'' && y' ''`; got != want {
		t.Fatalf("%s\nwant %s", got, want)
	}
}
