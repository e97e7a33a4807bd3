package rehome_test

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/capn-dev/capn/providers/process/rehome"
)

func TestConnectionRequestRoundTripAndRefusals(t *testing.T) {
	dir := t.TempDir()
	if _, err := rehome.ReadConnection(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no request: %v, want fs.ErrNotExist", err)
	}
	want := rehome.Connection{URL: "nats://127.0.0.1:4222", NKeyFile: "/d/nats-users/node.nk", InboxPrefix: "_INBOX_node"}
	if err := rehome.WriteConnection(dir, want); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(rehome.ConnectionPath(dir)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("request file %v, %v: want 0600", fi, err)
	}
	if got, err := rehome.ReadConnection(dir); err != nil || got != want {
		t.Fatalf("read back %+v, %v", got, err)
	}
	for _, tt := range []struct {
		c    rehome.Connection
		want string
	}{
		{rehome.Connection{}, "url: required"},
		{rehome.Connection{URL: "http://127.0.0.1:4222"}, `url "http://127.0.0.1:4222": must be nats:// or tls://`},
		{rehome.Connection{URL: "nats://a:1", NKeyFile: "node.nk"}, `nkey_file "node.nk": must be an absolute path`},
		{rehome.Connection{URL: "nats://a:1", TLSCA: "ca.pem"}, `tls_ca "ca.pem": must be an absolute path`},
	} {
		err := rehome.WriteConnection(dir, tt.c)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.c, err, tt.want)
		}
	}
	if got, _ := rehome.ReadConnection(dir); got != want {
		t.Errorf("a refused request replaced the good one: %+v", got)
	}
	if err := rehome.RemoveConnection(dir); err != nil {
		t.Fatal(err)
	}
	if err := rehome.RemoveConnection(dir); err != nil {
		t.Errorf("removing twice: %v", err)
	}
}
