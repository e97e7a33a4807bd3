package daemon

import (
	"context"
	"flag"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/capn-dev/capn/events/natstest"
)

func TestConnectAuthenticates(t *testing.T) {
	dir := t.TempDir()
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := user.Seed()
	pub, _ := user.PublicKey()
	seedFile := writeFile(t, dir, "user.nk", string(seed))
	pki := newTestPKI(t)
	tlsConfig, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, CaFile: pki.CA, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	users := server.Options{Users: []*server.User{{Username: "svc", Password: "pw"}}}

	tests := []struct {
		name    string
		server  server.Options
		scheme  string
		cfg     NATSConfig
		wantErr string
	}{
		{name: "user and password", server: users, cfg: NATSConfig{User: "svc", Password: "pw"}},
		{name: "wrong password fails at once", server: users, cfg: NATSConfig{User: "svc", Password: "nope"},
			wantErr: "credentials refused"},
		{name: "user and password file", server: users, cfg: NATSConfig{User: "svc", PasswordFile: writeFile(t, dir, "pw", "pw\n")}},
		{name: "a password file with the wrong password", server: users, cfg: NATSConfig{User: "svc", PasswordFile: writeFile(t, dir, "nope", "nope\n")},
			wantErr: "credentials refused"},
		{name: "token", server: server.Options{Authorization: "s3cret"}, cfg: NATSConfig{Token: "s3cret"}},
		{name: "nkey seed file", server: server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}}, cfg: NATSConfig{NKeySeedFile: seedFile}},
		{name: "TLS with a client certificate", server: server.Options{TLSConfig: tlsConfig, TLSVerify: true, TLSTimeout: 2},
			scheme: "tls", cfg: NATSConfig{TLSCert: pki.ClientCert, TLSKey: pki.ClientKey, TLSCA: pki.CA}},
		{name: "TLS without the client certificate", server: server.Options{TLSConfig: tlsConfig, TLSVerify: true, TLSTimeout: 2},
			scheme: "tls", cfg: NATSConfig{TLSCA: pki.CA}, wantErr: "context deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, tt.server)
			tt.cfg.URL = s.ClientURL()
			if tt.scheme != "" {
				tt.cfg.URL = strings.Replace(tt.cfg.URL, "nats://", tt.scheme+"://", 1)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			log, _ := testLogger(t)
			nc, err := Connect(ctx, tt.cfg, "test", log)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Connect() error = %v, want %q", err, tt.wantErr)
				}
				if ctx.Err() != nil && !strings.Contains(tt.wantErr, "deadline") {
					t.Errorf("Connect retried refused credentials until the deadline")
				}
				return
			}
			if err != nil {
				t.Fatalf("Connect(): %v", err)
			}
			defer nc.Close()
			if err := nc.Publish("x", nil); err != nil {
				t.Fatal(err)
			}
			if err := nc.FlushTimeout(time.Second); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The password file is read at every connect: a machine's secret that
// capn-node writes after its bootstrap fetch, or replaces, is what the
// next reconnect uses.
func TestConnectReadsThePasswordFileAtEveryConnect(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "pw", "first\n")
	s := startServer(t, server.Options{Users: []*server.User{{Username: "m", Password: "first"}}})
	log, _ := testLogger(t)
	nc, err := Connect(context.Background(), NATSConfig{URL: s.ClientURL(), User: "m", PasswordFile: file}, "test", log)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	writeFile(t, dir, "pw", "second\n")
	if err := s.ReloadOptions(&server.Options{Host: s.Addr().(*net.TCPAddr).IP.String(), Port: s.Addr().(*net.TCPAddr).Port,
		Users: []*server.User{{Username: "m", Password: "second"}}, NoLog: true, NoSigs: true}); err != nil {
		t.Fatal(err)
	}
	// The reload closes the connection that logged in with the old
	// password; the reconnect reads the file again.
	natstest.WaitFor(t, 10*time.Second, "reconnected with the new password", func() bool {
		return nc.IsConnected() && nc.Reconnects > 0
	})
}

func TestConnectLogsPermissionViolations(t *testing.T) {
	s := startServer(t, server.Options{Users: []*server.User{{Username: "svc", Password: "pw", Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Deny: []string{"forbidden.>"}},
		Subscribe: &server.SubjectPermission{Deny: []string{"secret.>"}},
	}}}})
	log, logs := testLogger(t)
	nc, err := Connect(context.Background(), NATSConfig{URL: s.ClientURL(), User: "svc", Password: "pw"}, "test", log)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish("forbidden.x", []byte("no")); err != nil {
		t.Fatal(err) // a denied publish does not fail: only the log tells
	}
	if _, err := nc.Subscribe("secret.y", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	natstest.WaitFor(t, 5*time.Second, "both permission violations logged", func() bool {
		var pub, sub bool
		for _, l := range logs.Lines("NATS error") {
			if l["reason"] != "permission_violation" || l["level"] != "error" {
				continue
			}
			pub = pub || l["operation"] == "publish" && l["subject"] == "forbidden.x"
			sub = sub || l["operation"] == "subscription" && l["subject"] == "secret.y"
		}
		return pub && sub
	})
}

