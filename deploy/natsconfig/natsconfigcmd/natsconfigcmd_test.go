package natsconfigcmd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/daemon"
)

func TestRender(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "deploy")
	var out, errb bytes.Buffer
	args := []string{"render", "--out", dir, "--provider", "sim:heartbeats", "--provider", "process:secrets-status"}
	if code := Run(context.Background(), args, &out, &errb); code != daemon.ExitOK {
		t.Fatalf("render: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "created gateway-admin.token") || !strings.Contains(out.String(), "created users/provider-process/nats.nk") ||
		!strings.Contains(out.String(), "created users/bootstrapper/auth-callout-issuer.nk") || !strings.Contains(out.String(), "created machines/nats.pem") {
		t.Errorf("render said:\n%s", out.String())
	}
	l := natsconfig.Layout{Dir: dir}
	if _, err := os.Stat(l.UserDir("provider-docker")); err == nil {
		t.Error("--provider replaced the default providers, yet provider-docker was rendered")
	}
	k1, err := seal.LoadKey(l.UserFile(natsconfig.Bootstrapper, SecretsKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	k2, err := seal.LoadKey(l.UserFile(natsconfig.Gateway, SecretsKeyFile))
	if err != nil || k1.ID() != k2.ID() {
		t.Errorf("the gateway's secrets key (%v) is not the bootstrapper's", err)
	}
	if k3, err := seal.LoadKey(l.UserFile(natsconfig.HealthWatcher, SecretsKeyFile)); err != nil || k1.ID() != k3.ID() {
		t.Errorf("the health-watcher's secrets key (%v) is not the bootstrapper's", err)
	}
	if k4, err := seal.LoadKey(l.UserFile(natsconfig.AddonManager, SecretsKeyFile)); err != nil || k1.ID() != k4.ID() {
		t.Errorf("the addon-manager's secrets key (%v) is not the bootstrapper's", err)
	}
	if k5, err := seal.LoadKey(l.UserFile(natsconfig.Backup, SecretsKeyFile)); err != nil || k1.ID() != k5.ID() {
		t.Errorf("the backup service's secrets key (%v) is not the bootstrapper's", err)
	}
	toks, err := gateway.LoadTokensFile(l.UserFile(natsconfig.Gateway, TokensFile))
	if err != nil || len(toks) != 1 {
		t.Fatalf("tokens file: %v (%d tokens)", err, len(toks))
	}
	token, err := os.ReadFile(filepath.Join(dir, AdminTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	if toks[0].Secret != gateway.HashToken(strings.TrimSpace(string(token))) || strings.Contains(toks[0].Secret, strings.TrimSpace(string(token))) {
		t.Errorf("the tokens file holds %q, not the admin token's hash", toks[0].Secret)
	}
	env, err := os.ReadFile(filepath.Join(dir, ComposeEnvFile))
	if err != nil || !strings.Contains(string(env), "CAPN_DEPLOY_DIR="+dir+"\n") {
		t.Errorf("compose.env (%v):\n%s", err, env)
	}

	out.Reset()
	if code := Run(context.Background(), args, &out, &errb); code != daemon.ExitOK {
		t.Fatalf("second render: exit %d: %s", code, errb.String())
	}
	if strings.Contains(out.String(), "created") {
		t.Errorf("a second render created files:\n%s", out.String())
	}
}

func TestUsage(t *testing.T) {
	var out, errb bytes.Buffer
	for _, c := range []struct {
		args []string
		code int
	}{
		{nil, daemon.ExitUsage},
		{[]string{"frobnicate"}, daemon.ExitUsage},
		{[]string{"render", "--provider", "sim:wings"}, daemon.ExitUsage},
		{[]string{"render", "extra"}, daemon.ExitUsage},
		{[]string{"help"}, daemon.ExitOK},
	} {
		if code := Run(context.Background(), c.args, &out, &errb); code != c.code {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, code, c.code, errb.String())
		}
	}
	out.Reset()
	if code := Run(context.Background(), []string{"users"}, &out, &errb); code != daemon.ExitOK {
		t.Fatal(errb.String())
	}
	for _, want := range []string{"provider-sim — infrastructure provider sim (inbox _INBOX_provider-sim)", "  pub   $KV.observed.infra.sim.>", "  sub   _INBOX_gateway.>",
		"machine.<cluster>.<machine> — each machine, no static user: logged in by the bootstrapper's auth callout"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("users lacks %q", want)
		}
	}
}

// The render makes the autoscaler's mutual TLS and gives the
// autoscaler-provider its files and env; autoscaler-client issues a
// cluster's client files with that CA.
func TestRenderAutoscaler(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "deploy")
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"render", "--out", dir}, &out, &errb); code != daemon.ExitOK {
		t.Fatalf("render: exit %d: %s", code, errb.String())
	}
	l := natsconfig.Layout{Dir: dir}
	env, err := os.ReadFile(l.UserFile(natsconfig.AutoscalerProvider, natsconfig.UserEnvFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{natsconfig.AutoscalerCertFile, natsconfig.AutoscalerKeyFile, natsconfig.AutoscalerCAFile} {
		if _, err := os.Stat(l.UserFile(natsconfig.AutoscalerProvider, f)); err != nil {
			t.Errorf("the autoscaler-provider's %s: %v", f, err)
		}
		if !strings.Contains(string(env), f) {
			t.Errorf("its env does not name %s:\n%s", f, env)
		}
	}
	out.Reset()
	if code := Run(context.Background(), []string{"autoscaler-client", "--out", dir, "--cluster", "demo", "--address", "10.0.0.5:8086"}, &out, &errb); code != daemon.ExitOK {
		t.Fatalf("autoscaler-client: exit %d: %s", code, errb.String())
	}
	cc, err := os.ReadFile(filepath.Join(dir, natsconfig.AutoscalerDir, "clients", "demo", "cloud-config"))
	if err != nil || !strings.Contains(string(cc), `address: "10.0.0.5:8086"`) {
		t.Fatalf("cloud-config (%v):\n%s", err, cc)
	}
	if code := Run(context.Background(), []string{"autoscaler-client", "--out", dir}, &out, &errb); code != daemon.ExitUsage {
		t.Errorf("autoscaler-client without --cluster: exit %d", code)
	}
}
