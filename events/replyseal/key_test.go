package replyseal_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/capn-dev/capn/events/replyseal"
)

func TestSealToKey(t *testing.T) {
	k, err := replyseal.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte("the cluster CA's key")
	sealed, eph, err := replyseal.SealTo(k.Public(), "capn.bootstrap.hosted.c1", plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, plain) {
		t.Fatal("the sealed reply holds the plain text")
	}
	got, err := k.Open(eph, "capn.bootstrap.hosted.c1", sealed)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("open: %q, %v", got, err)
	}
	// Another key (an eavesdropper's, or its own public half sent back)
	// opens nothing; nor does another request's subject.
	other, _ := replyseal.NewKey()
	if _, err := other.Open(eph, "capn.bootstrap.hosted.c1", sealed); !errors.Is(err, replyseal.ErrOpen) {
		t.Fatalf("another key opened it: %v", err)
	}
	if _, err := k.Open(eph, "capn.bootstrap.hosted.c2", sealed); !errors.Is(err, replyseal.ErrOpen) {
		t.Fatalf("another subject opened it: %v", err)
	}
	if _, _, err := replyseal.SealTo("", "x", plain); err == nil {
		t.Fatal("sealed to no key")
	}
	if _, _, err := replyseal.SealTo("bm90IGEga2V5", "x", plain); err == nil {
		t.Fatal("sealed to a key that is not X25519")
	}
}
