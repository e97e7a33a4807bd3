package seal_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/daemon"
)

func TestLoadKeyring(t *testing.T) {
	t.Setenv(seal.KeyEnv, "")
	dir := t.TempDir()
	primary := filepath.Join(dir, "primary.key")
	old := filepath.Join(dir, "old.key")
	for _, p := range []string{primary, old} {
		if _, _, err := seal.GenerateKeyFile(p); err != nil {
			t.Fatal(err)
		}
	}

	if ring, err := seal.LoadKeyring(primary, " "+old+", "); err != nil || ring == nil {
		t.Fatalf("primary and old key files: %v, %v", ring, err)
	}

	var fe *daemon.FieldError
	_, err := seal.LoadKeyring(filepath.Join(dir, "missing"), "")
	if !errors.As(err, &fe) || fe.Flag != "secrets-key-file" {
		t.Errorf("missing key file: %v", err)
	}
	_, err = seal.LoadKeyring(primary, filepath.Join(dir, "missing-old"))
	if !errors.As(err, &fe) || fe.Flag != "secrets-old-key-files" {
		t.Errorf("missing old key file: %v", err)
	}

	// No file: the environment, if set; nothing at all is nil, nil.
	t.Setenv(seal.KeyEnv, "not a key")
	if _, err := seal.LoadKeyring("", ""); !errors.As(err, &fe) || fe.Env != seal.KeyEnv || strings.Contains(err.Error(), "not a key") {
		t.Errorf("bad key in the environment: %v (must name the variable, never the value)", err)
	}
	t.Setenv(seal.KeyEnv, strings.Repeat("ab", 32))
	if ring, err := seal.LoadKeyring("", ""); err != nil || ring == nil {
		t.Errorf("key in the environment: %v, %v", ring, err)
	}
}

func TestLoadKeyringWithoutAKey(t *testing.T) {
	t.Setenv(seal.KeyEnv, "") // restored when the test ends
	os.Unsetenv(seal.KeyEnv)
	if ring, err := seal.LoadKeyring("", ""); ring != nil || err != nil {
		t.Errorf("no key anywhere: %v, %v, want nil, nil", ring, err)
	}
}
