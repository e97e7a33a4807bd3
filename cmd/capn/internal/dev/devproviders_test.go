package dev

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/services/daemon"
)

// --kube-bin reaches the process provider, which hands it to its machines.
func TestDevPassesKubeBinToTheProcessProvider(t *testing.T) {
	exe, err := os.Executable() // stands in for capn-node: only checked to be executable
	if err != nil {
		t.Fatal(err)
	}
	kubeBin := t.TempDir()
	for _, tt := range []struct{ kubeBin, want string }{{kubeBin, kubeBin}, {"", ""}} {
		cfg := DefaultConfig()
		cfg.Providers, cfg.ProcessNodeBinary, cfg.KubeBin = "process", exe, tt.kubeBin
		provs := devProviders(context.Background(), cfg, t.TempDir(), daemon.NATSConfig{URL: "nats://127.0.0.1:4222"})
		if len(provs) != 1 || provs[0].svc == nil {
			t.Fatalf("providers %+v: want process running", provs)
		}
		if got := provs[0].svc.(*process.Service).Process.KubeBin; got != tt.want {
			t.Errorf("--kube-bin %q: the process provider got %q", tt.kubeBin, got)
		}
	}
}

// TestDevOffParts: the banner names each optional part that is off and the
// one command that turns it on, and only those.
func TestDevOffParts(t *testing.T) {
	exe, err := os.Executable() // stands in for capn-node: only checked to be executable
	if err != nil {
		t.Fatal(err)
	}
	kubeFix := `make kube, then bin/capn dev --kube-bin "$(hack/kube.sh --print-path)"`
	tests := []struct {
		name      string
		providers string
		node      string
		kubeBin   string
		want      []offPart
		providing string
	}{
		{name: "sim only: hosted control planes are off", providers: "sim",
			want:      []offPart{{"hosted control planes", "no --kube-bin, so a cluster with controlPlane.type hosted waits (Ready False, BinariesMissing)", kubeFix}},
			providing: "sim"},
		{name: "sim only with --kube-bin: nothing is off", providers: "sim", kubeBin: t.TempDir(), want: nil, providing: "sim"},
		{name: "process without --kube-bin", providers: "sim,process", node: exe,
			want: []offPart{{"Kubernetes on process machines", "no --kube-bin, so their control planes are placeholders", kubeFix},
				{"hosted control planes", "no --kube-bin, so a cluster with controlPlane.type hosted waits (Ready False, BinariesMissing)", kubeFix}},
			providing: "sim, process"},
		{name: "process with --kube-bin", providers: "process", node: exe, kubeBin: t.TempDir(),
			providing: "process (Kubernetes from " + os.TempDir()},
		{name: "process without capn-node", providers: "process", node: filepath.Join(t.TempDir(), "capn-node"), kubeBin: t.TempDir(),
			want:      []offPart{{what: "process provider", fix: "make build (it puts capn-node beside capn), or --process-node-binary PATH"}},
			providing: "none running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Providers, cfg.ProcessNodeBinary, cfg.KubeBin = tt.providers, tt.node, tt.kubeBin
			provs := devProviders(context.Background(), cfg, t.TempDir(), daemon.NATSConfig{URL: "nats://127.0.0.1:4222"})
			got := offParts(cfg, provs)
			if len(got) != len(tt.want) {
				t.Fatalf("off parts %+v, want %+v", got, tt.want)
			}
			for i, w := range tt.want {
				if got[i].what != w.what || got[i].fix != w.fix || (w.why != "" && got[i].why != w.why) || got[i].why == "" {
					t.Errorf("off part %d = %+v, want %+v", i, got[i], w)
				}
			}
			if line := providersLine(provs, cfg.KubeBin); !strings.HasPrefix(line, tt.providing) {
				t.Errorf("providers line %q, want it to start with %q", line, tt.providing)
			}
		})
	}
}
