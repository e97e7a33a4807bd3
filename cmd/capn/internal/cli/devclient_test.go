package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn/internal/clientconfig"
	"github.com/capn-dev/capn/events/natstest"
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
	fi, err := os.Stat(filepath.Join(dir, adminTokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin.token: %v, mode %v", err, fi.Mode())
	}
	again, err := devAdminToken(dir)
	if err != nil || again != tok {
		t.Errorf("second start: %q, %v; want the same token", again, err)
	}
	if err := os.WriteFile(filepath.Join(dir, adminTokenFile), []byte("two tokens\n"), 0o600); err != nil {
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
				writeConfig(t, def, tt.existing)
			}
			vars := map[string]string{"XDG_CONFIG_HOME": xdg}
			if tt.noHome {
				vars = nil
			}
			cfg := defaultDevConfig()
			cfg.WriteClientConfig = !tt.noWrite
			e, _, _ := testEnv(vars)
			notes, err := writeClientConfigs(cfg, dataDir, server, token, e.lookup)
			if err != nil {
				t.Fatal(err)
			}
			own := filepath.Join(dataDir, clientConfigFile)
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

// TestDevGatewayAndClientConfig: capn dev serves the gateway with the
// admin token it prints, keeps the token across restarts and writes the
// client configs.
func TestDevGatewayAndClientConfig(t *testing.T) {
	dataDir, xdg := t.TempDir(), t.TempDir()
	vars := map[string]string{"XDG_CONFIG_HOME": xdg}
	first := startDevWith(t, dataDir, vars)
	for _, want := range []string{"  client    " + filepath.Join(dataDir, clientConfigFile), filepath.Join(xdg, "capn", "config.yaml") + " (the default, written)"} {
		if !strings.Contains(first.out.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, first.out)
		}
	}
	natstest.WaitFor(t, 10*time.Second, "the gateway answers", func() bool {
		code, _ := get(t, first.gatewayURL+"/healthz")
		return code == 200
	})
	e, stdout, stderr := testEnv(map[string]string{"XDG_CONFIG_HOME": xdg})
	if code := run(t.Context(), e, []string{"get", "clusters"}); code != 0 {
		t.Fatalf("capn get clusters with the default config: exit %d\n%s", code, stderr)
	}
	if stdout.String() != "" || !strings.Contains(stderr.String(), "No resources found.") {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}
	if code := first.stop(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	second := startDevWith(t, dataDir, vars)
	if second.token != first.token {
		t.Errorf("the admin token changed across a restart: %s → %s", first.token, second.token)
	}
	if !strings.Contains(second.out.String(), "(the default, updated with this token)") && !strings.Contains(second.out.String(), "left as it is: it points at") {
		t.Errorf("second banner:\n%s", second.out)
	}
}
