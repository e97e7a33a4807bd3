package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
)

// DeploymentProgramNames are the programs of a capn deployment a user
// drives: the core services, the addon-manager, the backup service, the
// gateway and the CLI.
var DeploymentProgramNames = append(append([]string(nil), CoreProgramNames...), "addon-manager", "backup", "gateway", "capn")

var (
	deployOnce sync.Once
	deployDir  string
	deployErr  error
)

// Capn is a capn deployment for one test: the core programs, the
// addon-manager, the backup service and the gateway as processes on the test's NATS server,
// sharing one secrets key, and the CLI pointed at the gateway with an
// admin token.
type Capn struct {
	t *testing.T
	// Progs is the directory of the programs.
	Progs string
	// Home is the CLI's HOME (and a directory for the test's files).
	Home string
	// Server is the gateway's URL, Token its admin token.
	Server, Token string
	// SecretsKeyEnv is CAPN_SECRETS_KEY=<the deployment's key>, for a
	// test that runs one more program that opens the secrets bucket.
	SecretsKeyEnv string
}

// StartCapn runs a deployment against natsURL until the test ends. The
// programs come from $CAPN_CONFORMANCE_BIN_DIR or are built once per test
// binary.
func StartCapn(t *testing.T, natsURL string) *Capn {
	t.Helper()
	dir := os.Getenv(BinDirEnv)
	if dir == "" {
		deployOnce.Do(func() { deployDir, deployErr = BuildTemp(DeploymentProgramNames...) })
		if deployErr != nil {
			t.Fatal(deployErr)
		}
		dir = deployDir
	}
	c := &Capn{t: t, Progs: dir, Home: t.TempDir()}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	secretsKey := "CAPN_SECRETS_KEY=" + hex.EncodeToString(key)
	c.SecretsKeyEnv = secretsKey
	nats := "--nats-url=" + natsURL
	for _, name := range CoreProgramNames {
		env := []string{"CAPN_LOG_LEVEL=info", "CAPN_LOG_FORMAT=json"}
		if name == "bootstrapper" || name == "health-watcher" {
			env = append(env, secretsKey)
		}
		StartProgram(t, filepath.Join(dir, name), env, nats, "--http-addr=off")
	}
	// Add-on sets (none unless a test applies one); it opens kubeconfigs.
	StartProgram(t, filepath.Join(dir, "addon-manager"), []string{"CAPN_LOG_LEVEL=info", "CAPN_LOG_FORMAT=json", secretsKey}, nats, "--http-addr=off")
	// Backups, and workload clusters' etcd snapshots (sealed with the key).
	StartProgram(t, filepath.Join(dir, "backup"), []string{"CAPN_LOG_LEVEL=info", "CAPN_LOG_FORMAT=json", secretsKey}, nats, "--http-addr=off")
	// An admin token as `capn-gateway` takes them (32 random bytes, hex);
	// the suite runs the gateway only as a program, never imports it.
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		t.Fatal(err)
	}
	c.Token = hex.EncodeToString(tok)
	tokens := filepath.Join(c.Home, "tokens")
	if err := os.WriteFile(tokens, []byte(c.Token+" admin conformance\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + freePort(t)
	c.Server = "http://" + addr
	StartProgram(t, filepath.Join(dir, "gateway"), []string{"CAPN_LOG_LEVEL=info", "CAPN_LOG_FORMAT=json", secretsKey},
		nats, "--http-addr=off", "--addr="+addr, "--tokens-file="+tokens)
	Poll(t, "the gateway's /healthz", time.Minute, func() error {
		resp, err := http.Get(c.Server + "/healthz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", resp.Status, b)
		}
		return nil
	})
	return c
}

// CLI runs `capn args...` against the gateway as a user would and returns
// its standard output; a non-zero exit fails the test.
func (c *Capn) CLI(args ...string) string {
	c.t.Helper()
	stdout, stderr, err := c.TryCLI(args...)
	if err != nil {
		c.t.Fatalf("capn %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout, stderr)
	}
	return stdout
}

// TryCLI runs `capn args...` as CLI does and returns its standard output,
// its standard error and the error of a non-zero exit, for a check that
// expects a refusal.
func (c *Capn) TryCLI(args ...string) (stdout, stderr string, err error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.Progs, "capn"), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + c.Home, "XDG_CONFIG_HOME=" + filepath.Join(c.Home, "xdg"),
		"CAPN_SERVER=" + c.Server, "CAPN_TOKEN=" + c.Token}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	began := time.Now()
	err = cmd.Run()
	c.t.Logf("capn %s: %.1fs %s", strings.Join(args, " "), time.Since(began).Seconds(), strings.TrimSpace(errOut.String()))
	return out.String(), errOut.String(), err
}

// Poll runs check every second until it succeeds; after timeout the test
// fails with the last error.
func Poll(t testing.TB, what string, timeout time.Duration, check func() error) {
	t.Helper()
	if err := natstest.Poll(timeout, time.Second, check); err != nil {
		t.Fatalf("%s: not within %s; last: %v", what, timeout, err)
	}
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}
