package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeConfig(t *testing.T, path, body string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestResolveConnection(t *testing.T) {
	dir := t.TempDir()
	xdg := filepath.Join(dir, "xdg")
	def := writeConfig(t, filepath.Join(xdg, "capn", "config.yaml"), "server: http://default:8080\ntoken: t-default\n")
	named := writeConfig(t, filepath.Join(dir, "named.yaml"), "server: http://named:8080\ntoken: t-named\n")
	tokenOnly := writeConfig(t, filepath.Join(dir, "token-only.yaml"), "token: t-token-only\n")
	home := filepath.Join(dir, "home")
	homeDef := writeConfig(t, filepath.Join(home, ".config", "capn", "config.yaml"), "server: http://home:8080\ntoken: t-home\n")

	tests := []struct {
		name                   string
		flagServer, flagToken  string
		vars                   map[string]string
		wantServer, wantFrom   string
		wantToken, wantTokFrom string
	}{
		{name: "the default config", vars: map[string]string{"XDG_CONFIG_HOME": xdg},
			wantServer: "http://default:8080", wantFrom: def, wantToken: "t-default", wantTokFrom: def},
		{name: "HOME/.config without XDG_CONFIG_HOME", vars: map[string]string{"HOME": home},
			wantServer: "http://home:8080", wantFrom: homeDef, wantToken: "t-home", wantTokFrom: homeDef},
		{name: "CAPN_CONFIG before the default", vars: map[string]string{"XDG_CONFIG_HOME": xdg, "CAPN_CONFIG": named},
			wantServer: "http://named:8080", wantFrom: named + " (CAPN_CONFIG)", wantToken: "t-named", wantTokFrom: named + " (CAPN_CONFIG)"},
		{name: "variables before the files", vars: map[string]string{"XDG_CONFIG_HOME": xdg, "CAPN_CONFIG": named, "CAPN_SERVER": "http://env:1", "CAPN_TOKEN": "t-env"},
			wantServer: "http://env:1", wantFrom: "CAPN_SERVER", wantToken: "t-env", wantTokFrom: "CAPN_TOKEN"},
		{name: "flags before everything", flagServer: "https://flag:2", flagToken: "t-flag",
			vars:       map[string]string{"XDG_CONFIG_HOME": xdg, "CAPN_CONFIG": named, "CAPN_SERVER": "http://env:1", "CAPN_TOKEN": "t-env"},
			wantServer: "https://flag:2", wantFrom: "--server", wantToken: "t-flag", wantTokFrom: "--token"},
		{name: "each setting from its own first source", flagServer: "http://named:8080/",
			vars:       map[string]string{"XDG_CONFIG_HOME": xdg, "CAPN_CONFIG": named},
			wantServer: "http://named:8080/", wantFrom: "--server", wantToken: "t-named", wantTokFrom: named + " (CAPN_CONFIG)"},
		{name: "a file's token is not sent to another server", flagServer: "http://elsewhere:9",
			vars:       map[string]string{"XDG_CONFIG_HOME": xdg},
			wantServer: "http://elsewhere:9", wantFrom: "--server"},
		{name: "the next file's token when the first names another server", vars: map[string]string{"CAPN_SERVER": "http://default:8080", "CAPN_CONFIG": named, "XDG_CONFIG_HOME": xdg},
			wantServer: "http://default:8080", wantFrom: "CAPN_SERVER", wantToken: "t-default", wantTokFrom: def},
		{name: "a file without a server lends its token to any", vars: map[string]string{"CAPN_SERVER": "http://env:1", "CAPN_CONFIG": tokenOnly},
			wantServer: "http://env:1", wantFrom: "CAPN_SERVER", wantToken: "t-token-only", wantTokFrom: tokenOnly + " (CAPN_CONFIG)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _, _ := testEnv(tt.vars)
			got, err := resolveConnection(tt.flagServer, tt.flagToken, e.lookup)
			if err != nil {
				t.Fatal(err)
			}
			want := connection{Server: tt.wantServer, ServerFrom: tt.wantFrom, Token: tt.wantToken, TokenFrom: tt.wantTokFrom}
			if got != want {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestResolveConnectionErrors(t *testing.T) {
	dir := t.TempDir()
	typo := writeConfig(t, filepath.Join(dir, "typo.yaml"), "server: http://a:1\ntokne: x\n")
	badURL := writeConfig(t, filepath.Join(dir, "bad-url.yaml"), "server: 127.0.0.1:8080\n")
	tests := []struct {
		name      string
		flag      string
		vars      map[string]string
		want      string
		noServer  bool
		usageExit bool
	}{
		{name: "nothing anywhere", vars: map[string]string{"HOME": filepath.Join(dir, "empty")}, noServer: true,
			want: "no gateway address: pass --server, set CAPN_SERVER or CAPN_CONFIG, or start capn dev (it writes " + filepath.Join(dir, "empty", ".config", "capn", "config.yaml") + ")"},
		{name: "CAPN_CONFIG names no file", vars: map[string]string{"CAPN_CONFIG": filepath.Join(dir, "nope.yaml")},
			want: "CAPN_CONFIG=" + filepath.Join(dir, "nope.yaml") + ": no such file"},
		{name: "an unknown key", vars: map[string]string{"CAPN_CONFIG": typo}, want: "field tokne not found"},
		{name: "a server that is not a URL", vars: map[string]string{"CAPN_CONFIG": badURL}, want: `server: "127.0.0.1:8080" is not an http(s)://host:port URL`},
		{name: "a bad --server", flag: "localhost", want: `--server: "localhost" is not an http(s)://host:port URL`},
		{name: "a broken default config", vars: map[string]string{"XDG_CONFIG_HOME": dir, "CAPN_SERVER": "http://x:1"},
			want: "client config " + writeConfig(t, filepath.Join(dir, "capn", "config.yaml"), "server: [") + ":"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _, _ := testEnv(tt.vars)
			_, err := resolveConnection(tt.flag, "", e.lookup)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			if errors.Is(err, errNoServer) != tt.noServer {
				t.Errorf("errors.Is(err, errNoServer) = %v", !tt.noServer)
			}
		})
	}
}
