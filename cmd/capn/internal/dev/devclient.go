package dev

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/capn-dev/capn/cmd/capn/internal/clientconfig"
	"github.com/capn-dev/capn/gateway"
)

// Files capn dev keeps in its data directory for clients.
const (
	AdminTokenFile   = "admin.token"
	ClientConfigFile = "client.yaml"
)

// openDevGateway listens on cfg.GatewayAddr and loads (or makes) the admin
// token. Called with the data directory locked.
func openDevGateway(cfg Config, dataDir string) (devGateway, error) {
	token, err := devAdminToken(dataDir)
	if err != nil {
		return devGateway{}, err
	}
	ln, err := net.Listen("tcp", cfg.GatewayAddr)
	if err != nil {
		return devGateway{}, fmt.Errorf("gateway cannot listen on %s (change it with --gateway-addr or CAPN_GATEWAY_ADDR): %w", cfg.GatewayAddr, err)
	}
	return devGateway{ln: ln, token: token}, nil
}

// devAdminToken reads <data-dir>/admin.token, or generates it (mode 0600)
// on first start, so clients configured once keep working after a restart.
func devAdminToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, AdminTokenFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		tok := strings.TrimSpace(string(b))
		if tok == "" || strings.ContainsAny(tok, " \t\n") {
			return "", fmt.Errorf("admin token %s: must hold one token; delete the file to get a new one", path)
		}
		return tok, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("admin token: %w", err)
	}
	tok, err := gateway.GenerateToken()
	if err != nil {
		return "", err
	}
	if err := clientconfig.WriteAtomic(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	return tok, nil
}

// writeClientConfigs writes <data-dir>/client.yaml and, when enabled, the
// user's default client config, and returns what it did, one line each,
// for the banner. The default config is left alone when it points at
// another server: capn dev says so instead of silently taking it over.
func writeClientConfigs(cfg Config, dataDir, server, token string, lookup func(string) (string, bool)) ([]string, error) {
	c := clientconfig.Config{Server: server, Token: token}
	own := filepath.Join(dataDir, ClientConfigFile)
	body := c.Encode("capn client configuration, written by capn dev (data dir " + dataDir + ").\nUse it with CAPN_CONFIG=" + own + ".")
	if err := clientconfig.WriteAtomic(own, body, 0o600); err != nil {
		return nil, fmt.Errorf("client config: %w", err)
	}
	notes := []string{own}
	if !cfg.WriteClientConfig {
		return append(notes, "default client config not written (--write-client-config=false)"), nil
	}
	def := clientconfig.DefaultPath(lookup)
	if def == "" {
		return append(notes, "default client config not written: neither XDG_CONFIG_HOME nor HOME is set"), nil
	}
	old, readErr := clientconfig.Read(def)
	switch {
	case errors.Is(readErr, fs.ErrNotExist):
	case readErr != nil:
		return append(notes, fmt.Sprintf("%s left as it is: %v (export CAPN_CONFIG=%s)", def, readErr, own)), nil
	case old.Server != "" && old.Server != server:
		return append(notes, fmt.Sprintf("%s left as it is: it points at %s, not this gateway (export CAPN_CONFIG=%s, or delete it and restart)", def, old.Server, own)), nil
	case old == c:
		return append(notes, def+" (the default, already up to date)"), nil
	}
	if err := os.MkdirAll(filepath.Dir(def), 0o700); err != nil {
		return nil, fmt.Errorf("default client config: %w", err)
	}
	if err := clientconfig.WriteAtomic(def, body, 0o600); err != nil {
		return nil, fmt.Errorf("default client config: %w", err)
	}
	if readErr == nil {
		return append(notes, def+" (the default, updated with this token)"), nil
	}
	return append(notes, def+" (the default, written)"), nil
}
