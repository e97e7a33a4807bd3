package replyseal_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/capn-dev/capn/events/replyseal"
)

func TestSealOpensOnlyWithItsSecretAndAAD(t *testing.T) {
	plain := []byte("ca.key")
	sealed, err := replyseal.Seal("secret", "capn.bootstrap.fetch.c.m", plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, plain) {
		t.Fatal("the sealed reply holds the plain text")
	}
	if got, err := replyseal.Open("secret", "capn.bootstrap.fetch.c.m", sealed); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	for _, tt := range []struct{ secret, aad string }{{"other", "capn.bootstrap.fetch.c.m"}, {"secret", "capn.bootstrap.fetch.c.m2"}} {
		if _, err := replyseal.Open(tt.secret, tt.aad, sealed); !errors.Is(err, replyseal.ErrOpen) {
			t.Errorf("Open(%q, %q) = %v, want ErrOpen", tt.secret, tt.aad, err)
		}
	}
	sealed[len(sealed)-1] ^= 1
	if _, err := replyseal.Open("secret", "capn.bootstrap.fetch.c.m", sealed); !errors.Is(err, replyseal.ErrOpen) {
		t.Errorf("an altered reply opened: %v", err)
	}
}
