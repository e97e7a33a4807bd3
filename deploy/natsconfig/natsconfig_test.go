package natsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

func TestRenderIsDeterministicAndKeepsKeys(t *testing.T) {
	dir := t.TempDir()
	d := Compose()
	r1, err := Render(d, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(r1.Created) == 0 {
		t.Fatal("a first render created nothing")
	}
	before := readAll(t, dir)
	r2, err := Render(d, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(r2.Created) != 0 {
		t.Errorf("a second render created %v", r2.Created)
	}
	after := readAll(t, dir)
	for f, b := range before {
		if after[f] != b {
			t.Errorf("a second render changed %s", f)
		}
	}
	for u, k := range r1.PublicKeys {
		if r2.PublicKeys[u] != k {
			t.Errorf("user %s got a new key", u)
		}
	}
	// A new provider adds its user and changes the configs, nothing else.
	d.Providers = append(d.Providers, Provider{Name: "process", ObservedReads: []string{"secrets.>"}})
	r3, err := Render(d, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range r3.Created {
		if !strings.HasPrefix(c, "users/provider-process/") {
			t.Errorf("adding a provider created %s", c)
		}
	}
}

func readAll(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRenderedFiles(t *testing.T) {
	dir := t.TempDir()
	d := Compose()
	// In the containers the files are in /etc/nats; here, where rendered.
	for i := range d.Servers {
		d.Servers[i].ConfigDir = ""
	}
	r, err := Render(d, dir)
	if err != nil {
		t.Fatal(err)
	}
	users := d.Users()
	for _, s := range d.Servers {
		opts, err := server.ProcessConfigFile(r.ServerConfig(s.Name))
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		if opts.ServerName != s.Name || opts.Cluster.Name != d.Cluster || len(opts.Routes) != len(d.Servers) {
			t.Errorf("%s: server %q cluster %q routes %d", s.Name, opts.ServerName, opts.Cluster.Name, len(opts.Routes))
		}
		if !opts.JetStream || opts.StoreDir != s.StoreDir {
			t.Errorf("%s: JetStream %v in %q", s.Name, opts.JetStream, opts.StoreDir)
		}
		if opts.TLSConfig == nil || opts.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert ||
			opts.Cluster.TLSConfig == nil || opts.Cluster.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert {
			t.Errorf("%s: TLS on clients and routes, with client certificates, is required", s.Name)
		}
		// Every login but the static users' goes to the bootstrapper.
		if ac := opts.AuthCallout; ac == nil || ac.Issuer != r.CalloutIssuer || ac.Account != d.Account || len(ac.AuthUsers) != len(users) {
			t.Errorf("%s: auth callout %+v, want issuer %s, account %s and the %d users", s.Name, ac, r.CalloutIssuer, d.Account, len(users))
		} else {
			for i, u := range users {
				if ac.AuthUsers[i] != r.PublicKeys[u.Name] {
					t.Errorf("%s: auth user %d is %s, not %s's key", s.Name, i, ac.AuthUsers[i], u.Name)
				}
			}
		}
		if len(opts.Nkeys) != len(users) {
			t.Fatalf("%s: %d nkey users, want %d", s.Name, len(opts.Nkeys), len(users))
		}
		for i, nk := range opts.Nkeys {
			u := users[i]
			if nk.Nkey != r.PublicKeys[u.Name] || nk.Account == nil || nk.Account.Name != d.Account {
				t.Errorf("%s: user %d is not %s in %s", s.Name, i, u.Name, d.Account)
			}
			// "$" inside quotes is kept, not read as a variable.
			if p := nk.Permissions.Publish; p == nil || !slices.Equal(p.Allow, u.Perms.PublishAllow) {
				t.Errorf("%s: %s publishes %v, want %v", s.Name, u.Name, p, u.Perms.PublishAllow)
			}
			if !slices.Equal(nk.Permissions.Subscribe.Allow, u.Perms.SubscribeAllow) {
				t.Errorf("%s: %s subscribes %v", s.Name, u.Name, nk.Permissions.Subscribe.Allow)
			}
			if (nk.Permissions.Response != nil) != u.Perms.Responses {
				t.Errorf("%s: %s allow_responses %v", s.Name, u.Name, nk.Permissions.Response != nil)
			}
		}
		conf, err := Compose().ServerConfig(s.Name, "/etc/nats", r.PublicKeys, r.CalloutIssuer)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{ServerCertFile, ServerKeyFile, CAFile, RouteCertFile, RouteKeyFile, RouteCAFile} {
			if !strings.Contains(conf, `"/etc/nats/`+f+`"`) {
				t.Errorf("%s: the compose config does not name /etc/nats/%s", s.Name, f)
			}
		}
	}
	// Certificates: the server's for its names under the client CA, the
	// route's under the route CA only, each user's a client certificate.
	clientCA, routeCA := pool(t, filepath.Join(dir, "certs", CAFile)), pool(t, filepath.Join(dir, "certs", RouteCAFile))
	for _, s := range d.Servers {
		sd := r.ServerDir(s.Name)
		verify(t, filepath.Join(sd, ServerCertFile), clientCA, x509.ExtKeyUsageServerAuth, s.Name, true)
		verify(t, filepath.Join(sd, ServerCertFile), clientCA, x509.ExtKeyUsageServerAuth, "127.0.0.1", true)
		verify(t, filepath.Join(sd, RouteCertFile), routeCA, x509.ExtKeyUsageClientAuth, s.Name, true)
		verify(t, filepath.Join(sd, RouteCertFile), clientCA, x509.ExtKeyUsageClientAuth, s.Name, false)
	}
	for _, u := range users {
		verify(t, r.UserFile(u.Name, UserCertFile), clientCA, x509.ExtKeyUsageClientAuth, "", true)
		verify(t, r.UserFile(u.Name, UserCertFile), routeCA, x509.ExtKeyUsageClientAuth, "", false)
		for _, f := range []string{UserSeedFile, UserKeyFile} {
			st, err := os.Stat(r.UserFile(u.Name, f))
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("%s/%s: mode %v, want 0600", u.Name, f, st.Mode())
			}
		}
		env := readFile(t, r.UserFile(u.Name, UserEnvFile))
		for _, want := range []string{"CAPN_NATS_URL=tls://nats-1:4222,tls://nats-2:4222,tls://nats-3:4222", "CAPN_NATS_NKEY=/etc/capn/nats.nk",
			"CAPN_NATS_INBOX_PREFIX=" + InboxPrefix(u.Name), "CAPN_NATS_TLS_CA=/etc/capn/nats-ca.pem", "CAPN_STREAM_REPLICAS=3"} {
			if !strings.Contains(env, want+"\n") {
				t.Errorf("%s env lacks %s:\n%s", u.Name, want, env)
			}
		}
		if skip := strings.Contains(env, "CAPN_SKIP_PROVISION=true"); skip == (u.Name == Init) {
			t.Errorf("%s env: skip provision %v", u.Name, skip)
		}
		callout := strings.Contains(env, "CAPN_AUTH_CALLOUT_ISSUER_SEED_FILE=/etc/capn/"+CalloutIssuerSeedFile+"\n") &&
			strings.Contains(env, "CAPN_AUTH_CALLOUT_ACCOUNT="+d.Account+"\n")
		if callout != (u.Name == Bootstrapper) || (u.Name != Bootstrapper && strings.Contains(env, "AUTH_CALLOUT")) {
			t.Errorf("%s env: answers the auth callout %v:\n%s", u.Name, callout, env)
		}
	}
	// The issuer: an account seed only the bootstrapper's directory holds.
	if pub, created, err := EnsureIssuerSeed(r.UserFile(Bootstrapper, CalloutIssuerSeedFile)); err != nil || created || pub != r.CalloutIssuer {
		t.Errorf("issuer seed: %s created %v (%v), want %s", pub, created, err, r.CalloutIssuer)
	}
	if st, err := os.Stat(r.UserFile(Bootstrapper, CalloutIssuerSeedFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("issuer seed: %v (%v), want mode 0600", st, err)
	}
	if got := readFile(t, r.UserFile(Bootstrapper, CalloutIssuerPubFile)); got != r.CalloutIssuer+"\n" {
		t.Errorf("issuer public key file: %q", got)
	}
	// Machines: a transport certificate, the CA and the URL; no credential.
	verify(t, r.MachinesFile(UserCertFile), clientCA, x509.ExtKeyUsageClientAuth, "", true)
	verify(t, r.MachinesFile(UserCertFile), routeCA, x509.ExtKeyUsageClientAuth, "", false)
	if st, err := os.Stat(r.MachinesFile(UserKeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("machines' key: %v (%v), want mode 0600", st, err)
	}
	entries, err := os.ReadDir(r.MachinesDir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{UserEnvFile, UserCAFile, UserKeyFile, UserCertFile}; !slices.Equal(names, want) {
		t.Errorf("machines' directory holds %v, want %v", names, want)
	}
	env := readFile(t, r.MachinesFile(UserEnvFile))
	var keys []string
	for _, l := range strings.Split(env, "\n") {
		if k, _, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			keys = append(keys, k)
		}
	}
	if want := []string{"CAPN_NATS_URL", "CAPN_NATS_TLS_CERT", "CAPN_NATS_TLS_KEY", "CAPN_NATS_TLS_CA"}; !slices.Equal(keys, want) {
		t.Errorf("machines' env sets %v, want %v:\n%s", keys, want, env)
	}
	for _, want := range []string{"CAPN_NATS_URL=tls://nats-1:4222,tls://nats-2:4222,tls://nats-3:4222", "CAPN_NATS_TLS_CERT=/etc/capn/nats.pem",
		"CAPN_NATS_TLS_KEY=/etc/capn/nats-key.pem", "CAPN_NATS_TLS_CA=/etc/capn/nats-ca.pem"} {
		if !strings.Contains(env, want+"\n") {
			t.Errorf("machines' env lacks %s:\n%s", want, env)
		}
	}
}

// TestRenderWithoutNodeAgents: no machines, no callout, no issuer.
func TestRenderWithoutNodeAgents(t *testing.T) {
	dir := t.TempDir()
	d := Compose()
	d.NodeAgents = false
	for i := range d.Servers {
		d.Servers[i].ConfigDir = ""
	}
	r, err := Render(d, dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.CalloutIssuer != "" {
		t.Errorf("issuer %s without node agents", r.CalloutIssuer)
	}
	for _, p := range []string{r.MachinesDir(), r.UserFile(Bootstrapper, CalloutIssuerSeedFile)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists without node agents (%v)", p, err)
		}
	}
	opts, err := server.ProcessConfigFile(r.ServerConfig(d.Servers[0].Name))
	if err != nil {
		t.Fatal(err)
	}
	if opts.AuthCallout != nil {
		t.Errorf("auth callout %+v without node agents", opts.AuthCallout)
	}
	if env := readFile(t, r.UserFile(Bootstrapper, UserEnvFile)); strings.Contains(env, "AUTH_CALLOUT") {
		t.Errorf("the bootstrapper answers an auth callout without node agents:\n%s", env)
	}
	if _, err := d.ServerConfig(d.Servers[0].Name, "", r.PublicKeys, ""); err != nil {
		t.Errorf("no issuer is needed without node agents: %v", err)
	}
	d.NodeAgents = true
	if _, err := d.ServerConfig(d.Servers[0].Name, "", r.PublicKeys, ""); err == nil || !strings.Contains(err.Error(), "auth callout issuer") {
		t.Errorf("node agents without an issuer: %v", err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func pool(t *testing.T, p string) *x509.CertPool {
	t.Helper()
	cp := x509.NewCertPool()
	if !cp.AppendCertsFromPEM([]byte(readFile(t, p))) {
		t.Fatalf("%s: no certificate", p)
	}
	return cp
}

func verify(t *testing.T, certPath string, roots *x509.CertPool, usage x509.ExtKeyUsage, name string, ok bool) {
	t.Helper()
	c, err := parseCert([]byte(readFile(t, certPath)))
	if err != nil {
		t.Fatal(err)
	}
	// DNSName may be an IP address: Verify checks it against the IP SANs.
	_, err = c.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{usage}})
	if (err == nil) != ok {
		t.Errorf("%s for %q (usage %v): verified %v, want %v (%v)", certPath, name, usage, err == nil, ok, err)
	}
}

func TestValidate(t *testing.T) {
	d := Compose()
	d.Cluster, d.Account, d.Replicas = "Bad Name", "capn", 4
	d.Servers = append(d.Servers, d.Servers[0])
	d.Servers[1].ClientPort = 0
	d.Providers = append(d.Providers, Provider{Name: "sim"}, Provider{Name: "x", ObservedReads: []string{"a.>.b"}})
	err := d.Validate()
	if err == nil {
		t.Fatal("an invalid deployment validated")
	}
	for _, want := range []string{`cluster name "Bad Name"`, `account "capn"`, `name "nats-1" is used twice`,
		"client port 0", `provider "sim" is listed twice`, `observed read "a.>.b"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if err := Compose().Validate(); err != nil {
		t.Errorf("Compose(): %v", err)
	}
}

func TestCoversAndMinimal(t *testing.T) {
	for _, c := range []struct {
		p, q string
		want bool
	}{
		{"a.>", "a.b", true}, {"a.>", "a.b.>", true}, {"a.>", "a", false},
		{"a.*", "a.b", true}, {"a.*", "a.*", true}, {"a.*", "a.>", false}, {"a.*", "a.b.c", false},
		{"a.b", "a.b", true}, {"a.b", "a.c", false}, {"$JS.API.X.*.$KV.b.>", "$JS.API.X.*.$KV.b.c.>", true},
	} {
		if got := covers(c.p, c.q); got != c.want {
			t.Errorf("covers(%q, %q) = %v, want %v", c.p, c.q, got, c.want)
		}
	}
	got := minimal([]string{"a.b.>", "a.>", "c", "c", "a.*.d"})
	if want := []string{"a.>", "c"}; !slices.Equal(got, want) {
		t.Errorf("minimal: %v, want %v", got, want)
	}
}

// TestProviderIsConfined spells out the provider's whole permission list.
func TestProviderIsConfined(t *testing.T) {
	u, err := Compose().User(ProviderUser("sim"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"$JS.ACK.CAPN_PROVIDERS.provider-sim.>",
		"$JS.API.CONSUMER.CREATE.CAPN_PROVIDERS.provider-sim.capn.provider.sim.>",
		"$JS.API.CONSUMER.CREATE.KV_observed.*.$KV.observed.infra.sim.>",
		"$JS.API.CONSUMER.CREATE.KV_observed.*.$KV.observed.provider.sim",
		"$JS.API.CONSUMER.INFO.CAPN_PROVIDERS.provider-sim",
		"$JS.API.CONSUMER.MSG.NEXT.CAPN_PROVIDERS.provider-sim",
		"$JS.API.DIRECT.GET.KV_observed.$KV.observed.infra.sim.>",
		"$JS.API.DIRECT.GET.KV_observed.$KV.observed.provider.sim",
		"$JS.API.STREAM.INFO.KV_observed",
		"$JS.FC.KV_observed.>",
		"$KV.observed.infra.sim.>",
		"$KV.observed.provider.sim",
		"capn.bootstrap.credential.sim.*.*",
		"capn.evt.drift.sim.*.*",
		"capn.health.*.*.heartbeat",
	}
	if !slices.Equal(u.Perms.PublishAllow, want) {
		t.Errorf("provider-sim publishes\n%s\nwant\n%s", strings.Join(u.Perms.PublishAllow, "\n"), strings.Join(want, "\n"))
	}
	if !slices.Equal(u.Perms.SubscribeAllow, []string{"_INBOX_provider-sim.>"}) || u.Perms.Responses {
		t.Errorf("provider-sim subscribes %v (responses %v)", u.Perms.SubscribeAllow, u.Perms.Responses)
	}
	for _, s := range u.Perms.PublishAllow {
		if strings.Contains(s, "secrets") || strings.Contains(s, "docker") {
			t.Errorf("provider-sim may publish %s", s)
		}
	}
}