func TestConnectReconnectsAndLogsIt(t *testing.T) {
	s := natstest.Start(t)
	log, logs := testLogger(t)
	nc, err := Connect(context.Background(), NATSConfig{URL: s.URL(), ReconnectWait: 200 * time.Millisecond}, "test", log)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s.Restart()
	natstest.WaitFor(t, 10*time.Second, "reconnected", nc.IsConnected)
	natstest.WaitFor(t, 5*time.Second, "disconnect and reconnect logged", func() bool {
		return len(logs.Lines("disconnected from NATS, reconnecting")) == 1 && len(logs.Lines("reconnected to NATS")) == 1
	})
	nc.Close()
	natstest.WaitFor(t, 5*time.Second, "close logged", func() bool { return len(logs.Lines("NATS connection closed")) == 1 })
}

func TestConnectWaitsForTheServer(t *testing.T) {
	s := natstest.Start(t)
	s.Stop()
	log, logs := testLogger(t)
	type result struct {
		nc  *nats.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := Connect(context.Background(), NATSConfig{URL: s.URL(), ReconnectWait: 100 * time.Millisecond}, "test", log)
		done <- result{nc, err}
	}()
	natstest.WaitFor(t, 5*time.Second, "a failed attempt logged", func() bool {
		return len(logs.Lines("cannot connect to NATS, retrying")) > 0
	})
	s.Restart()
	r := <-done
	if r.err != nil {
		t.Fatalf("Connect() = %v after the server came up", r.err)
	}
	r.nc.Close()
}

func TestConnectGivesUpWhenContextEnds(t *testing.T) {
	ln := listen(t)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	log, _ := testLogger(t)
	_, err := Connect(ctx, NATSConfig{URL: "nats://" + addr}, "test", log)
	if err == nil || !strings.Contains(err.Error(), "context deadline exceeded") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Connect() = %v, want the deadline and the address", err)
	}
}

func TestBackoff(t *testing.T) {
	tests := []struct {
		attempt  int
		min, max time.Duration
	}{
		{1, 80 * time.Millisecond, 100 * time.Millisecond},
		{2, 160 * time.Millisecond, 200 * time.Millisecond},
		{5, 1280 * time.Millisecond, 1600 * time.Millisecond},
		{50, 1600 * time.Millisecond, 2 * time.Second},
	}
	for _, tt := range tests {
		for range 20 {
			if d := backoff(tt.attempt, 2*time.Second); d < tt.min || d > tt.max {
				t.Errorf("backoff(%d) = %s, want %s..%s", tt.attempt, d, tt.min, tt.max)
			}
		}
	}
}

// A user allowed replies on _INBOX_svc.> only gets them when its connection
// uses --nats-inbox-prefix _INBOX_svc, set from CAPN_NATS_INBOX_PREFIX; with
// NATS's default _INBOX it is denied and its request has no answer.
func TestConnectUsesTheInboxPrefix(t *testing.T) {
	s := startServer(t, server.Options{Users: []*server.User{
		{Username: "svc", Password: "pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"echo"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_svc.>"}},
		}},
		{Username: "echo", Password: "pw"},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	log, _ := testLogger(t)
	echo, err := Connect(ctx, NATSConfig{URL: s.ClientURL(), User: "echo", Password: "pw"}, "echo", log)
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	if _, err := echo.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := echo.Flush(); err != nil {
		t.Fatal(err)
	}

	fs := flag.NewFlagSet("svc", flag.ContinueOnError)
	cfg := Config{Name: "svc"}
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--nats-url", s.ClientURL(), "--nats-user", "svc", "--nats-password", "pw"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"CAPN_NATS_INBOX_PREFIX": "_INBOX_svc"}
	if err := cfg.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if cfg.NATS.InboxPrefix != "_INBOX_svc" {
		t.Fatalf("InboxPrefix = %q, want _INBOX_svc from CAPN_NATS_INBOX_PREFIX", cfg.NATS.InboxPrefix)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	nc, err := Connect(ctx, cfg.NATS, "svc", log)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if inbox := nc.NewInbox(); !strings.HasPrefix(inbox, "_INBOX_svc.") {
		t.Errorf("NewInbox() = %q, want _INBOX_svc.<id>", inbox)
	}
	m, err := nc.Request("echo", []byte("hi"), 2*time.Second)
	if err != nil {
		t.Fatalf("request with the inbox prefix: %v", err)
	}
	if string(m.Data) != "hi" {
		t.Errorf("reply %q, want hi", m.Data)
	}

	def := cfg.NATS
	def.InboxPrefix = ""
	plain, err := Connect(ctx, def, "svc-default-inbox", log)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Request("echo", []byte("hi"), 500*time.Millisecond); err == nil {
		t.Error("a request with the default _INBOX prefix was answered: the server should deny its reply subscription")
	}
}
