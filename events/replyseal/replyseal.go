// Package replyseal seals a request's reply for the holder of a shared
// secret: the bootstrapper seals a machine's bootstrap data with the
// machine's credential, so that whoever else can read the reply subject
// (every node agent shares the node user's inbox prefix until NATS tells
// machines apart) reads only ciphertext.
//
// A sealed reply is nonce (12 bytes) || AES-256-GCM(key, nonce, plain,
// aad), with key = HKDF-SHA-256(secret, info "capn reply v1"). aad binds
// the reply to its request (the request's subject).
package replyseal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
)

const info = "capn reply v1"

// ErrOpen means the reply was not sealed with the secret and aad given,
// or was altered.
var ErrOpen = errors.New("replyseal: the reply does not open with this secret")

func aead(secret string) (cipher.AEAD, error) {
	if secret == "" {
		return nil, errors.New("replyseal: empty secret")
	}
	key, err := hkdf.Key(sha256.New, []byte(secret), nil, info, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Seal seals plain for the holder of secret, bound to aad.
func Seal(secret, aad string, plain []byte) ([]byte, error) {
	a, err := aead(secret)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, a.NonceSize(), a.NonceSize()+len(plain)+a.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return a.Seal(nonce, nonce, plain, []byte(aad)), nil
}

// Open opens a reply Seal made with the same secret and aad.
func Open(secret, aad string, sealed []byte) ([]byte, error) {
	a, err := aead(secret)
	if err != nil {
		return nil, err
	}
	if len(sealed) < a.NonceSize()+a.Overhead() {
		return nil, ErrOpen
	}
	plain, err := a.Open(nil, sealed[:a.NonceSize()], sealed[a.NonceSize():], []byte(aad))
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
}
