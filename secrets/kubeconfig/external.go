package kubeconfig

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Ways an external kubeconfig authenticates (External.Auth).
const (
	AuthToken             = "token"
	AuthClientCertificate = "client-certificate"
)

// External is what capn uses of a kubeconfig a user registers for an
// external control plane: its current context's server, the CA that signs
// the server's certificate, and one credential — a bearer token, or a
// client certificate and key.
type External struct {
	Server        string
	CACertPEM     []byte
	Token         string
	ClientCertPEM []byte
	ClientKeyPEM  []byte
}

// Auth is AuthToken or AuthClientCertificate.
func (e External) Auth() string {
	if e.Token != "" {
		return AuthToken
	}
	return AuthClientCertificate
}

// Host and Port of Server (port 443 when the URL has none).
func (e External) HostPort() (string, int32, error) {
	u, err := url.Parse(e.Server)
	if err != nil {
		return "", 0, err
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return "", 0, fmt.Errorf("server %q: port %q: want 1-65535", e.Server, port)
	}
	return u.Hostname(), int32(p), nil
}

// The client-go clientcmd/api/v1 fields an external kubeconfig may use,
// the ones capn refuses included so that it can say why.
type extConfig struct {
	Clusters []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			CertificateAuthority     string `json:"certificate-authority"`
			CertificateAuthorityData []byte `json:"certificate-authority-data"`
			InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
			ProxyURL                 string `json:"proxy-url"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			Token                 string `json:"token"`
			TokenFile             string `json:"tokenFile"`
			ClientCertificate     string `json:"client-certificate"`
			ClientCertificateData []byte `json:"client-certificate-data"`
			ClientKey             string `json:"client-key"`
			ClientKeyData         []byte `json:"client-key-data"`
			Username              string `json:"username"`
			Exec                  any    `json:"exec"`
			AuthProvider          any    `json:"auth-provider"`
		} `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string   `json:"name"`
		Context kcontext `json:"context"`
	} `json:"contexts"`
	CurrentContext string `json:"current-context"`
}

