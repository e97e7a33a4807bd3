package dev

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capn-dev/capn/cmd/capn/internal/clientconfig"
)

func TestDevAdminToken(t *testing.T) {
	dir := t.TempDir()
	tok, err := devAdminToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 64 {
		t.Errorf("token %q: want 64 hex digits", tok)
	}
	fi, err := os.Stat(filepath.Join(dir, AdminTokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin.token: %v, mode %v", err, fi.Mode())
	}
	again, err := devAdminToken(dir)
	if err != nil || again != tok {
		t.Errorf("second start: %q, %v; want the same token", again, err)
	}
	if err := os.WriteFile(filepath.Join(dir, AdminTokenFile), []byte("two tokens\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := devAdminToken(dir); err == nil || !strings.Contains(err.Error(), "must hold one token; delete the file to get a new one") {
		t.Errorf("a broken admin.token: %v", err)
	}
}

func TestWriteClientConfigs(t *testing.T) {
	const server, token = "http://127.0.0.1:8080", "t-new"
	tests := []struct {
		name     string
		existing string // the default config before, "" for none
		noWrite  bool
		noHome   bool
		wantNote string
		wantDef  string // the default config after ("" when it must not exist)
	}{
		{name: "first start writes it", wantNote: "(the default, written)", wantDef: token},
		{name: "same server and token: left as it is", existing: "server: " + server + "\ntoken: " + token + "\n",
			wantNote: "(the default, already up to date)", wantDef: token},
		{name: "same server, new token (another data dir): updated", existing: "server: " + server + "\ntoken: t-old\n",
			wantNote: "(the default, updated with this token)", wantDef: token},
		{name: "another server: kept, and said so", existing: "server: https://prod.example.com\ntoken: t-prod\n",
			wantNote: "left as it is: it points at https://prod.example.com, not this gateway (export CAPN_CONFIG=", wantDef: "t-prod"},
		{name: "a file capn cannot read: kept", existing: "server: [\n",
			wantNote: "left as it is: client config", wantDef: "server: ["},
		{name: "--write-client-config=false", noWrite: true, wantNote: "default client config not written (--write-client-config=false)"},
		{name: "no HOME nor XDG_CONFIG_HOME", noHome: true, wantNote: "default client config not written: neither XDG_CONFIG_HOME nor HOME is set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dataDir, xdg := t.TempDir(), t.TempDir()
			def := filepath.Join(xdg, "capn", "config.yaml")
			if tt.existing != "" {
				if err := os.MkdirAll(filepath.Dir(def), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(def, []byte(tt.existing), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			vars := map[string]string{"XDG_CONFIG_HOME": xdg}
			if tt.noHome {
				vars = nil
			}
			cfg := DefaultConfig()
			cfg.WriteClientConfig = !tt.noWrite
			lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
			notes, err := writeClientConfigs(cfg, dataDir, server, token, lookup)
			if err != nil {
				t.Fatal(err)
			}
			own := filepath.Join(dataDir, ClientConfigFile)
			if got, err := clientconfig.Read(own); err != nil || got != (clientconfig.Config{Server: server, Token: token}) {
				t.Errorf("%s: %+v, %v", own, got, err)
			}
			if fi, _ := os.Stat(own); fi.Mode().Perm() != 0o600 {
				t.Errorf("%s has mode %v, want 0600 (it holds the token)", own, fi.Mode())
			}
			if len(notes) != 2 || notes[0] != own || !strings.Contains(notes[1], tt.wantNote) {
				t.Errorf("notes %q, want [%s, …%s…]", notes, own, tt.wantNote)
			}
			b, err := os.ReadFile(def)
			switch {
			case tt.wantDef == "" && err == nil:
				t.Errorf("%s was written:\n%s", def, b)
			case tt.wantDef != "" && !strings.Contains(string(b), tt.wantDef):
				t.Errorf("%s holds:\n%s\nwant %q in it", def, b, tt.wantDef)
			}
		})
	}
}
