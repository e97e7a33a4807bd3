// Package token makes and checks kubeadm bootstrap tokens
// ([a-z0-9]{6}.[a-z0-9]{16}) and says when one must be renewed.
//
// A token's String never prints its secret half; Value does, for the
// bootstrap data and the token Secret only.
package token

import (
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
)

const (
	idLen     = 6
	secretLen = 16
	alphabet  = "abcdefghijklmnopqrstuvwxyz0123456789"
)

var format = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)

// ErrFormat means a string is not a bootstrap token.
var ErrFormat = errors.New("bootstrap token: want [a-z0-9]{6}.[a-z0-9]{16}")

// Token is a kubeadm bootstrap token: a public id and a secret.
type Token struct {
	ID     string
	Secret string
}

// Generate returns a new random token (crypto/rand, uniform over the
// 36-character alphabet).
func Generate() (Token, error) {
	b := make([]byte, idLen+secretLen)
	for i := range b {
		b[i] = alphabet[randIndex()]
	}
	return Token{ID: string(b[:idLen]), Secret: string(b[idLen:])}, nil
}

// randIndex draws uniformly from [0, len(alphabet)) by rejection sampling.
func randIndex() int {
	const limit = 256 - 256%len(alphabet)
	var b [1]byte
	for {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
		if int(b[0]) < limit {
			return int(b[0]) % len(alphabet)
		}
	}
}

// Parse checks s is a bootstrap token. The error never repeats s.
func Parse(s string) (Token, error) {
	m := format.FindStringSubmatch(s)
	if m == nil {
		return Token{}, fmt.Errorf("%w (got %d characters)", ErrFormat, len(s))
	}
	return Token{ID: m[1], Secret: m[2]}, nil
}

// Value is the whole token "id.secret", as kubeadm takes it.
func (t Token) Value() string { return t.ID + "." + t.Secret }

// IsZero is true for the zero Token.
func (t Token) IsZero() bool { return t == Token{} }

// String is the id with the secret redacted, safe for logs.
func (t Token) String() string { return t.ID + ".<redacted>" }

// GoString is safe for logs, like String.
func (t Token) GoString() string { return "token.Token(" + t.String() + ")" }

// Format prints String whatever the verb, so the secret never reaches a log.
func (t Token) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(t.String())) }
