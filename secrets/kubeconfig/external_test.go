package kubeconfig

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/secrets/pki"
)

// TestParseExternal: a kubeconfig capn can use as it is parses (token or
// client certificate, Render's output among them); every other is
// refused with an error naming the field and what is allowed, and never
// quoting a credential.
func TestParseExternal(t *testing.T) {
	now := time.Now()
	caPair, err := pki.NewCA("external", now)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCA(caPair, now)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pki.IssueAdmin(ca, now)
	if err != nil {
		t.Fatal(err)
	}
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	caData := b64(caPair.CertPEM)
	const secretToken = "abcdef.0123456789abcdef"
	kc := func(cluster, user string) []byte {
		return []byte("apiVersion: v1\nkind: Config\ncurrent-context: ext\ncontexts:\n- name: ext\n  context: {cluster: c, user: u}\n" +
			"clusters:\n- name: c\n  cluster:\n" + cluster + "users:\n- name: u\n  user:\n" + user)
	}
	server := "    server: https://api.example.com:6443\n"
	caLine := "    certificate-authority-data: " + caData + "\n"
	tokenLine := "    token: " + secretToken + "\n"

	good, err := ParseExternal(kc(server+caLine, tokenLine))
	if err != nil {
		t.Fatal(err)
	}
	if good.Server != "https://api.example.com:6443" || good.Token != secretToken || string(good.CACertPEM) != string(caPair.CertPEM) || good.Auth() != AuthToken {
		t.Fatalf("token kubeconfig: %+v", good)
	}
	if h, p, err := good.HostPort(); h != "api.example.com" || p != 6443 || err != nil {
		t.Fatalf("HostPort: %s %d %v", h, p, err)
	}
	rendered, err := Render(Input{ClusterName: "w", Host: "10.0.0.1", Port: 443, CACertPEM: caPair.CertPEM, ClientCertPEM: admin.CertPEM, ClientKeyPEM: admin.KeyPEM})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ParseExternal(rendered)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Auth() != AuthClientCertificate || string(cert.ClientKeyPEM) != string(admin.KeyPEM) {
		t.Fatalf("rendered kubeconfig: auth %s", cert.Auth())
	}

	tests := []struct {
		name string
		data []byte
		want []string
	}{
		{"not YAML", []byte("clusters: [unclosed"), []string{"not a kubeconfig"}},
		{"two contexts, none current", []byte("contexts:\n- name: a\n- name: b\n"), []string{"current-context: empty, and the kubeconfig has 2 contexts"}},
		{"current context missing", []byte("current-context: x\ncontexts:\n- name: a\n"), []string{`current-context: "x" is not among`}},
		{"no server", kc(caLine, tokenLine), []string{"clusters[c].cluster.server: required"}},
		{"http server", kc("    server: http://api:6443\n"+caLine, tokenLine), []string{`clusters[c].cluster.server: "http://api:6443": want https://HOST[:PORT]`}},
		{"bad port", kc("    server: https://api:99999\n"+caLine, tokenLine), []string{`port "99999": want 1-65535`}},
		{"no CA", kc(server, tokenLine), []string{"clusters[c].cluster.certificate-authority-data: required"}},
		{"CA file", kc(server+"    certificate-authority: /etc/ca.crt\n", tokenLine), []string{"clusters[c].cluster.certificate-authority: a file (/etc/ca.crt) capn cannot read"}},
		{"CA not PEM", kc(server+"    certificate-authority-data: "+b64([]byte("nope"))+"\n", tokenLine), []string{"certificate-authority-data: no PEM certificate"}},
		{"CA a leaf", kc(server+"    certificate-authority-data: "+b64(admin.CertPEM)+"\n", tokenLine), []string{"certificate-authority-data: certificate 1", "is not a CA"}},
		{"insecure", kc(server+caLine+"    insecure-skip-tls-verify: true\n", tokenLine), []string{"clusters[c].cluster.insecure-skip-tls-verify: capn verifies the API server"}},
		{"no credentials", kc(server+caLine, "    {}\n"), []string{"users[u].user: no credentials: needs token, or client-certificate-data and client-key-data"}},
		{"exec plugin", kc(server+caLine, "    exec: {command: aws}\n"), []string{"users[u].user.exec: credential plugins are not supported"}},
		{"auth provider", kc(server+caLine, "    auth-provider: {name: gcp}\n"), []string{"users[u].user.auth-provider: not supported"}},
		{"token file", kc(server+caLine, "    tokenFile: /var/run/token\n"), []string{"users[u].user.tokenFile: a file capn cannot read"}},
		{"cert files", kc(server+caLine, "    client-certificate: a.crt\n    client-key: a.key\n"), []string{"users[u].user.client-certificate, client-key: files capn cannot read"}},
		{"cert without key", kc(server+caLine, "    client-certificate-data: "+b64(admin.CertPEM)+"\n"), []string{"users[u].user.client-key-data: required with client-certificate-data"}},
		{"key of another cert", kc(server+caLine, "    client-certificate-data: "+b64(admin.CertPEM)+"\n    client-key-data: "+b64(caPair.KeyPEM)+"\n"), []string{"not a PEM certificate and its key"}},
		{"basic auth", kc(server+caLine, "    username: admin\n    password: hunter2\n"), []string{"users[u].user.username: basic authentication is not supported"}},
		{"server and credentials missing", kc(caLine, "    {}\n"), []string{"clusters[c].cluster.server: required", "users[u].user: no credentials"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseExternal(tt.data)
			if err == nil {
				t.Fatal("parsed, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			for _, secret := range []string{secretToken, "hunter2", string(caPair.KeyPEM)} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error quotes a credential: %q", err)
				}
			}
		})
	}
}
