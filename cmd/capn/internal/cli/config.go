package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/capn-dev/capn/cmd/capn/internal/clientconfig"
)

// Environment variables the API commands read.
const (
	envServer = "CAPN_SERVER"
	envToken  = "CAPN_TOKEN"
	envConfig = "CAPN_CONFIG"
)

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
		c, err := clientconfig.Read(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return connection{}, fmt.Errorf("%s=%s: no such file", envConfig, p)
			}
			return connection{}, fmt.Errorf("%s: %w", envConfig, err)
		}
		sources = append(sources, source{name: p + " (" + envConfig + ")", server: c.Server, token: c.Token, file: true})
	}
	if p := clientconfig.DefaultPath(lookup); p != "" {
		c, err := clientconfig.Read(p)
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
			if err := clientconfig.CheckServerURL(s.server); err != nil {
				return connection{}, fmt.Errorf("%s: %w", s.name, err)
			}
			conn.Server, conn.ServerFrom = s.server, s.name
		}
	}
	if conn.Server == "" {
		hint := "start capn dev (it writes a default client config)"
		if p := clientconfig.DefaultPath(lookup); p != "" {
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
