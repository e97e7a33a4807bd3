package pki

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// requireTool skips when a command-line tool is missing, but fails under CI
// (CI=true) where the tool is installed on purpose.
func requireTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed; CI must install it", name)
		}
		t.Skipf("%s is not installed; install it to run this test", name)
	}
}

// writeTemp writes data to a file in a per-test directory.
func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// opensslVerify runs `openssl verify -CAfile ca cert` at the given time.
func opensslVerify(t *testing.T, caPEM, certPEM []byte, at time.Time) {
	t.Helper()
	requireTool(t, "openssl")
	ca := writeTemp(t, "ca.crt", caPEM)
	cert := writeTemp(t, "cert.crt", certPEM)
	out, err := exec.Command("openssl", "verify", "-attime", itoa(at.Unix()), "-CAfile", ca, cert).CombinedOutput()
	if err != nil {
		t.Fatalf("openssl verify: %v\n%s", err, out)
	}
}

func itoa(n int64) string {
	return strconv.FormatInt(n, 10)
}