// ParseExternal reads a kubeconfig a user registers for an external
// cluster and checks that capn can use it as it is, with nothing from the
// machine it was made on: its current context (or its only one) names a
// cluster with an https server and an embedded CA
// (certificate-authority-data), and a user with an embedded bearer token
// or client certificate and key. Files (certificate-authority, tokenFile,
// client-certificate), exec and auth-provider plugins, basic auth and
// insecure-skip-tls-verify are refused. Every error names the field and
// what is allowed, never a credential.
func ParseExternal(data []byte) (External, error) {
	var cfg extConfig
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return External{}, fmt.Errorf("not a kubeconfig (YAML or JSON with clusters, users and contexts): %w", err)
	}
	cur := cfg.CurrentContext
	if cur == "" {
		if len(cfg.Contexts) != 1 {
			return External{}, fmt.Errorf("current-context: empty, and the kubeconfig has %d contexts: set current-context to the one capn should use", len(cfg.Contexts))
		}
		cur = cfg.Contexts[0].Name
	}
	var ctx *kcontext
	for i := range cfg.Contexts {
		if cfg.Contexts[i].Name == cur {
			ctx = &cfg.Contexts[i].Context
		}
	}
	if ctx == nil {
		return External{}, fmt.Errorf("current-context: %q is not among the kubeconfig's contexts", cur)
	}
	var out External
	var errs []error
	found := false
	for _, c := range cfg.Clusters {
		if c.Name != ctx.Cluster {
			continue
		}
		found = true
		p := fmt.Sprintf("clusters[%s].cluster", c.Name)
		out.Server = c.Cluster.Server
		if err := checkServer(c.Cluster.Server); err != nil {
			errs = append(errs, fmt.Errorf("%s.server: %w", p, err))
		}
		if c.Cluster.InsecureSkipTLSVerify {
			errs = append(errs, fmt.Errorf("%s.insecure-skip-tls-verify: capn verifies the API server: remove it and embed the CA in certificate-authority-data", p))
		}
		if c.Cluster.ProxyURL != "" {
			errs = append(errs, fmt.Errorf("%s.proxy-url: not supported: capn reaches the server directly", p))
		}
		switch {
		case len(c.Cluster.CertificateAuthorityData) > 0:
			out.CACertPEM = c.Cluster.CertificateAuthorityData
			if err := checkCA(out.CACertPEM); err != nil {
				errs = append(errs, fmt.Errorf("%s.certificate-authority-data: %w", p, err))
			}
		case c.Cluster.CertificateAuthority != "":
			errs = append(errs, fmt.Errorf("%s.certificate-authority: a file (%s) capn cannot read: embed it in certificate-authority-data (kubectl config view --raw --minify --flatten)", p, c.Cluster.CertificateAuthority))
		default:
			errs = append(errs, fmt.Errorf("%s.certificate-authority-data: required: the CA that signs the API server's certificate (workers trust it too)", p))
		}
	}
	if !found {
		errs = append(errs, fmt.Errorf("contexts[%s].context.cluster: %q is not among the kubeconfig's clusters", cur, ctx.Cluster))
	}
	found = false
	for _, u := range cfg.Users {
		if u.Name != ctx.User {
			continue
		}
		found = true
		p := fmt.Sprintf("users[%s].user", u.Name)
		us := u.User
		switch {
		case us.Exec != nil:
			errs = append(errs, fmt.Errorf("%s.exec: credential plugins are not supported (capn runs no plugin): give a token (e.g. a service account's) or a client certificate and key", p))
		case us.AuthProvider != nil:
			errs = append(errs, fmt.Errorf("%s.auth-provider: not supported: give a token (e.g. a service account's) or a client certificate and key", p))
		case us.TokenFile != "":
			errs = append(errs, fmt.Errorf("%s.tokenFile: a file capn cannot read: put the token in token", p))
		case us.ClientCertificate != "" || us.ClientKey != "":
			errs = append(errs, fmt.Errorf("%s.client-certificate, client-key: files capn cannot read: embed them in client-certificate-data and client-key-data (kubectl config view --raw --minify --flatten)", p))
		case us.Token != "":
			out.Token = us.Token
			if strings.ContainsAny(us.Token, " \t\r\n") {
				errs = append(errs, fmt.Errorf("%s.token: contains white space", p))
			}
		case len(us.ClientCertificateData) > 0 || len(us.ClientKeyData) > 0:
			out.ClientCertPEM, out.ClientKeyPEM = us.ClientCertificateData, us.ClientKeyData
			switch {
			case len(us.ClientCertificateData) == 0:
				errs = append(errs, fmt.Errorf("%s.client-certificate-data: required with client-key-data", p))
			case len(us.ClientKeyData) == 0:
				errs = append(errs, fmt.Errorf("%s.client-key-data: required with client-certificate-data", p))
			default:
				if _, err := tls.X509KeyPair(us.ClientCertificateData, us.ClientKeyData); err != nil {
					errs = append(errs, fmt.Errorf("%s.client-certificate-data, client-key-data: not a PEM certificate and its key", p))
				}
			}
		case us.Username != "":
			errs = append(errs, fmt.Errorf("%s.username: basic authentication is not supported: give a token or a client certificate and key", p))
		default:
			errs = append(errs, fmt.Errorf("%s: no credentials: needs token, or client-certificate-data and client-key-data", p))
		}
	}
	if !found {
		errs = append(errs, fmt.Errorf("contexts[%s].context.user: %q is not among the kubeconfig's users", cur, ctx.User))
	}
	if err := errors.Join(errs...); err != nil {
		return External{}, err
	}
	return out, nil
}

func checkServer(s string) error {
	if s == "" {
		return errors.New("required: the API server's https URL")
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.User != nil || u.RawQuery != "" {
		return fmt.Errorf("%q: want https://HOST[:PORT]", s)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q: port %q: want 1-65535", s, p)
		}
	}
	return nil
}

// checkCA: at least one PEM certificate, each a CA's.
func checkCA(data []byte) error {
	n := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return fmt.Errorf("certificate %d: %v", n+1, err)
		}
		if !c.IsCA {
			return fmt.Errorf("certificate %d (%s) is not a CA", n+1, c.Subject)
		}
		n++
	}
	if n == 0 {
		return errors.New("no PEM certificate")
	}
	return nil
}
