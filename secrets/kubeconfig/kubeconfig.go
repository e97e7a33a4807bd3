// Package kubeconfig renders a cluster's admin kubeconfig: one cluster (the
// control-plane endpoint and the cluster CA), one user (the admin client
// certificate and key) and one context, named as Cluster API names them
// (<cluster>, <cluster>-admin, <cluster>-admin@<cluster>). Output is the
// same bytes for the same inputs.
package kubeconfig

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Input is what goes into an admin kubeconfig.
type Input struct {
	// ClusterName names the cluster, user and context.
	ClusterName string
	// Host and Port are the control-plane endpoint the infrastructure
	// reports; Host may be a DNS name, an IPv4 or an IPv6 address.
	Host string
	Port int32
	// CACertPEM is the cluster CA certificate.
	CACertPEM []byte
	// ClientCertPEM and ClientKeyPEM are the admin client certificate and key.
	ClientCertPEM []byte
	ClientKeyPEM  []byte
}

// Server returns the API server URL https://host:port, with brackets around
// an IPv6 host.
func Server(host string, port int32) (string, error) {
	var errs []error
	if host == "" {
		errs = append(errs, errors.New("endpoint host: empty"))
	} else if strings.ContainsAny(host, "/?#@ []") {
		errs = append(errs, fmt.Errorf("endpoint host %q: want a DNS name or an IP address", host))
	}
	if port < 1 || port > 65535 {
		errs = append(errs, fmt.Errorf("endpoint port %d: want 1-65535", port))
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	return "https://" + net.JoinHostPort(host, strconv.Itoa(int(port))), nil
}

// Render returns the kubeconfig YAML. Every field is required; errors name
// the missing ones, never the key.
func Render(in Input) ([]byte, error) {
	var errs []error
	if in.ClusterName == "" {
		errs = append(errs, errors.New("cluster name: empty"))
	}
	server, err := Server(in.Host, in.Port)
	if err != nil {
		errs = append(errs, err)
	}
	for _, f := range []struct {
		name string
		v    []byte
	}{{"CA certificate", in.CACertPEM}, {"client certificate", in.ClientCertPEM}, {"client key", in.ClientKeyPEM}} {
		if len(f.v) == 0 {
			errs = append(errs, fmt.Errorf("%s: empty", f.name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("render kubeconfig: %w", err)
	}
	user := in.ClusterName + "-admin"
	context := user + "@" + in.ClusterName
	cfg := config{
		APIVersion:     "v1",
		Kind:           "Config",
		CurrentContext: context,
		Preferences:    struct{}{},
		Clusters: []namedCluster{{Name: in.ClusterName, Cluster: cluster{
			Server: server, CertificateAuthorityData: in.CACertPEM,
		}}},
		Users: []namedUser{{Name: user, User: authInfo{
			ClientCertificateData: in.ClientCertPEM, ClientKeyData: in.ClientKeyPEM,
		}}},
		Contexts: []namedContext{{Name: context, Context: kcontext{Cluster: in.ClusterName, User: user}}},
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("render kubeconfig: %w", err)
	}
	return out, nil
}

// The subset of client-go's clientcmd/api/v1 Config written here, with the
// same JSON names ([]byte fields encode as base64, as kubeconfig wants).
type config struct {
	APIVersion     string         `json:"apiVersion"`
	Kind           string         `json:"kind"`
	Clusters       []namedCluster `json:"clusters"`
	Contexts       []namedContext `json:"contexts"`
	CurrentContext string         `json:"current-context"`
	Preferences    struct{}       `json:"preferences"`
	Users          []namedUser    `json:"users"`
}

type namedCluster struct {
	Name    string  `json:"name"`
	Cluster cluster `json:"cluster"`
}

type cluster struct {
	Server                   string `json:"server"`
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
}

type namedUser struct {
	Name string   `json:"name"`
	User authInfo `json:"user"`
}

type authInfo struct {
	ClientCertificateData []byte `json:"client-certificate-data"`
	ClientKeyData         []byte `json:"client-key-data"`
}

type namedContext struct {
	Name    string   `json:"name"`
	Context kcontext `json:"context"`
}

type kcontext struct {
	Cluster string `json:"cluster"`
	User    string `json:"user"`
}

// Parsed is what a kubeconfig written by Render holds: where the API
// server is, the CA that signs its serving certificate, and the admin's
// client certificate and key.
type Parsed struct {
	Server        string
	CACertPEM     []byte
	ClientCertPEM []byte
	ClientKeyPEM  []byte
}

// Parse reads a kubeconfig written by Render: its current context's
// cluster and user, each with embedded data. Errors never quote the key.
func Parse(data []byte) (Parsed, error) {
	var cfg config
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return Parsed{}, fmt.Errorf("parse kubeconfig: %w", err)
	}
	var ctx *kcontext
	for i := range cfg.Contexts {
		if cfg.Contexts[i].Name == cfg.CurrentContext {
			ctx = &cfg.Contexts[i].Context
		}
	}
	if ctx == nil {
		return Parsed{}, fmt.Errorf("parse kubeconfig: current context %q is not among its contexts", cfg.CurrentContext)
	}
	var out Parsed
	var errs []error
	found := false
	for _, c := range cfg.Clusters {
		if c.Name == ctx.Cluster {
			out.Server, out.CACertPEM, found = c.Cluster.Server, c.Cluster.CertificateAuthorityData, true
		}
	}
	if !found {
		errs = append(errs, fmt.Errorf("cluster %q: not in the kubeconfig", ctx.Cluster))
	}
	found = false
	for _, u := range cfg.Users {
		if u.Name == ctx.User {
			out.ClientCertPEM, out.ClientKeyPEM, found = u.User.ClientCertificateData, u.User.ClientKeyData, true
		}
	}
	if !found {
		errs = append(errs, fmt.Errorf("user %q: not in the kubeconfig", ctx.User))
	}
	for _, f := range []struct {
		name string
		v    []byte
	}{{"server", []byte(out.Server)}, {"CA certificate", out.CACertPEM}, {"client certificate", out.ClientCertPEM}, {"client key", out.ClientKeyPEM}} {
		if found && len(f.v) == 0 {
			errs = append(errs, fmt.Errorf("%s: empty", f.name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Parsed{}, fmt.Errorf("parse kubeconfig: %w", err)
	}
	return out, nil
}
