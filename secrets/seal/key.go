package seal

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the length of a sealing key: AES-256.
const KeySize = 32

// KeyEnv is the environment variable a service reads its sealing key from
// when no key file is configured.
const KeyEnv = "CAPN_SECRETS_KEY"

// Key is one AES-256 sealing key and its id. The secret never leaves the
// package: String, GoString and Format print only the id, so a Key can be
// logged or wrapped into an error without leaking it.
type Key struct {
	id     string
	secret [KeySize]byte
}

// NewKey makes a Key from 32 raw bytes. Its id is derived from the secret
// (a truncated SHA-256 under a fixed label), so the same key always has the
// same id and no id has to be stored next to the key.
func NewKey(secret []byte) (Key, error) {
	if len(secret) != KeySize {
		return Key{}, fmt.Errorf("seal key: %d bytes, want %d (AES-256)", len(secret), KeySize)
	}
	var k Key
	copy(k.secret[:], secret)
	sum := sha256.Sum256(append([]byte("capn seal key id\x00"), secret...))
	k.id = hex.EncodeToString(sum[:6])
	return k, nil
}

// GenerateKey returns a new random key.
func GenerateKey() (Key, error) {
	b := make([]byte, KeySize)
	if _, err := rand.Read(b); err != nil {
		return Key{}, fmt.Errorf("seal key: %w", err)
	}
	return NewKey(b)
}

// ID is the key id written into every value sealed with this key.
func (k Key) ID() string { return k.id }

// String prints the id only, never the secret.
func (k Key) String() string { return "seal.Key(" + k.id + ")" }

// GoString prints the id only, never the secret (for %#v).
func (k Key) GoString() string { return k.String() }

// Format prints the id only whatever the verb, never the secret.
func (k Key) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// Encode returns the key as standard base64, the format GenerateKeyFile
// writes and ParseKey reads.
func (k Key) Encode() string { return base64.StdEncoding.EncodeToString(k.secret[:]) }

// ParseKey reads a key written as 64 hex digits or as base64 (standard or
// URL alphabet, padded or not) of 32 bytes. Surrounding white space is
// ignored. Errors say what was wrong without echoing the input.
func ParseKey(s string) (Key, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Key{}, errors.New("seal key: empty; want 32 bytes as 64 hex digits or base64")
	}
	// Hex digits are also base64 characters: a string of hex digits is read
	// as hex unless it has the length of unpadded base64 of 32 bytes.
	if isHex(s) && len(s) != base64.RawStdEncoding.EncodedLen(KeySize) {
		if len(s) != 2*KeySize {
			return Key{}, fmt.Errorf("seal key: %d hex digits, want %d (32 bytes)", len(s), 2*KeySize)
		}
		b, _ := hex.DecodeString(s)
		return NewKey(b)
	}
	for _, enc := range []*base64.Encoding{
		base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding,
	} {
		b, err := enc.DecodeString(s)
		if err != nil {
			continue
		}
		if len(b) != KeySize {
			return Key{}, fmt.Errorf("seal key: base64 decodes to %d bytes, want %d (AES-256)", len(b), KeySize)
		}
		return NewKey(b)
	}
	return Key{}, fmt.Errorf("seal key: %d characters that are neither 64 hex digits nor base64", len(s))
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// LoadKey reads a key file written by GenerateKeyFile or by hand (hex or
// base64, see ParseKey).
func LoadKey(path string) (Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("seal key file: %w", err)
	}
	k, err := ParseKey(string(b))
	if err != nil {
		return Key{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// KeyFromEnv reads a key from the environment variable name (hex or base64,
// see ParseKey).
func KeyFromEnv(name string) (Key, error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return Key{}, fmt.Errorf("seal key: environment variable %s is not set", name)
	}
	k, err := ParseKey(v)
	if err != nil {
		return Key{}, fmt.Errorf("environment variable %s: %w", name, err)
	}
	return k, nil
}

// GenerateKeyFile returns the key in path, creating the file with a new
// random key first if it does not exist (created is then true). The file is
// created with mode 0600 (its directory 0700 if missing), written completely
// before it appears under path, and never overwritten: two processes racing
// end up with the same key.
func GenerateKeyFile(path string) (k Key, created bool, err error) {
	if _, err := os.Stat(path); err == nil {
		k, err := LoadKey(path)
		return k, false, err
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Key{}, false, fmt.Errorf("seal key file: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Key{}, false, fmt.Errorf("seal key file: %w", err)
	}
	k, err = GenerateKey()
	if err != nil {
		return Key{}, false, err
	}
	tmp, err := os.CreateTemp(dir, ".seal-key-*")
	if err != nil {
		return Key{}, false, fmt.Errorf("seal key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file 0600; write, sync, then link into place so
	// path only ever holds a whole key and an existing key is never replaced.
	_, err = tmp.WriteString(k.Encode() + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Key{}, false, fmt.Errorf("seal key file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			k, err := LoadKey(path)
			return k, false, err
		}
		return Key{}, false, fmt.Errorf("seal key file: %w", err)
	}
	return k, true, nil
}
