package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v2"
)

// Environment variables the API commands read.
const (
	envServer = "CAPN_SERVER"
	envToken  = "CAPN_TOKEN"
	envConfig = "CAPN_CONFIG"
)

// clientConfig is a client configuration file (YAML): the gateway's URL
// and the bearer token to send it. capn dev writes one to
// <data-dir>/client.yaml and, as the user's default, to
// ${XDG_CONFIG_HOME:-~/.config}/capn/config.yaml.
type clientConfig struct {
	Server string `yaml:"server"`
	Token  string `yaml:"token,omitempty"`
}

// readClientConfig reads and checks a client configuration file. Unknown
// keys are errors, so a typo does not silently send no token.
func readClientConfig(path string) (clientConfig, error) {
	var c clientConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return c, fmt.Errorf("client config %s: %w", path, err)
	}
	c.Server = strings.TrimSpace(c.Server)
	c.Token = strings.TrimSpace(c.Token)
	if c.Server != "" {
		if err := checkServerURL(c.Server); err != nil {
			return c, fmt.Errorf("client config %s: server: %w", path, err)
		}
	}
	return c, nil
}

// encode renders c as the file capn dev writes.
func (c clientConfig) encode(comment string) []byte {
	b, _ := yaml.Marshal(c) // two strings: cannot fail
	var out strings.Builder
	for line := range strings.SplitSeq(strings.TrimRight(comment, "\n"), "\n") {
		out.WriteString("# " + line + "\n")
	}
	out.Write(b)
	return []byte(out.String())
}

// checkServerURL accepts http(s)://host[:port][/path].
func checkServerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s)://host:port URL", s)
	}
	return nil
}

// defaultConfigPath is ${XDG_CONFIG_HOME:-$HOME/.config}/capn/config.yaml,
// or "" when neither variable is set (then there is no default config).
func defaultConfigPath(lookup func(string) (string, bool)) string {
	if dir, ok := lookup("XDG_CONFIG_HOME"); ok && filepath.IsAbs(dir) {
		return filepath.Join(dir, "capn", "config.yaml")
	}
	if home, ok := lookup("HOME"); ok && home != "" {
		return filepath.Join(home, ".config", "capn", "config.yaml")
	}
	return ""
}

// connection is where the API commands send requests, and where each
// setting came from (for error messages).
type connection struct {
	Server, ServerFrom string
	Token, TokenFrom   string
}

// errNoServer says no source named a gateway.
var errNoServer = errors.New("no gateway address")

// resolveConnection picks the server and the token, each from the first
// source that has it: the flags, then CAPN_SERVER / CAPN_TOKEN, then the
// file CAPN_CONFIG names, then the default client config. A file's token
// is only sent to that file's server: when a higher source chose another
// server, the file's token is skipped (so a dev token never leaks to
// another gateway).
func resolveConnection(flagServer, flagToken string, lookup func(string) (string, bool)) (connection, error) {
	type source struct {
		name          string
		server, token string
		file          bool
	}
	env := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	sources := []source{
		{name: "--server", server: strings.TrimSpace(flagServer)},
		{name: "--token", token: strings.TrimSpace(flagToken)},
		{name: envServer, server: env(envServer)},
		{name: envToken, token: env(envToken)},
	}
	if p := env(envConfig); p != "" {
		c, err := readClientConfig(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return connection{}, fmt.Errorf("%s=%s: no such file", envConfig, p)
			}
			return connection{}, fmt.Errorf("%s: %w", envConfig, err)
		}
		sources = append(sources, source{name: p + " (" + envConfig + ")", server: c.Server, token: c.Token, file: true})
	}
	if p := defaultConfigPath(lookup); p != "" {
		c, err := readClientConfig(p)
		switch {
		case err == nil:
			sources = append(sources, source{name: p, server: c.Server, token: c.Token, file: true})
		case !errors.Is(err, fs.ErrNotExist):
			return connection{}, err
		}
	}
	var conn connection
	for _, s := range sources {
		if conn.Server == "" && s.server != "" {
			if err := checkServerURL(s.server); err != nil {
				return connection{}, fmt.Errorf("%s: %w", s.name, err)
			}
			conn.Server, conn.ServerFrom = s.server, s.name
		}
	}
	if conn.Server == "" {
		hint := "start capn dev (it writes a default client config)"
		if p := defaultConfigPath(lookup); p != "" {
			hint = "start capn dev (it writes " + p + ")"
		}
		return connection{}, fmt.Errorf("%w: pass --server, set %s or %s, or %s", errNoServer, envServer, envConfig, hint)
	}
	same := func(a, b string) bool { return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/") }
	for _, s := range sources {
		if s.token == "" || (s.file && s.server != "" && !same(s.server, conn.Server)) {
			continue
		}
		conn.Token, conn.TokenFrom = s.token, s.name
		break
	}
	return conn, nil
}
