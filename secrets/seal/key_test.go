package seal

import (
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	raw := make([]byte, KeySize)
	for i := range raw {
		raw[i] = byte(i * 7)
	}
	want, err := NewKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{"hex", hex.EncodeToString(raw), ""},
		{"HEX upper with newline", strings.ToUpper(hex.EncodeToString(raw)) + "\n", ""},
		{"base64 std", base64.StdEncoding.EncodeToString(raw), ""},
		{"base64 raw", base64.RawStdEncoding.EncodeToString(raw), ""},
		{"base64 url", base64.URLEncoding.EncodeToString(raw), ""},
		{"base64 raw url padded spaces", "  " + base64.RawURLEncoding.EncodeToString(raw) + " \n", ""},
		{"empty", "  \n", "empty"},
		{"short hex", hex.EncodeToString(raw[:16]), "32 hex digits, want 64"},
		{"odd hex", hex.EncodeToString(raw)[:63], "63 hex digits"},
		{"long hex", hex.EncodeToString(append(raw, 1)), "66 hex digits"},
		{"short base64", base64.StdEncoding.EncodeToString(raw[:24]), "decodes to 24 bytes, want 32"},
		{"garbage", "not a key!", "neither 64 hex digits nor base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := ParseKey(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseKey error = %v, want containing %q", err, tt.wantErr)
				}
				if strings.TrimSpace(tt.in) != "" && strings.Contains(err.Error(), strings.TrimSpace(tt.in)) {
					t.Fatal("error echoes the key material")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if k != want {
				t.Fatalf("ParseKey gave key %s, want %s", k.ID(), want.ID())
			}
		})
	}
}

func TestKeyFromEnv(t *testing.T) {
	k := mustKey(t)
	t.Setenv("CAPN_TEST_SEAL_KEY", k.Encode())
	got, err := KeyFromEnv("CAPN_TEST_SEAL_KEY")
	if err != nil || got != k {
		t.Fatalf("KeyFromEnv = %v, %v", got, err)
	}
	t.Setenv("CAPN_TEST_SEAL_KEY", "abcd")
	if _, err := KeyFromEnv("CAPN_TEST_SEAL_KEY"); err == nil || !strings.Contains(err.Error(), "CAPN_TEST_SEAL_KEY") {
		t.Fatalf("bad env value: error %v does not name the variable", err)
	}
	if _, err := KeyFromEnv("CAPN_TEST_SEAL_KEY_UNSET"); err == nil || !strings.Contains(err.Error(), "not set") {
		t.Fatalf("unset env: error %v", err)
	}
}

func TestGenerateKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "secrets.key")
	k1, created, err := GenerateKeyFile(path)
	if err != nil || !created {
		t.Fatalf("first GenerateKeyFile: created=%v err=%v", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	k2, created, err := GenerateKeyFile(path)
	if err != nil || created || k2 != k1 {
		t.Fatalf("second GenerateKeyFile: created=%v err=%v same=%v", created, err, k2 == k1)
	}
	k3, err := LoadKey(path)
	if err != nil || k3 != k1 {
		t.Fatalf("LoadKey: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}

	bad := filepath.Join(t.TempDir(), "bad.key")
	if err := os.WriteFile(bad, []byte("0123"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := GenerateKeyFile(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("GenerateKeyFile on a bad existing file: %v", err)
	}
	if _, err := LoadKey(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("LoadKey of a missing file succeeded")
	}
}
