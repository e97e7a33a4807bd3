package bootstrapper

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"
)

// startCalloutServer runs a real nats-server whose account CAPN holds a
// static service user and delegates every other login to the auth callout.
func startCalloutServer(t *testing.T, issuer nkeys.KeyPair) *server.Server {
	t.Helper()
	pub, err := issuer.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	acc := server.NewAccount("CAPN")
	opts := &server.Options{
		Host:     "127.0.0.1",
		Port:     -1,
		NoLog:    true,
		NoSigs:   true,
		Accounts: []*server.Account{acc},
		Users: []*server.User{
			{Username: "auth", Password: "authpw", Account: acc},
			{Username: "svc", Password: "svcpw", Account: acc},
		},
		AuthCallout: &server.AuthCallout{Issuer: pub, Account: "CAPN", AuthUsers: []string{"auth", "svc"}},
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

func TestCalloutScopesAMachineToItsOwnSubjects(t *testing.T) {
	issuer, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	s := startCalloutServer(t, issuer)
	authNC, err := nats.Connect(s.ClientURL(), nats.UserInfo("auth", "authpw"))
	if err != nil {
		t.Fatal(err)
	}
	defer authNC.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &Callout{Issuer: issuer, Account: "CAPN", Verify: func(_ context.Context, cl, m, pw string) bool {
		return credentialMatches(map[string]string{"c1/a": "pw-a", "c1/b": "pw-b"}[cl+"/"+m], pw)
	}}
	go func() { _ = c.Serve(ctx, authNC, zerolog.Nop()) }()
	if err := authNC.Flush(); err != nil {
		t.Fatal(err)
	}

	svc, err := nats.Connect(s.ClientURL(), nats.UserInfo("svc", "svcpw"))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	health, err := svc.SubscribeSync("capn.health.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Flush(); err != nil {
		t.Fatal(err)
	}

	// A wrong password and a non-machine user are refused.
	for _, u := range [][2]string{{"machine.c1.a", "pw-b"}, {"node", "pw-a"}, {"machine.c1.*", "pw-a"}} {
		if nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(u[0], u[1])); err == nil {
			nc.Close()
			t.Fatalf("login %s/%s accepted, want refused", u[0], u[1])
		}
	}

	errs := make(chan error, 4)
	a, err := nats.Connect(s.ClientURL(), nats.UserInfo("machine.c1.a", "pw-a"),
		nats.CustomInboxPrefix(MachineInboxPrefix("c1", "a")),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatalf("machine a login: %v", err)
	}
	defer a.Close()

	// B's health: the server refuses with a permission violation.
	if err := a.Publish("capn.health.c1.b.Ready.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	expectViolation(t, errs, "publish B's health")
	// Its own health goes through.
	if err := a.Publish("capn.health.c1.a.Ready.1", []byte("ok")); err != nil {
		t.Fatal(err)
	}
	m, err := health.NextMsg(5 * time.Second)
	if err != nil || m.Subject != "capn.health.c1.a.Ready.1" {
		t.Fatalf("own health: %v %v", m, err)
	}
	// B's fetch: refused even though someone answers it.
	fetchB, err := svc.Subscribe("capn.bootstrap.fetch.c1.b", func(m *nats.Msg) { _ = m.Respond([]byte("secret")) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = fetchB.Unsubscribe() }()
	if err := svc.Flush(); err != nil {
		t.Fatal(err)
	}
	if r, err := a.Request("capn.bootstrap.fetch.c1.b", nil, 2*time.Second); err == nil {
		t.Fatalf("fetch of B's data answered %q", r.Data)
	}
	expectViolation(t, errs, "fetch B's data")
	// Another machine's inbox: refused.
	if _, err := a.SubscribeSync(MachineInboxPrefix("c1", "b") + ".x"); err != nil {
		t.Fatal(err)
	}
	expectViolation(t, errs, "subscribe to B's inbox")
}

func expectViolation(t *testing.T, errs <-chan error, what string) {
	t.Helper()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(err.Error(), "Permissions Violation") {
			t.Fatalf("%s: %v, want permission violation", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no permission violation", what)
	}
}

func TestParseMachineUser(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ok   bool
		c, m string
	}{
		{"machine.c1.a", true, "c1", "a"},
		{"machine.c1", false, "", ""},
		{"machine.c1.a.b", false, "", ""},
		{"machine..a", false, "", ""},
		{"node", false, "", ""},
		{"machine.c1.>", false, "", ""},
	} {
		c, m, ok := parseMachineUser(tc.in)
		if ok != tc.ok || c != tc.c || m != tc.m {
			t.Errorf("parseMachineUser(%q) = %q %q %v", tc.in, c, m, ok)
		}
	}
}
