package seal

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func mustKey(t *testing.T) Key {
	t.Helper()
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustRing(t *testing.T, primary Key, older ...Key) *Keyring {
	t.Helper()
	r, err := NewKeyring(primary, older...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSealOpenRoundTrip(t *testing.T) {
	r := mustRing(t, mustKey(t))
	for _, pt := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("secret "), 1000)} {
		s, err := r.Seal("pki.c1.ca", pt)
		if err != nil {
			t.Fatal(err)
		}
		// A plaintext this short can occur in random ciphertext by chance
		// (one byte: about one run in seven), so only a longer one is looked for.
		if len(pt) >= 8 && bytes.Contains(s, pt) {
			t.Fatal("sealed value contains the plaintext")
		}
		got, err := r.Open("pki.c1.ca", s)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, pt) {
			t.Fatalf("round trip: got %q", got)
		}
	}
}

func TestOpenFails(t *testing.T) {
	k := mustKey(t)
	r := mustRing(t, k)
	sealed, err := r.Seal("pki.c1.ca", []byte("private key"))
	if err != nil {
		t.Fatal(err)
	}
	// A key with the same id but another secret cannot be built through the
	// API; simulate it to prove authentication, not the id, guards the value.
	other := mustKey(t)
	other.id = k.id
	impostor := mustRing(t, other)

	flip := func(i int) []byte {
		b := bytes.Clone(sealed)
		b[i] ^= 1
		return b
	}
	tests := []struct {
		name   string
		ring   *Keyring
		key    string
		sealed []byte
		want   error
	}{
		{"wrong key", mustRing(t, mustKey(t)), "pki.c1.ca", sealed, ErrUnknownKey},
		{"wrong key same id", impostor, "pki.c1.ca", sealed, ErrOpen},
		{"name mismatch (AAD)", r, "pki.c2.ca", sealed, ErrOpen},
		{"tampered ciphertext", r, "pki.c1.ca", flip(len(sealed) - 20), ErrOpen},
		{"tampered tag", r, "pki.c1.ca", flip(len(sealed) - 1), ErrOpen},
		{"tampered nonce", r, "pki.c1.ca", flip(6 + len(k.id)), ErrOpen},
		{"tampered key id", r, "pki.c1.ca", flip(7), ErrUnknownKey},
		{"bad magic", r, "pki.c1.ca", flip(0), ErrMalformed},
		{"bad version", r, "pki.c1.ca", flip(4), ErrMalformed},
		{"truncated", r, "pki.c1.ca", sealed[:20], ErrMalformed},
		{"empty", r, "pki.c1.ca", nil, ErrMalformed},
		{"plaintext", r, "pki.c1.ca", []byte("-----BEGIN EC PRIVATE KEY-----"), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.ring.Open(tt.key, tt.sealed)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Open error = %v, want %v", err, tt.want)
			}
			if got != nil {
				t.Fatal("Open returned data with an error")
			}
			if strings.Contains(err.Error(), "private key") {
				t.Fatal("error leaks plaintext")
			}
		})
	}
}

func TestSealEmptyName(t *testing.T) {
	if _, err := mustRing(t, mustKey(t)).Seal("", []byte("x")); err == nil {
		t.Fatal("Seal with empty name succeeded")
	}
}

func TestSealIsRandomized(t *testing.T) {
	r := mustRing(t, mustKey(t))
	a, _ := r.Seal("k", []byte("same"))
	b, _ := r.Seal("k", []byte("same"))
	if bytes.Equal(a, b) {
		t.Fatal("two seals of the same value are identical: nonce reused")
	}
}

func TestRotation(t *testing.T) {
	oldKey, newKey := mustKey(t), mustKey(t)
	oldRing := mustRing(t, oldKey)
	values := map[string][]byte{"pki.c1.ca": []byte("ca key"), "bootstrap.c1.m1": []byte("user data")}
	stored := map[string][]byte{}
	for name, v := range values {
		s, err := oldRing.Seal(name, v)
		if err != nil {
			t.Fatal(err)
		}
		stored[name] = s
	}

	rotating := mustRing(t, newKey, oldKey)
	for name, s := range stored {
		if !rotating.NeedsReseal(s) {
			t.Fatalf("%s: NeedsReseal false for a value sealed with the old key", name)
		}
		if got, err := rotating.Open(name, s); err != nil || !bytes.Equal(got, values[name]) {
			t.Fatalf("%s: rotating keyring cannot open old value: %v", name, err)
		}
		re, err := rotating.Reseal(name, s)
		if err != nil {
			t.Fatal(err)
		}
		if id, _ := KeyID(re); id != newKey.ID() {
			t.Fatalf("%s: resealed with %s, want %s", name, id, newKey.ID())
		}
		if rotating.NeedsReseal(re) {
			t.Fatalf("%s: NeedsReseal true after Reseal", name)
		}
		again, err := rotating.Reseal(name, re)
		if err != nil || !bytes.Equal(again, re) {
			t.Fatalf("%s: Reseal of a current value changed it (err %v)", name, err)
		}
		stored[name] = re
	}

	newOnly := mustRing(t, newKey)
	for name, s := range stored {
		got, err := newOnly.Open(name, s)
		if err != nil || !bytes.Equal(got, values[name]) {
			t.Fatalf("%s: not readable after old key removal: %v", name, err)
		}
		if _, err := oldRing.Open(name, s); !errors.Is(err, ErrUnknownKey) {
			t.Fatalf("%s: old key alone opens a resealed value: %v", name, err)
		}
	}
}

func TestNewKeyringRejects(t *testing.T) {
	k := mustKey(t)
	if _, err := NewKeyring(k, k); err == nil {
		t.Fatal("duplicate key accepted")
	}
	if _, err := NewKeyring(Key{}); err == nil {
		t.Fatal("zero key accepted")
	}
}

func TestKeyNeverPrintsSecret(t *testing.T) {
	k := mustKey(t)
	secret := k.Encode()
	for _, s := range []string{
		fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s %q %x", k, k, k, k, k, k),
		fmt.Errorf("wrapped %v", k).Error(),
	} {
		if strings.Contains(s, secret) || strings.Contains(s, fmt.Sprintf("%x", k.secret)) {
			t.Fatalf("key formatting leaks the secret: %s", s)
		}
		if !strings.Contains(s, k.ID()) {
			t.Fatalf("key formatting lost the id: %s", s)
		}
	}
}
