package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
)

// syncBuffer is a writer that commands and tests may use at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func testEnv(vars map[string]string) (env, *syncBuffer, *syncBuffer) {
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	return env{stdout: stdout, stderr: stderr, lookup: func(k string) (string, bool) { v, ok := vars[k]; return v, ok }}, stdout, stderr
}

func TestRunDispatches(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{name: "no command", wantCode: 2, wantStderr: "usage: capn <command>"},
		{name: "help", args: []string{"help"}, wantCode: 0, wantStdout: "  dev         run NATS with JetStream"},
		{name: "--help", args: []string{"--help"}, wantCode: 0, wantStdout: "  version     print capn's version"},
		{name: "help of a command", args: []string{"help", "dev"}, wantCode: 0, wantStdout: "usage: capn dev [flags]"},
		{name: "help of an unknown command", args: []string{"help", "nope"}, wantCode: 2, wantStderr: `capn help: unknown command "nope"`},
		{name: "unknown command", args: []string{"nope"}, wantCode: 2, wantStderr: `capn: unknown command "nope"`},
		{name: "version", args: []string{"version"}, wantCode: 0, wantStdout: "capn "},
		{name: "dev with a bad flag", args: []string{"dev", "--bogus"}, wantCode: 2, wantStderr: "flag provided but not defined: -bogus"},
		{name: "dev with an argument", args: []string{"dev", "now"}, wantCode: 2, wantStderr: `unexpected argument "now"`},
		{name: "dev reports every bad setting", args: []string{"dev", "--log-level", "loud", "--nats-listen", "4222"}, wantCode: 2,
			wantStderr: "capn dev: invalid configuration:\n" +
				`  - --log-level (CAPN_LOG_LEVEL) "loud": must be one of trace|debug|info|warn|error` + "\n" +
				`  - --nats-listen (CAPN_NATS_LISTEN) "4222": must be host:port (port 0..65535) or "none"`},
		{name: "dev with unknown or repeated providers", args: []string{"dev", "--providers", "sim,aws,sim"}, wantCode: 2,
			wantStderr: "capn dev: invalid configuration:\n" +
				`  - --providers (CAPN_PROVIDERS) "sim,aws,sim": unknown provider "aws": want some of sim, process, docker` + "\n" +
				`  - --providers (CAPN_PROVIDERS) "sim,aws,sim": provider "sim" is named twice`},
		{name: "dev with a kube-bin that is no directory", args: []string{"dev", "--kube-bin", "/nonexistent/kube/bin"}, wantCode: 2,
			wantStderr: "capn dev: invalid configuration:\n" +
				`  - --kube-bin (CAPN_KUBE_BIN) "/nonexistent/kube/bin": must be the directory of the Kubernetes binaries`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, stdout, stderr := testEnv(nil)
			if code := run(context.Background(), e, tt.args); code != tt.wantCode {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, stdout, stderr)
			}
			if !strings.Contains(stdout.String(), tt.wantStdout) {
				t.Errorf("stdout lacks %q:\n%s", tt.wantStdout, stdout)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.wantStderr, stderr)
			}
		})
	}
}
