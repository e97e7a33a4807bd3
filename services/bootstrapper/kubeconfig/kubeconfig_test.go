package kubeconfig

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/services/bootstrapper/pki"
	"k8s.io/client-go/tools/clientcmd"
)

func testInput(t *testing.T, host string, port int32) Input {
	t.Helper()
	now := time.Now()
	set, _, err := pki.Ensure(pki.Set{}, pki.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCA(set.CA, now)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pki.IssueAdmin(ca, now)
	if err != nil {
		t.Fatal(err)
	}
	return Input{ClusterName: "prod-1", Host: host, Port: port, CACertPEM: set.CA.CertPEM, ClientCertPEM: admin.CertPEM, ClientKeyPEM: admin.KeyPEM}
}

func TestRenderParsesWithClientcmd(t *testing.T) {
	tests := []struct {
		name, host string
		port       int32
		wantServer string
	}{
		{"dns", "api.prod-1.example.com", 6443, "https://api.prod-1.example.com:6443"},
		{"ipv4", "10.0.0.10", 443, "https://10.0.0.10:443"},
		{"ipv6", "fd00::10", 6443, "https://[fd00::10]:6443"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := testInput(t, tt.host, tt.port)
			data, err := Render(in)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := clientcmd.Load(data)
			if err != nil {
				t.Fatalf("clientcmd.Load: %v\n%s", err, data)
			}
			ctx, ok := cfg.Contexts[cfg.CurrentContext]
			if !ok || cfg.CurrentContext != "prod-1-admin@prod-1" {
				t.Fatalf("current context %q not found", cfg.CurrentContext)
			}
			c, u := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
			if c == nil || u == nil {
				t.Fatalf("context points at missing cluster %q or user %q", ctx.Cluster, ctx.AuthInfo)
			}
			if c.Server != tt.wantServer {
				t.Errorf("server %q, want %q", c.Server, tt.wantServer)
			}
			if !bytes.Equal(c.CertificateAuthorityData, in.CACertPEM) || !bytes.Equal(u.ClientCertificateData, in.ClientCertPEM) || !bytes.Equal(u.ClientKeyData, in.ClientKeyPEM) {
				t.Error("certificate data did not round-trip")
			}
			// The client config builds (TLS material is usable).
			rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
			if err != nil {
				t.Fatalf("ClientConfig: %v", err)
			}
			if rc.Host != tt.wantServer {
				t.Errorf("rest config host %q", rc.Host)
			}
			again, _ := Render(in)
			if !bytes.Equal(data, again) {
				t.Error("two renders of the same input differ")
			}
		})
	}
}

func TestRenderErrors(t *testing.T) {
	good := testInput(t, "h", 6443)
	tests := []struct {
		name   string
		mutate func(*Input)
		want   []string
	}{
		{"no cluster", func(in *Input) { in.ClusterName = "" }, []string{"cluster name: empty"}},
		{"no host, bad port", func(in *Input) { in.Host = ""; in.Port = 70000 }, []string{"endpoint host: empty", "endpoint port 70000: want 1-65535"}},
		{"url as host", func(in *Input) { in.Host = "https://h" }, []string{`endpoint host "https://h"`}},
		{"no key", func(in *Input) { in.ClientKeyPEM = nil }, []string{"client key: empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := good
			tt.mutate(&in)
			_, err := Render(in)
			if err == nil {
				t.Fatal("Render succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
