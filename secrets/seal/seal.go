package seal

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
)

const (
	magic     = "capn"
	version   = 1
	nonceSize = 12
	tagSize   = 16
)

var (
	// ErrMalformed means the bytes are not a sealed value this package can
	// read (too short, wrong magic or an unknown version).
	ErrMalformed = errors.New("not a sealed value")
	// ErrUnknownKey means the value was sealed with a key the keyring does
	// not hold.
	ErrUnknownKey = errors.New("sealed with a key not in the keyring")
	// ErrOpen means authentication failed: the value was tampered with, was
	// sealed under another name, or the key with its id is not the same key.
	ErrOpen = errors.New("sealed value does not authenticate")
)

// Keyring seals with its primary key and opens with any key it holds. It is
// immutable and safe for concurrent use.
type Keyring struct {
	primary Key
	keys    map[string]cipher.AEAD
	ids     []string
}

// NewKeyring makes a keyring that seals with primary and opens values
// sealed with primary or any of older. Keys must be distinct.
func NewKeyring(primary Key, older ...Key) (*Keyring, error) {
	r := &Keyring{primary: primary, keys: map[string]cipher.AEAD{}}
	for i, k := range append([]Key{primary}, older...) {
		if k.id == "" {
			return nil, fmt.Errorf("keyring: key %d is the zero Key; make keys with NewKey, ParseKey or GenerateKey", i)
		}
		if _, dup := r.keys[k.id]; dup {
			return nil, fmt.Errorf("keyring: key %s given twice", k.id)
		}
		block, err := aes.NewCipher(k.secret[:])
		if err != nil {
			return nil, fmt.Errorf("keyring: key %s: %w", k.id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("keyring: key %s: %w", k.id, err)
		}
		r.keys[k.id] = aead
		r.ids = append(r.ids, k.id)
	}
	return r, nil
}

// PrimaryID is the id of the key new values are sealed with.
func (r *Keyring) PrimaryID() string { return r.primary.id }

// KeyIDs lists the ids of every key held, primary first.
func (r *Keyring) KeyIDs() []string { return slices.Clone(r.ids) }

// Seal encrypts plaintext under the primary key, bound to name (the KV key
// the value is stored under). name must not be empty.
func (r *Keyring) Seal(name string, plaintext []byte) ([]byte, error) {
	if name == "" {
		return nil, errors.New("seal: empty name; the KV key is bound to the value")
	}
	id := r.primary.id
	hdr := header(id)
	out := make([]byte, len(hdr), len(hdr)+nonceSize+len(plaintext)+tagSize)
	copy(out, hdr)
	nonce := make([]byte, nonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal %s: %w", name, err)
	}
	out = append(out, nonce...)
	return r.keys[id].Seal(out, nonce, plaintext, aad(hdr, name)), nil
}

// Open decrypts a value sealed under name by any key in the keyring.
// Errors wrap ErrMalformed, ErrUnknownKey or ErrOpen.
func (r *Keyring) Open(name string, sealed []byte) ([]byte, error) {
	id, hdrLen, err := parseHeader(sealed)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	aead, ok := r.keys[id]
	if !ok {
		return nil, fmt.Errorf("open %s: key %s: %w (keyring holds %v)", name, id, ErrUnknownKey, r.ids)
	}
	nonce := sealed[hdrLen : hdrLen+nonceSize]
	pt, err := aead.Open(nil, nonce, sealed[hdrLen+nonceSize:], aad(sealed[:hdrLen], name))
	if err != nil {
		return nil, fmt.Errorf("open %s with key %s: %w", name, id, ErrOpen)
	}
	return pt, nil
}

// KeyID returns the id of the key a sealed value was sealed with.
func KeyID(sealed []byte) (string, error) {
	id, _, err := parseHeader(sealed)
	return id, err
}

// NeedsReseal is true when sealed was not sealed with the primary key
// (including when it is not a readable sealed value at all).
func (r *Keyring) NeedsReseal(sealed []byte) bool {
	id, err := KeyID(sealed)
	return err != nil || id != r.primary.id
}

// Reseal opens sealed and seals it again under the primary key. A value
// already sealed with the primary key is returned unchanged (after checking
// it opens), so calling Reseal on every value is idempotent and writes
// nothing new for values that are current.
func (r *Keyring) Reseal(name string, sealed []byte) ([]byte, error) {
	pt, err := r.Open(name, sealed)
	if err != nil {
		return nil, err
	}
	defer clear(pt)
	if !r.NeedsReseal(sealed) {
		return sealed, nil
	}
	return r.Seal(name, pt)
}

func header(id string) []byte {
	h := make([]byte, 0, len(magic)+2+len(id))
	h = append(h, magic...)
	h = append(h, version, byte(len(id)))
	return append(h, id...)
}

func aad(hdr []byte, name string) []byte {
	a := make([]byte, 0, len(hdr)+len(name))
	return append(append(a, hdr...), name...)
}

func parseHeader(b []byte) (id string, hdrLen int, err error) {
	if len(b) < len(magic)+2 || !bytes.Equal(b[:len(magic)], []byte(magic)) {
		return "", 0, ErrMalformed
	}
	if v := b[len(magic)]; v != version {
		return "", 0, fmt.Errorf("%w: format version %d, this build reads %d", ErrMalformed, v, version)
	}
	n := int(b[len(magic)+1])
	hdrLen = len(magic) + 2 + n
	if n == 0 || len(b) < hdrLen+nonceSize+tagSize {
		return "", 0, fmt.Errorf("%w: truncated", ErrMalformed)
	}
	return string(b[len(magic)+2 : hdrLen]), hdrLen, nil
}
