package process

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/services/daemon"
)

// A rendered deployment's node user needs its TLS files and inbox prefix
// on capn-node's command line, after the identity head.
func TestNodeArgsCarryTheNodeUsersNATSSettings(t *testing.T) {
	p := &Provider{opts: Options{NodeBinary: "/bin/capn-node", NodeNATSURL: "tls://127.0.0.1:4222", NodeNATSNKey: "/u/nats.nk",
		NodeNATSTLSCA: "/u/ca.pem", NodeNATSTLSCert: "/u/nats.pem", NodeNATSTLSKey: "/u/nats-key.pem", NodeNATSInboxPrefix: "_INBOX_custom"}}
	rec := &machineRecord{Cluster: "c1", Machine: "m1", Version: "v1.33.4", Checksum: "sha256:00"}
	args := p.nodeArgs(rec, "")
	for _, want := range []string{"--nats-nkey=/u/nats.nk", "--nats-tls-ca=/u/ca.pem", "--nats-tls-cert=/u/nats.pem",
		"--nats-tls-key=/u/nats-key.pem", "--nats-inbox-prefix=_INBOX_custom"} {
		if !slices.Contains(args, want) {
			t.Errorf("capn-node args lack %s: %v", want, args)
		}
	}
	if !slices.Equal(args[:len(p.identity(rec))], p.identity(rec)) {
		t.Errorf("the identity head changed: %v", args)
	}
	p.opts = Options{NodeBinary: "/bin/capn-node"}
	for _, a := range p.nodeArgs(rec, "") {
		if a == "--nats-inbox-prefix=" || a == "--nats-tls-ca=" {
			t.Errorf("an empty setting became a flag: %v", a)
		}
	}
}

// With the binaries of its version the node gets what it needs to run
// Kubernetes: that one directory, its address and its provider id;
// without, nothing of it.
func TestNodeArgsCarryKubeBinAddressAndProviderID(t *testing.T) {
	rec := &machineRecord{Cluster: "c1", Machine: "m1", ProviderID: "process://c1/m1", Address: "127.0.0.7", Version: "v1.33.4", Checksum: "sha256:00"}
	p := &Provider{opts: Options{NodeBinary: "/bin/capn-node", KubeBin: "/opt/kube/v1.32/bin:/opt/kube/bin"}}
	args := p.nodeArgs(rec, "/opt/kube/bin")
	for _, want := range []string{"--kube-bin=/opt/kube/bin", "--address=127.0.0.7", "--provider-id=process://c1/m1"} {
		if !slices.Contains(args, want) {
			t.Errorf("capn-node args lack %s: %v", want, args)
		}
	}
	if !slices.Equal(args[:len(p.identity(rec))], p.identity(rec)) {
		t.Errorf("the identity head changed: %v", args)
	}
	for _, a := range p.nodeArgs(rec, "") {
		if strings.HasPrefix(a, "--kube-bin") || strings.HasPrefix(a, "--address") || strings.HasPrefix(a, "--provider-id") {
			t.Errorf("without --kube-bin the node got %s", a)
		}
	}
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--node-capacity") }) {
		t.Errorf("a record without capacity (written before it was kept) passes one: %v", args)
	}
	rec.Capacity = "cpu=2,memory=4Gi,pods=110"
	if args := p.nodeArgs(rec, "/opt/kube/bin"); !slices.Contains(args, "--node-capacity=cpu=2,memory=4Gi,pods=110") {
		t.Errorf("capn-node args lack the template's node capacity: %v", args)
	}
}

// real-kubernetes is announced only while --kube-bin holds an executable
// kube-apiserver.
func TestRealKubernetesCapabilityFollowsKubeBin(t *testing.T) {
	dir := t.TempDir()
	p := &Provider{opts: Options{KubeBin: dir}}
	has := func() bool { return slices.Contains(p.Capabilities(), sdk.CapabilityRealKubernetes) }
	if has() {
		t.Error("announced with an empty --kube-bin dir")
	}
	apiserver := filepath.Join(dir, "kube-apiserver")
	if err := os.WriteFile(apiserver, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if has() {
		t.Error("announced with a kube-apiserver that is not executable")
	}
	if err := os.Chmod(apiserver, 0o755); err != nil {
		t.Fatal(err)
	}
	if !has() {
		t.Errorf("not announced with %s: %v", apiserver, p.Capabilities())
	}
	p.opts.KubeBin = ""
	if has() {
		t.Error("announced without --kube-bin")
	}
	if !slices.Contains(p.Capabilities(), sdk.CapabilityStopStart) || !slices.Contains(p.Capabilities(), sdk.CapabilityReboot) {
		t.Errorf("capabilities %v lack stop-start or reboot", p.Capabilities())
	}
}

func TestKubeBinOption(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ dir, want string }{
		{"/nonexistent/kube", "--kube-bin (CAPN_KUBE_BIN) \"/nonexistent/kube\""},
		{file, "not a directory"},
		// Every directory of a list is checked, and named.
		{t.TempDir() + ":/nonexistent/v1.36", "--kube-bin (CAPN_KUBE_BIN) \"/nonexistent/v1.36\""},
	} {
		err := Options{StateDir: t.TempDir(), KubeBin: tt.dir}.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("--kube-bin %s: %v, want %q", tt.dir, err, tt.want)
		}
	}
	// A relative dir is made absolute: machines run in directories of their own.
	wd, _ := os.Getwd()
	if got := (Options{KubeBin: "bin"}).withDefaults().KubeBin; got != filepath.Join(wd, "bin") {
		t.Errorf("relative --kube-bin became %q", got)
	}
	if got, want := (Options{KubeBin: "v1/bin::/opt/v2/bin"}).withDefaults().KubeBin, filepath.Join(wd, "v1/bin")+":/opt/v2/bin"; got != want {
		t.Errorf("--kube-bin list became %q, want %q", got, want)
	}
	if i := slices.IndexFunc((&Options{}).Flags(), func(f daemon.Flag) bool { return f.Name == "kube-bin" }); i < 0 {
		t.Error("no --kube-bin flag")
	} else if env := (&Options{}).Flags()[i].Env; env != "CAPN_KUBE_BIN" {
		t.Errorf("--kube-bin reads %s, want CAPN_KUBE_BIN", env)
	}
}

// The refusal names the version, what is built and the make kube that
// builds it.
func TestMissingVersionError(t *testing.T) {
	for _, tt := range []struct {
		err  MissingVersionError
		want string
	}{
		{MissingVersionError{Version: "v1.35.0", Have: []string{"v1.36.5", "v1.37.2"}},
			`Kubernetes v1.35.0 binaries are not built here (have v1.36.5, v1.37.2): run make kube KUBE_VERSIONS="v1.35.0 v1.36.5 v1.37.2"`},
		{MissingVersionError{Version: "v1.37.2"}, `Kubernetes v1.37.2 binaries are not built here (have none): run make kube KUBE_VERSIONS="v1.37.2"`},
	} {
		if got := tt.err.Error(); !strings.HasPrefix(got, tt.want) {
			t.Errorf("got  %s\nwant %s…", got, tt.want)
		}
	}
}
