package main

import (
	"bytes"
	"context"
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
