package kubeadm_test

import (
	"bytes"
	"encoding/base64"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubeadm"
)

// checkIgnition reads an Ignition rendering back with Ignition's own
// parser and checks the files, the unit, and the script's commands as sh
// reads them.
func checkIgnition(t *testing.T, in bootstrap.Input, out bootstrap.Output) {
	if out.Format != bootstrap.FormatIgnition {
		t.Fatalf("format %s, want ignition", out.Format)
	}
	cfg := bootstraptest.Ignition(t, out.Data)
	if cfg.Ignition.Version != kubeadm.IgnitionVersion {
		t.Errorf("ignition.version %s", cfg.Ignition.Version)
	}
	files := map[string][]byte{}
	modes := map[string]int{}
	for _, f := range cfg.Storage.Files {
		src := *f.Contents.Source
		b64, ok := strings.CutPrefix(src, "data:;base64,")
		if !ok {
			t.Fatalf("%s: source %.30q, want a base64 data URL", f.Path, src)
		}
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		files[f.Path], modes[f.Path] = b, *f.Mode
		if f.Overwrite == nil || !*f.Overwrite {
			t.Errorf("%s: overwrite not set", f.Path)
		}
	}
	for _, name := range []string{"ca.crt", "ca.key", "sa.key"} {
		if _, ok := files["/etc/kubernetes/pki/"+name]; ok != (in.Role == bootstrap.RoleControlPlane) {
			t.Errorf("/etc/kubernetes/pki/%s written: %v for role %s", name, ok, in.Role)
		}
	}
	if in.Role == bootstrap.RoleControlPlane && modes["/etc/kubernetes/pki/ca.key"] != 0o600 {
		t.Errorf("ca.key mode %o, want 0600", modes["/etc/kubernetes/pki/ca.key"])
	}
	for _, f := range in.Spec.GetFiles() {
		if string(files[f.GetPath()]) != f.GetContent() {
			t.Errorf("user file %s: content did not round-trip", f.GetPath())
		}
	}
	configPath, verb := kubeadm.IgnitionJoinConfig, "join"
	if in.FirstControlPlane {
		configPath, verb = kubeadm.IgnitionInitConfig, "init"
	}
	if modes[configPath] != 0o600 {
		t.Errorf("%s mode %o, want 0600 (it holds the token)", configPath, modes[configPath])
	}
	checkKubeadmConfig(t, in, files[configPath])

	if len(cfg.Systemd.Units) != 1 || cfg.Systemd.Units[0].Name != kubeadm.IgnitionUnit || !*cfg.Systemd.Units[0].Enabled ||
		!strings.Contains(*cfg.Systemd.Units[0].Contents, "ExecStart="+kubeadm.IgnitionScript) {
		t.Fatalf("units %+v", cfg.Systemd.Units)
	}
	script := files[kubeadm.IgnitionScript]
	if modes[kubeadm.IgnitionScript] != 0o700 || !bytes.HasPrefix(script, []byte("#!/bin/sh\n")) || !bytes.Contains(script, []byte("\nset -eu\n")) {
		t.Fatalf("script (mode %o):\n%s", modes[kubeadm.IgnitionScript], script)
	}
	if out, err := exec.Command("sh", "-n", "-c", string(script)).CombinedOutput(); err != nil {
		t.Fatalf("sh -n refuses the script: %v\n%s\n%s", err, out, script)
	}
	// Each command line, as sh splits it, is bootstrap.TimeoutArgv of the
	// user's command: the command reaches its shell byte for byte.
	var got []string
	var join string
	for _, line := range strings.Split(string(script), "\n") {
		if strings.HasPrefix(line, "'timeout'") {
			words := shellWords(t, line)
			c, d, ok := bootstrap.ParseTimeoutArgv(words)
			if !ok || d != bootstrap.CommandTimeout(in.Spec) {
				t.Fatalf("command line %q reads as %q", line, words)
			}
			got = append(got, c)
		}
		if strings.HasPrefix(line, "kubeadm ") {
			join = line
			got = append(got, line)
		}
	}
	if want := "kubeadm " + verb + " --config " + configPath; join != want {
		t.Errorf("join line %q, want %q", join, want)
	}
	want := slices.Concat(in.Spec.GetPreCommands(), []string{join}, in.Spec.GetPostCommands())
	if !slices.Equal(got, want) {
		t.Errorf("commands\n%q\nwant\n%q", got, want)
	}
}

// shellWords is how sh splits line into words.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	out, err := exec.Command("sh", "-c", `printf '%s\0' `+line).Output()
	if err != nil {
		t.Fatalf("sh cannot read %q: %v", line, err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
}

// TestIgnitionRefusedForWindows: Windows machines take cloudbase-init's
// cloud-config.
func TestIgnitionRefusedForWindows(t *testing.T) {
	spec := bootstraptest.WindowsSpec("kubeadm")
	spec.Format = "ignition"
	err := kubeadm.New().ValidateOS("spec.workerPools[0].bootstrap", bootstrap.OSWindows, spec)
	if err == nil || !strings.Contains(err.Error(), `spec.workerPools[0].bootstrap.format: "ignition": windows machines take cloud-config`) {
		t.Fatalf("ValidateOS = %v", err)
	}
}
