package clientconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadWhatEncodeWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "client.yaml")
	want := Config{Server: "http://127.0.0.1:8080", Token: "secret"}
	body := want.Encode("written by a test.\nsecond line")
	if !strings.HasPrefix(string(body), "# written by a test.\n# second line\nserver: ") {
		t.Errorf("Encode:\n%s", body)
	}
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := Read(path); err != nil || got != want {
		t.Errorf("Read = %+v, %v; want %+v", got, err, want)
	}
}

func TestReadRefuses(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"an unknown key", "server: http://a:1\ntokn: x\n", "field tokn not found"},
		{"a server that is no URL", "server: a:1\n", `server: "a:1" is not an http(s)://host:port URL`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "client.yaml")
			if err := os.WriteFile(path, []byte(tt.body), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Read(path); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Read: %v, want an error with %q", err, tt.want)
			}
		})
	}
}

func TestDefaultPath(t *testing.T) {
	tests := []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/x/capn/config.yaml"},
		{map[string]string{"XDG_CONFIG_HOME": "relative", "HOME": "/h"}, "/h/.config/capn/config.yaml"},
		{map[string]string{}, ""},
	}
	for _, tt := range tests {
		lookup := func(k string) (string, bool) { v, ok := tt.vars[k]; return v, ok }
		if got := DefaultPath(lookup); got != tt.want {
			t.Errorf("DefaultPath(%v) = %q, want %q", tt.vars, got, tt.want)
		}
	}
}
