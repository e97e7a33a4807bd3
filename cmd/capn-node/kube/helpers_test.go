package kube_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/cmd/capn-node/agent"
	"github.com/capn-dev/capn/cmd/capn-node/kube"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// machine is what a test renders: the real kube-local renderer's output
// for one machine, applied by the agent's own Parse and Apply into a data
// dir, and the node config read back from it.
type machine struct {
	Name    string
	Role    bootstrap.Role
	First   bool
	Version string
	Host    string
	Port    int
	Labels  map[string]string
	Taints  []*capnv1.Taint
	Network *capnv1.NetworkSpec
	// Token defaults to bootstraptest.Token.
	Token token.Token
}

func (m machine) render(t testing.TB, set pki.Set) (*kubelocal.NodeConfig, string) {
	t.Helper()
	if m.Name == "" {
		m.Name = "kl-cp-0"
	}
	if m.Role == "" {
		m.Role, m.First = bootstrap.RoleControlPlane, true
	}
	if m.Version == "" {
		m.Version = "v1.37.2"
	}
	if m.Host == "" {
		m.Host = "127.0.0.1"
	}
	if m.Port == 0 {
		m.Port = 6443
	}
	if m.Token.IsZero() {
		m.Token = bootstraptest.Token
	}
	in, err := bootstrap.NewInput(&capnv1.GenerateBootstrap{
		Cluster: "kl", Machine: m.Name, Role: string(m.Role), FirstControlPlane: m.First, Version: m.Version,
		Bootstrap: &capnv1.BootstrapSpec{Provider: kubelocal.Name},
		Labels:    m.Labels, Taints: m.Taints,
	}, bootstrap.Cluster{
		Endpoint: bootstrap.Endpoint{Host: m.Host, Port: int32(m.Port)},
		Network:  m.Network,
		PKI:      set,
	}, m.Token)
	if err != nil {
		t.Fatal(err)
	}
	out, err := kubelocal.New().Render(in)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := agent.Parse(string(out.Format), out.Data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.VerifyJoin(plan, in.CACertHash); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := agent.Apply(dir, plan, out.Checksum()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, agent.RootFS, kubelocal.ConfigPath))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := kubelocal.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, dir
}

// freePorts returns n distinct ports free on 127.0.0.1 right now.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		_, p, _ := net.SplitHostPort(ln.Addr().String())
		port, _ := strconv.Atoi(p)
		ports = append(ports, port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// runMachine runs the node side of cfg with o (its log to the test's)
// until stop, or the end of the test; stop waits for Run to return. When
// the test failed, the tails of the machine's component logs are logged.
func runMachine(t *testing.T, cfg *kubelocal.NodeConfig, o kube.Options) (rt *kube.Runtime, stop func()) {
	t.Helper()
	o.Log = zerolog.New(zerolog.NewTestWriter(t)).With().Str("machine", cfg.NodeName).Timestamp().Logger()
	rt, err := kube.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s: Run: %v", cfg.NodeName, err)
				}
			case <-time.After(60 * time.Second):
				t.Errorf("%s: Run did not return within 60s of its context ending", cfg.NodeName)
			}
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			for _, st := range rt.Supervisor().Status() {
				b, _ := os.ReadFile(rt.Supervisor().LogPath(st.Name))
				if len(b) > 6000 {
					b = b[len(b)-6000:]
				}
				t.Logf("--- tail of %s's %s.log ---\n%s", cfg.NodeName, st.Name, b)
			}
		}
	})
	return rt, stop
}
