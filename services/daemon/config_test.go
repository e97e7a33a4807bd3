package daemon

import (
	"errors"
	"flag"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{
		Name:      "Bad Name",
		HTTPAddr:  "localhost",
		LogLevel:  "loud",
		LogFormat: "xml",
		Replicas:  7,
		NATS: NATSConfig{
			URL:       "http://u:secret@example.com:4222",
			User:      "svc",
			CredsFile: filepath.Join(dir, "missing.creds"),
			TLSKey:    writeFile(t, dir, "client.key", "not a key"),
		},
	}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want every problem")
	}
	want := []string{
		`service name "Bad Name": must be lower-case letters, digits and dashes`,
		`--http-addr (CAPN_HTTP_ADDR) "localhost": must be host:port`,
		`--log-level (CAPN_LOG_LEVEL) "loud": must be one of trace|debug|info|warn|error`,
		`--log-format (CAPN_LOG_FORMAT) "xml": must be one of json|console|auto`,
		`--stream-replicas (CAPN_STREAM_REPLICAS) "7": must be 1..5`,
		`--nats-url (CAPN_NATS_URL) "http://u:xxxxx@example.com:4222": must be nats://host:port or tls://host:port`,
		`--nats-user (CAPN_NATS_USER) "svc": a user needs a password (--nats-password, CAPN_NATS_PASSWORD or --nats-password-file)`,
		`--nats-user (CAPN_NATS_USER) "svc": use one way to authenticate, not user/password and creds file`,
		`--nats-creds (CAPN_NATS_CREDS) "` + filepath.Join(dir, "missing.creds") + `": must be a readable file: open `,
		`--nats-tls-key (CAPN_NATS_TLS_KEY) "` + filepath.Join(dir, "client.key") + `": a TLS key needs its certificate (--nats-tls-cert or CAPN_NATS_TLS_CERT)`,
	}
	got := Problems(err)
	if len(got) != len(want) {
		t.Errorf("got %d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for _, w := range want {
		if !containsPrefix(got, w) {
			t.Errorf("missing problem %q in:\n%s", w, strings.Join(got, "\n"))
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("a password leaked into the error: %v", err)
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Errorf("errors.As(*FieldError) failed on %v", err)
	}
}

func containsPrefix(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	pki := newTestPKI(t)
	file := writeFile(t, dir, "user.creds", "creds")
	ok := func(c Config) Config { c.Name = "svc"; return c }
	tests := []struct {
		name string
		cfg  Config
		want []string // problem prefixes; none: valid
	}{
		{name: "defaults", cfg: ok(Config{})},
		{name: "all set", cfg: ok(Config{
			HTTPAddr: "127.0.0.1:0", LogLevel: "debug", LogFormat: "json", Replicas: 3,
			NATS: NATSConfig{URL: "nats://a:4222, tls://b:4222", User: "u", Password: "p",
				TLSCert: pki.ClientCert, TLSKey: pki.ClientKey, TLSCA: pki.CA},
		})},
		{name: "http off", cfg: ok(Config{HTTPAddr: "off"})},
		{name: "creds file", cfg: ok(Config{NATS: NATSConfig{CredsFile: file}})},
		{name: "no name", cfg: Config{}, want: []string{`service name "": must be`}},
		{name: "password without user", cfg: ok(Config{NATS: NATSConfig{Password: "p"}}),
			want: []string{`--nats-password (CAPN_NATS_PASSWORD) "(hidden)": a password needs a user`}},
		{name: "token and nkey", cfg: ok(Config{NATS: NATSConfig{Token: "t", NKeySeedFile: file}}),
			want: []string{`--nats-token (CAPN_NATS_TOKEN) "(hidden)": use one way to authenticate, not token and nkey seed file`}},
		{name: "cert without key", cfg: ok(Config{NATS: NATSConfig{TLSCert: pki.ClientCert}}),
			want: []string{`--nats-tls-cert (CAPN_NATS_TLS_CERT) "` + pki.ClientCert + `": a TLS certificate needs its key`}},
		{name: "cert with the wrong key", cfg: ok(Config{NATS: NATSConfig{TLSCert: pki.ClientCert, TLSKey: pki.ServerKey}}),
			want: []string{`--nats-tls-cert (CAPN_NATS_TLS_CERT) "` + pki.ClientCert + `": certificate and key (--nats-tls-key) do not load as a pair`}},
		{name: "CA not PEM", cfg: ok(Config{NATS: NATSConfig{TLSCA: file}}),
			want: []string{`--nats-tls-ca (CAPN_NATS_TLS_CA) "` + file + `": must hold PEM certificates; found none`}},
		{name: "directory as file", cfg: ok(Config{NATS: NATSConfig{NKeySeedFile: dir}}),
			want: []string{`--nats-nkey (CAPN_NATS_NKEY) "` + dir + `": must be a readable file: is a directory`}},
		{name: "url without scheme", cfg: ok(Config{NATS: NATSConfig{URL: "nats://ok:4222,127.0.0.1:4222"}}),
			want: []string{`--nats-url (CAPN_NATS_URL) "nats://ok:4222,127.0.0.1:4222": must be nats://host:port`}},
		{name: "bad port", cfg: ok(Config{HTTPAddr: ":99999"}),
			want: []string{`--http-addr (CAPN_HTTP_ADDR) ":99999": must be host:port`}},
		{name: "inbox prefix", cfg: ok(Config{NATS: NATSConfig{InboxPrefix: "_INBOX_cluster-planner"}})},
		{name: "inbox prefix of two tokens", cfg: ok(Config{NATS: NATSConfig{InboxPrefix: "_I.svc-1"}})},
		{name: "inbox prefix with >", cfg: ok(Config{NATS: NATSConfig{InboxPrefix: "_INBOX_svc.>"}}),
			want: []string{`--nats-inbox-prefix (CAPN_NATS_INBOX_PREFIX) "_INBOX_svc.>": must not contain a wildcard (* or >)`}},
		{name: "inbox prefix with *", cfg: ok(Config{NATS: NATSConfig{InboxPrefix: "_INBOX_*"}}),
			want: []string{`--nats-inbox-prefix (CAPN_NATS_INBOX_PREFIX) "_INBOX_*": must not contain a wildcard (* or >)`}},
		{name: "inbox prefix with a space", cfg: ok(Config{NATS: NATSConfig{InboxPrefix: "_INBOX_ svc"}}),
			want: []string{`--nats-inbox-prefix (CAPN_NATS_INBOX_PREFIX) "_INBOX_ svc": must not contain whitespace`}},
		{name: "inbox prefix with a tab", cfg: ok(Config{NATS: NATSConfig{InboxPrefix: "_INBOX_\tsvc"}}),
			want: []string{`--nats-inbox-prefix (CAPN_NATS_INBOX_PREFIX) "_INBOX_\tsvc": must not contain whitespace`}},
		{name: "inbox prefix ending in a dot", cfg: ok(Config{NATS: NATSConfig{InboxPrefix: "_INBOX_svc."}}),
			want: []string{`--nats-inbox-prefix (CAPN_NATS_INBOX_PREFIX) "_INBOX_svc.": must not start or end with a dot`}},
		{name: "inbox prefix starting with a dot", cfg: ok(Config{NATS: NATSConfig{InboxPrefix: ".svc"}}),
			want: []string{`--nats-inbox-prefix (CAPN_NATS_INBOX_PREFIX) ".svc": must not start or end with a dot`}},
		{name: "inbox prefix with an empty token", cfg: ok(Config{NATS: NATSConfig{InboxPrefix: "_I..svc"}}),
			want: []string{`--nats-inbox-prefix (CAPN_NATS_INBOX_PREFIX) "_I..svc": must not contain an empty token`}},
		{name: "negative durations", cfg: ok(Config{ShutdownTimeout: -time.Second, NATS: NATSConfig{ConnectTimeout: -1, ReconnectWait: -1}}),
			want: []string{
				`--shutdown-timeout (CAPN_SHUTDOWN_TIMEOUT) "-1s": must be positive`,
				`--nats-connect-timeout (CAPN_NATS_CONNECT_TIMEOUT) "-1ns": must be positive`,
				`--nats-reconnect-wait (CAPN_NATS_RECONNECT_WAIT) "-1ns": must be positive`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Problems(tt.cfg.Validate())
			if len(got) != len(tt.want) {
				t.Fatalf("Validate() problems:\n%s\nwant %d: %q", strings.Join(got, "\n"), len(tt.want), tt.want)
			}
			for _, w := range tt.want {
				if !containsPrefix(got, w) {
					t.Errorf("missing %q in:\n%s", w, strings.Join(got, "\n"))
				}
			}
		})
	}
}

func TestFlagEnvPrecedence(t *testing.T) {
	env := map[string]string{
		"CAPN_NATS_URL":         "nats://from-env:4222",
		"CAPN_LOG_LEVEL":        "debug",
		"CAPN_SKIP_PROVISION":   "true",
		"CAPN_STREAM_REPLICAS":  "3",
		"CAPN_SHUTDOWN_TIMEOUT": "3s",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	tests := []struct {
		name     string
		args     []string
		envFirst bool // ApplyEnv before Parse
		want     Config
	}{
		{
			name: "env over defaults",
			want: Config{NATS: NATSConfig{URL: "nats://from-env:4222"}, LogLevel: "debug", SkipProvision: true, Replicas: 3, ShutdownTimeout: 3 * time.Second},
		},
		{
			name: "flags over env",
			args: []string{"--nats-url", "nats://from-flag:4222", "--log-level=warn", "--skip-provision=false", "--stream-replicas", "1"},
			want: Config{NATS: NATSConfig{URL: "nats://from-flag:4222"}, LogLevel: "warn", SkipProvision: false, Replicas: 1, ShutdownTimeout: 3 * time.Second},
		},
		{
			name:     "flags over env, env applied before parsing",
			args:     []string{"--nats-url", "nats://from-flag:4222", "--shutdown-timeout", "1m"},
			envFirst: true,
			want:     Config{NATS: NATSConfig{URL: "nats://from-flag:4222"}, LogLevel: "debug", SkipProvision: true, Replicas: 3, ShutdownTimeout: time.Minute},
		},
		{
			name: "a flag given with its default value still wins",
			args: []string{"--log-level", "info"},
			want: Config{NATS: NATSConfig{URL: "nats://from-env:4222"}, LogLevel: "info", SkipProvision: true, Replicas: 3, ShutdownTimeout: 3 * time.Second},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			cfg := Config{Name: "svc"}
			cfg.RegisterFlags(fs)
			if tt.envFirst {
				if err := cfg.ApplyEnv(lookup); err != nil {
					t.Fatal(err)
				}
			}
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if !tt.envFirst {
				if err := cfg.ApplyEnv(lookup); err != nil {
					t.Fatal(err)
				}
			}
			got := []any{cfg.NATS.URL, cfg.LogLevel, cfg.SkipProvision, cfg.Replicas, cfg.ShutdownTimeout, cfg.HTTPAddr}
			want := []any{tt.want.NATS.URL, tt.want.LogLevel, tt.want.SkipProvision, tt.want.Replicas, tt.want.ShutdownTimeout, DefaultHTTPAddr}
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("setting %d = %v, want %v", i, got[i], want[i])
				}
			}
		})
	}
}

func TestApplyEnvReportsEveryBadVariable(t *testing.T) {
	env := map[string]string{
		"CAPN_NATS_CONNECT_TIMEOUT": "soon",
		"CAPN_STREAM_REPLICAS":      "three",
		"CAPN_SKIP_PROVISION":       "maybe",
	}
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("test", flag.ContinueOnError))
	got := Problems(cfg.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
	want := []string{
		`--nats-connect-timeout (CAPN_NATS_CONNECT_TIMEOUT) "soon": not a duration (e.g. 500ms, 5s, 1m30s)`,
		`--stream-replicas (CAPN_STREAM_REPLICAS) "three": not an integer`,
		`--skip-provision (CAPN_SKIP_PROVISION) "maybe": not a boolean (true|false|1|0)`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ApplyEnv problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
