package bootstraptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// RequireTool skips the test when a command-line tool is missing, but
// fails it under CI (CI=true), where the tool is installed on purpose.
func RequireTool(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed; CI must install it (CI=true)", name)
		}
		t.Skipf("%s is not installed; install it to run this test (apt-get install -y %s)", name, name)
	}
}

// CloudInitSchema validates a cloud-config document with the real tool:
// `cloud-init schema --config-file`.
func CloudInitSchema(t testing.TB, data []byte) {
	t.Helper()
	RequireTool(t, "cloud-init")
	p := filepath.Join(t.TempDir(), "user-data.yaml")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("cloud-init", "schema", "--config-file", p).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Valid cloud-config") {
		t.Fatalf("cloud-init schema rejects the document: %v\n%s\n--- document ---\n%s", err, out, data)
	}
}
