package main

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUsageAndBadFlags(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "It does NOT run a"},
		{[]string{"help"}, 0, "commands:"},
		{[]string{"reboot"}, 2, `unknown command "reboot"`},
		{[]string{"agent", "-h"}, 0, "No kubelet runs"},
		{[]string{"agent", "--cluster=c1"}, 2, "--machine (CAPN_NODE_MACHINE)"},
		{[]string{"agent", "--cluster=c1", "--machine=m1", "--version=v1.33.4", "--data-dir=/d", "--bootstrap-checksum=sha256:00",
			"--nats-inbox-prefix=_INBOX_machine.c1.m1.>"}, 2, `--nats-inbox-prefix (CAPN_NATS_INBOX_PREFIX) "_INBOX_machine.c1.m1.>": must not contain a wildcard`},
		{[]string{"agent", "--cluster=c1", "--machine=m1", "--version=v1.33.4", "--data-dir=/d", "--bootstrap-checksum=sha256:00",
			"--nats-tls-ca=/nonexistent/ca.pem"}, 2, `--nats-tls-ca (CAPN_NATS_TLS_CA) "/nonexistent/ca.pem": must be a readable file`},
		{[]string{"endpoint"}, 2, "--cluster is required"},
		{[]string{"endpoint", "--cluster=c1", "--process-state-dir=rel", "--backend-port=0"}, 2,
			"--process-state-dir \"rel\": must be an absolute path\ncapn-node endpoint: --backend-port 0: must be a port"},
		{[]string{"endpoint", "-h"}, 0, "TCP load balancer"},
		{[]string{"version"}, 0, "capn-node"},
		{[]string{"image", "-h"}, 0, "OCI image layout archive"},
		{[]string{"cloud-config"}, 2, "--data <file> is required"},
		{[]string{"cloud-config", "--data=main.go"}, 2, "cloud-config: the first line must be #cloud-config"},
		{[]string{"cloud-config", "-h"}, 0, "write_files"},
		{[]string{"kubelet", "--kubelet=/nonexistent/kubelet"}, 2, `--kubelet "/nonexistent/kubelet" must be the kubelet binary`},
		{[]string{"kubelet", "-h"}, 0, "kubeadm's systemd unit"},
		{[]string{"image", "--ref=registry.k8s.io/etcd", "--file=usr/bin/etcd", "--file=x=/nonexistent/etcd", "--dir=tmp=9z"}, 2,
			"--out is required"},
		{[]string{"image", "--ref=registry.k8s.io/etcd", "--out=/tmp/x.tar", "--file=usr/bin/etcd", "--file=x=/nonexistent/etcd", "--dir=tmp=9z"}, 2,
			"--file \"usr/bin/etcd\": want <path in the image>=<source file>"},
		{[]string{"image", "--ref=registry.k8s.io/etcd", "--out=/tmp/x.tar", "--file=x=/nonexistent/etcd"}, 2,
			"--file \"x=/nonexistent/etcd\": the source must be a readable regular file"},
		{[]string{"image", "--ref=registry.k8s.io/etcd", "--out=/tmp/x.tar", "--dir=tmp=9z"}, 2, "--dir \"tmp=9z\": the mode must be octal"},
		{[]string{"image", "--ref=registry.k8s.io/etcd:1", "--out=/tmp/x.tar", "--file=etcd=main.go", "--link=bin/sh"}, 2, `--link "bin/sh": want <path in the image>=<target>`},
		{[]string{"image", "--ref=registry.k8s.io/etcd", "--out=/tmp/x.tar", "--dir=tmp", "--file=etcd=main.go"}, 2,
			`ref "registry.k8s.io/etcd": want <name>:<tag>`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			if code := run(context.Background(), tt.args, none, &stderr); code != tt.code || !strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("exit %d, output:\n%s\nwant exit %d with %q", code, stderr.String(), tt.code, tt.want)
			}
		})
	}
}

func TestAgentFlagsFromTheEnvironment(t *testing.T) {
	env := map[string]string{"CAPN_NODE_CLUSTER": "c1", "CAPN_NODE_MACHINE": "m1", "CAPN_NODE_VERSION": "v1.33.4",
		"CAPN_NODE_DATA_DIR": "relative", "CAPN_NODE_BOOTSTRAP_CHECKSUM": "sha256:00"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"agent"}, lookup, &stderr); code != 2 || !strings.Contains(stderr.String(), `--data-dir (CAPN_NODE_DATA_DIR) "relative"`) || strings.Contains(stderr.String(), "--machine") {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
}

func TestImageWritesArchive(t *testing.T) {
	out := filepath.Join(t.TempDir(), "etcd.tar")
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"image", "--ref=registry.k8s.io/etcd:3.7.0-0", "--out=" + out,
		"--file=usr/local/bin/etcd=main.go", "--link=bin/etcd=/usr/local/bin/etcd", "--dir=tmp=1777", "--entrypoint=/usr/local/bin/etcd", "--cmd=--help", "--env=PATH=/usr/local/bin"}, func(string) (string, bool) { return "", false }, &stderr)
	if code != 0 || !strings.Contains(stderr.String(), "registry.k8s.io/etcd:3.7.0-0 sha256:") {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := map[string]bool{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = true
	}
	if !names["index.json"] || !names["oci-layout"] || len(names) != 5 { // and the layer, config, manifest blobs
		t.Fatalf("archive holds %v", names)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
