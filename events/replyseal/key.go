package replyseal

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
)

// Sealing to a key: a requester that shares no secret with the answerer
// sends the public half of a fresh X25519 key (HeaderKey); the answerer
// seals the reply with the ECDH secret of that key and a fresh key of its
// own, whose public half it sends back in the reply's HeaderKey. Only the
// holder of the requester's private key opens it, whoever else reads the
// request or the reply.

// HeaderKey carries a base64 (standard, padded) X25519 public key: the
// requester's on the request, the answerer's on the reply.
const HeaderKey = "Capn-Reply-Key"

// Key is a requester's X25519 key, good for one request.
type Key struct{ priv *ecdh.PrivateKey }

// NewKey makes a fresh key.
func NewKey() (*Key, error) {
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return &Key{priv: priv}, nil
}

// Public is the HeaderKey value of the key's public half.
func (k *Key) Public() string { return base64.StdEncoding.EncodeToString(k.priv.PublicKey().Bytes()) }

// Open opens a reply SealTo made for this key; peer is the reply's
// HeaderKey.
func (k *Key) Open(peer, aad string, sealed []byte) ([]byte, error) {
	pub, err := parsePublic(peer)
	if err != nil {
		return nil, err
	}
	secret, err := k.priv.ECDH(pub)
	if err != nil {
		return nil, ErrOpen
	}
	return Open(hex.EncodeToString(secret), aad, sealed)
}

// SealTo seals plain for the holder of the private half of public (a
// request's HeaderKey), bound to aad; ephemeral is the reply's HeaderKey.
func SealTo(public, aad string, plain []byte) (sealed []byte, ephemeral string, err error) {
	pub, err := parsePublic(public)
	if err != nil {
		return nil, "", err
	}
	eph, err := NewKey()
	if err != nil {
		return nil, "", err
	}
	secret, err := eph.priv.ECDH(pub)
	if err != nil {
		return nil, "", fmt.Errorf("replyseal: header %s: %w", HeaderKey, err)
	}
	sealed, err = Seal(hex.EncodeToString(secret), aad, plain)
	return sealed, eph.Public(), err
}

func parsePublic(s string) (*ecdh.PublicKey, error) {
	if s == "" {
		return nil, fmt.Errorf("replyseal: header %s is required: a base64 X25519 public key", HeaderKey)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("replyseal: header %s: not base64: %w", HeaderKey, err)
	}
	pub, err := ecdh.X25519().NewPublicKey(b)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("replyseal: header %s: not an X25519 public key", HeaderKey), err)
	}
	return pub, nil
}
