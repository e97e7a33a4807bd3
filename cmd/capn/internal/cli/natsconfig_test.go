package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/deploy/natsconfig/natsconfigcmd"
)

// capn nats-config runs capn-nats-config's commands: render writes the
// deployment (every user's env file with its inbox prefix, the admin
// token), a bad command is a usage error, -h is the usage.
func TestNATSConfigRenders(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "deploy")
	var stdout, stderr bytes.Buffer
	e := env{stdout: &stdout, stderr: &stderr, lookup: func(string) (string, bool) { return "", false }}
	if code := run(context.Background(), e, []string{"nats-config", "render", "--out", dir}); code != 0 {
		t.Fatalf("capn nats-config render: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "rendered 3 nodes") {
		t.Errorf("output: %s", stdout.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "users", natsconfig.MachineManager, natsconfig.UserEnvFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "CAPN_NATS_INBOX_PREFIX=_INBOX_machine-manager\n") {
		t.Errorf("machine-manager's env file has no inbox prefix:\n%s", b)
	}
	if _, err := os.Stat(filepath.Join(dir, natsconfigcmd.AdminTokenFile)); err != nil {
		t.Error(err)
	}

	stdout.Reset()
	stderr.Reset()
	if code := run(context.Background(), e, []string{"nats-config", "frobnicate"}); code != 2 || !strings.Contains(stderr.String(), `unknown command "frobnicate"`) {
		t.Errorf("capn nats-config frobnicate: exit %d\n%s", code, stderr.String())
	}
	stdout.Reset()
	if code := run(context.Background(), e, []string{"help", "nats-config"}); code != 0 || !strings.Contains(stdout.String(), "render") {
		t.Errorf("capn help nats-config: exit %d\n%s", code, stdout.String())
	}
}
