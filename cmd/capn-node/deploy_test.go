package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/agent"
	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/deploy/natsconfig/natsconfigtest"
	"github.com/capn-dev/capn/internal/testkit"
)

// TestAgentLogsInAsItsMachineOnTheRenderedDeployment runs capn-node agent
// configured by nothing but the rendered machines' env file (the URL and
// the TLS transport: no NATS credential, no inbox prefix) and its machine's
// identity and bootstrap credential, as a provider hands them, against a
// node of the rendered deployment whose auth callout the real bootstrapper
// (configured by its own rendered env file) answers: the agent logs in as
// its machine, fetches and applies its data and keeps its machine secret.
// The same agent naming another machine while holding this one's
// credential is refused at the login.
func TestAgentLogsInAsItsMachineOnTheRenderedDeployment(t *testing.T) {
	d := natsconfig.Compose()
	d.Servers, d.Replicas = d.Servers[:1], 1
	c := natsconfigtest.Start(t, d)
	c.Provision()
	c.StartBootstrapper(0)
	ms := c.WantMachines("c1", "w-0", "w-1")

	env := natsconfigtest.ReadEnv(t, c.Rendered.MachinesFile(natsconfig.UserEnvFile))
	for _, k := range []string{"CAPN_NATS_URL", "CAPN_NATS_TLS_CERT", "CAPN_NATS_TLS_KEY", "CAPN_NATS_TLS_CA"} {
		if env[k] == "" {
			t.Fatalf("the machines' env file sets no %s: %v", k, env)
		}
	}
	for _, k := range []string{"CAPN_NATS_NKEY", "CAPN_NATS_CREDS", "CAPN_NATS_USER", "CAPN_NATS_INBOX_PREFIX"} {
		if _, ok := env[k]; ok {
			t.Fatalf("the machines' env file sets %s: machines log in as themselves", k)
		}
	}
	machine := func(name, credential string) map[string]string {
		e := map[string]string{"CAPN_NODE_CLUSTER": "c1", "CAPN_NODE_MACHINE": name, "CAPN_NODE_VERSION": "v1.34.2",
			"CAPN_NODE_BOOTSTRAP_CHECKSUM": ms[name].Checksum, "CAPN_NODE_BOOTSTRAP_CREDENTIAL": credential,
			"CAPN_NODE_DATA_DIR": t.TempDir(), "CAPN_NODE_HEARTBEAT_EVERY": "1h"}
		for k, v := range env {
			e[k] = v
		}
		return e
	}

	w0 := machine("w-0", ms["w-0"].Credential)
	out, code, exited := runAgentFor(t, w0, "bootstrap data applied")
	if exited || !strings.Contains(out, "bootstrap data applied") {
		t.Fatalf("the agent did not apply its data (exited %v, code %d):\n%s", exited, code, out)
	}
	secret := filepath.Join(w0["CAPN_NODE_DATA_DIR"], agent.StateDir, agent.MachineSecretFile)
	if st, err := os.Stat(secret); err != nil || st.Mode().Perm() != 0o600 || st.Size() < 40 {
		t.Errorf("the machine secret was not kept 0600: %v (%v)", st, err)
	}

	// Root on w-0 runs an agent that says it is w-1: the callout refuses
	// w-0's credential for w-1, and the agent cannot start.
	w1 := machine("w-1", ms["w-0"].Credential)
	out, code, exited = runAgentFor(t, w1, "bootstrap data applied")
	if !exited || code == 0 || !strings.Contains(strings.ToLower(out), "authorization violation") {
		t.Fatalf("an agent of w-1 with w-0's credential was not refused (exited %v, code %d):\n%s", exited, code, out)
	}
}

// runAgentFor runs capn-node agent with env until its output has want, it
// exits, or 30 s pass; it stops it and returns its output, its exit code
// and whether it exited by itself.
func runAgentFor(t *testing.T, env map[string]string, want string) (string, int, bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testkit.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"agent"}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, out)
	}()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(out.String(), want) {
		select {
		case code := <-done:
			return out.String(), code, true
		case <-deadline:
			t.Errorf("capn-node agent: no %q within 30s", want)
			cancel()
			return out.String(), <-done, false
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	code := <-done
	if code != 0 {
		t.Errorf("capn-node agent exited %d after the stop:\n%s", code, out.String())
	}
	return out.String(), code, false
}
