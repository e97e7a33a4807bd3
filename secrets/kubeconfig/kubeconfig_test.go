package kubeconfig

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/secrets/pki"
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

func TestParseReadsWhatRenderWrites(t *testing.T) {
	in := testInput(t, "fd00::10", 6443)
	data, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Server != "https://[fd00::10]:6443" || !bytes.Equal(got.CACertPEM, in.CACertPEM) ||
		!bytes.Equal(got.ClientCertPEM, in.ClientCertPEM) || !bytes.Equal(got.ClientKeyPEM, in.ClientKeyPEM) {
		t.Fatalf("Parse(Render(in)) = server %q and PEMs that differ from the input", got.Server)
	}

	for _, tt := range []struct{ name, from, to, want string }{
		{"unknown context", "current-context: prod-1-admin@prod-1", "current-context: other", `current context "other" is not among its contexts`},
		{"no user", "- name: prod-1-admin\n  user:", "- name: someone-else\n  user:", `user "prod-1-admin": not in the kubeconfig`},
		{"no key", "client-key-data: ", "client-key-dat: ", "client key: empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bad := strings.Replace(string(data), tt.from, tt.to, 1)
			if bad == string(data) {
				t.Fatalf("%q is not in the kubeconfig", tt.from)
			}
			_, err := Parse([]byte(bad))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse error = %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Fatal("the error quotes the key")
			}
		})
	}
}
