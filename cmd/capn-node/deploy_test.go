package main

import (
	"bufio"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/deploy/natsconfig/natsconfigtest"
	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/providers/sdk"
)

// TestAgentRunsWithTheRenderedNodeUser runs capn-node agent configured by
// nothing but the rendered env file of the deployment's node user (TLS
// with a client certificate, an nkey seed, the _INBOX_node inbox prefix)
// against a node of the rendered deployment: its bootstrap fetch, a
// request, gets the bootstrapper's answer. Without the inbox prefix the
// server denies its reply subscription.
func TestAgentRunsWithTheRenderedNodeUser(t *testing.T) {
	d := natsconfig.Compose()
	d.Servers, d.Replicas = d.Servers[:1], 1
	c := natsconfigtest.Start(t, d)
	c.Provision()

	// The bootstrapper's side: refuse with a retryable error the agent logs.
	bs, _, _ := c.Connect(natsconfig.Bootstrapper, 0)
	if _, err := bs.Subscribe(sdk.BootstrapFetchSubject("c1", "w-0"), func(m *nats.Msg) {
		r := nats.NewMsg(m.Reply)
		r.Header.Set(sdk.HeaderServiceErrorCode, "503")
		r.Header.Set(sdk.HeaderServiceError, "answer-from-the-bootstrapper")
		_ = m.RespondMsg(r)
	}); err != nil {
		t.Fatal(err)
	}
	if err := bs.Flush(); err != nil {
		t.Fatal(err)
	}

	env := map[string]string{}
	f, err := os.Open(c.Rendered.UserFile(natsconfig.NodeAgent, natsconfig.UserEnvFile))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && !strings.HasPrefix(k, "#") {
			env[k] = v
		}
	}
	f.Close()
	for _, k := range []string{"CAPN_NATS_URL", "CAPN_NATS_NKEY", "CAPN_NATS_TLS_CERT", "CAPN_NATS_TLS_KEY", "CAPN_NATS_TLS_CA", "CAPN_NATS_INBOX_PREFIX"} {
		if env[k] == "" {
			t.Fatalf("the node user's env file sets no %s: %v", k, env)
		}
	}
	for k, v := range map[string]string{"CAPN_NODE_CLUSTER": "c1", "CAPN_NODE_MACHINE": "w-0", "CAPN_NODE_VERSION": "v1.33.4",
		"CAPN_NODE_BOOTSTRAP_CHECKSUM": "sha256:00", "CAPN_NODE_DATA_DIR": t.TempDir()} {
		env[k] = v
	}

	stderr := runAgentFor(t, env, "answer-from-the-bootstrapper")
	if !strings.Contains(stderr, "answer-from-the-bootstrapper") {
		t.Fatalf("the agent never got the bootstrapper's answer:\n%s", stderr)
	}

	// The default _INBOX: the server refuses the reply subscription (the
	// -ERR the runtime logs as a permission violation).
	delete(env, "CAPN_NATS_INBOX_PREFIX")
	env["CAPN_NODE_DATA_DIR"] = t.TempDir()
	stderr = runAgentFor(t, env, "permission_violation")
	if !strings.Contains(stderr, `Subscription to \"_INBOX.`) {
		t.Fatalf("without the inbox prefix the server did not deny _INBOX.>:\n%s", stderr)
	}
}

// runAgentFor runs capn-node agent with env until its output has want (or
// 15 s pass), stops it and returns its output.
func runAgentFor(t *testing.T, env map[string]string, want string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &testkit.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"agent"}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, out)
	}()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(out.String(), want) {
		select {
		case code := <-done:
			cancel()
			t.Fatalf("capn-node agent exited %d:\n%s", code, out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("capn-node agent exited %d after the stop:\n%s", code, out.String())
	}
	return out.String()
}
