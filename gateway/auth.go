package gateway

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/capn-dev/capn/gateway/api"
)

// Token is one bearer token the gateway accepts.
type Token struct {
	// Name identifies the token in logs and in rate limiting; it is never
	// the secret. Empty: "sha256:" and the first 12 hex digits of the
	// token's SHA-256.
	Name string
	// Secret is the bearer token itself, or "sha256:" followed by the 64
	// hex digits of its SHA-256, so that a tokens file need not hold the
	// token in the clear.
	Secret string
	// Scopes the token carries; admin is all of them.
	Scopes []api.Scope
	// Clusters and ClusterSelector limit the clusters whose machines the
	// token may report health of (POST /v1/events): a cluster named in
	// Clusters, or whose labels ClusterSelector (Kubernetes label selector
	// syntax) matches. Both empty: every cluster.
	Clusters        []string
	ClusterSelector string
}

// scopeSet is a set of scopes as bits.
type scopeSet uint8

const (
	scopeRead scopeSet = 1 << iota
	scopeWrite
	scopeIngest
	scopeSecrets

	scopeAll       = scopeRead | scopeWrite | scopeIngest | scopeSecrets
	scopeAnonymous = scopeRead | scopeWrite | scopeIngest // never secrets
)

func parseScope(s api.Scope) (scopeSet, error) {
	switch s {
	case api.ScopeRead:
		return scopeRead, nil
	case api.ScopeWrite:
		return scopeWrite, nil
	case api.ScopeIngest:
		return scopeIngest, nil
	case api.ScopeSecrets:
		return scopeSecrets, nil
	case api.ScopeAdmin:
		return scopeAll, nil
	}
	return 0, fmt.Errorf("unknown scope %q (want read, write, ingest, secrets or admin)", string(s))
}

// has reports whether every scope in want is in s.
func (s scopeSet) has(want scopeSet) bool { return s&want == want }

// String lists the scopes, comma-separated.
func (s scopeSet) String() string {
	var names []string
	for _, sc := range []api.Scope{api.ScopeRead, api.ScopeWrite, api.ScopeIngest, api.ScopeSecrets} {
		if b, _ := parseScope(sc); s.has(b) {
			names = append(names, string(sc))
		}
	}
	return strings.Join(names, ",")
}

// principal is who a request runs as.
type principal struct {
	name   string
	scopes scopeSet
	// reach limits the clusters it may ingest health reports for; nil:
	// every cluster.
	reach     *reach
	anonymous bool
	// session: authenticated by the dashboard's session cookie, with the
	// name and scopes of the token that made its login code.
	session bool
}

type principalKey struct{}

func withPrincipal(ctx context.Context, p *principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

func principalFrom(ctx context.Context) *principal {
	p, _ := ctx.Value(principalKey{}).(*principal)
	return p
}

// authenticator checks bearer tokens and, through sessions, the
// dashboard's session cookies. Safe for concurrent use; its tokens are
// immutable. Tokens are compared by their SHA-256 digests in constant
// time, against every known token, so neither the token nor which entry
// matched leaks through timing.
type authenticator struct {
	tokens    []tokenEntry
	anonymous bool
	// sessions are the dashboard's login codes and sessions (session.go);
	// nil: no cookie is accepted.
	sessions *sessions
}

type tokenEntry struct {
	name   string
	digest [sha256.Size]byte
	scopes scopeSet
	reach  *reach
}

// newAuthenticator checks every token and reports every problem at once.
func newAuthenticator(tokens []Token, anonymous bool) (*authenticator, error) {
	a := &authenticator{anonymous: anonymous}
	var errs []error
	seen := map[[sha256.Size]byte]string{}
	names := map[string]bool{}
	for i, t := range tokens {
		e, err := t.entry()
		if err != nil {
			errs = append(errs, fmt.Errorf("token %d (%s): %w", i+1, t.label(), err))
			continue
		}
		if other, dup := seen[e.digest]; dup {
			errs = append(errs, fmt.Errorf("token %d (%s): same token as %s", i+1, e.name, other))
			continue
		}
		if names[e.name] {
			errs = append(errs, fmt.Errorf("token %d: duplicate name %q", i+1, e.name))
			continue
		}
		seen[e.digest], names[e.name] = e.name, true
		a.tokens = append(a.tokens, e)
	}
	return a, errors.Join(errs...)
}

func (t Token) label() string {
	if t.Name != "" {
		return t.Name
	}
	return "unnamed"
}

func (t Token) entry() (tokenEntry, error) {
	var e tokenEntry
	switch {
	case strings.HasPrefix(t.Secret, "sha256:"):
		h := strings.TrimPrefix(t.Secret, "sha256:")
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != sha256.Size {
			return e, errors.New("sha256: must be followed by 64 hex digits")
		}
		copy(e.digest[:], b)
	case t.Secret == "":
		return e, errors.New("empty token")
	case strings.ContainsAny(t.Secret, " \t\r\n"):
		return e, errors.New("a token may not contain white space")
	default:
		e.digest = sha256.Sum256([]byte(t.Secret))
	}
	if len(t.Scopes) == 0 {
		return e, errors.New("no scopes")
	}
	for _, s := range t.Scopes {
		b, err := parseScope(s)
		if err != nil {
			return e, err
		}
		e.scopes |= b
	}
	r, err := newReach(t.Clusters, t.ClusterSelector)
	if err != nil {
		return e, err
	}
	e.reach = r
	e.name = t.Name
	if e.name == "" {
		e.name = "sha256:" + hex.EncodeToString(e.digest[:6])
	}
	return e, nil
}

// authenticate returns the request's principal, or a 401 problem (403 for a
// cross-origin request with the session cookie). The Authorization header
// wins; without one, the session cookie authenticates; without either, the
// request is anonymous when anonymous access is enabled. A bad token or an
// ended session is refused either way.
func (a *authenticator) authenticate(r *http.Request) (*principal, *problemError) {
	h := r.Header.Get("Authorization")
	if h == "" {
		if c, err := r.Cookie(SessionCookie); err == nil && a.sessions != nil {
			return a.sessions.authenticateCookie(r, c.Value)
		}
		if a.anonymous {
			return &principal{name: "anonymous", scopes: scopeAnonymous, anonymous: true}, nil
		}
		return nil, unauthorized("", "a bearer token is required: send Authorization: Bearer <token>")
	}
	scheme, tok, _ := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return nil, unauthorized("invalid_request", "the Authorization header must be: Bearer <token>")
	}
	d := sha256.Sum256([]byte(tok))
	match := -1
	for i := range a.tokens {
		if subtle.ConstantTimeCompare(d[:], a.tokens[i].digest[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return nil, unauthorized("invalid_token", "the bearer token is not valid")
	}
	e := a.tokens[match]
	return &principal{name: e.name, scopes: e.scopes, reach: e.reach}, nil
}

func unauthorized(code, detail string) *problemError {
	p := problem(http.StatusUnauthorized, api.ProblemUnauthorized, "Unauthorized", "%s", detail)
	v := `Bearer realm="capn"`
	if code != "" {
		v += `, error="` + code + `"`
	}
	p.header = http.Header{"Www-Authenticate": {v}}
	return p
}

// forbidden is the 403 for a principal that lacks scope.
func forbidden(p *principal, need scopeSet) *problemError {
	return problem(http.StatusForbidden, api.ProblemForbidden, "Forbidden",
		"%s has scopes [%s]; this request needs %s", p.name, p.scopes, need)
}

// rateKey is what a principal's requests are rate limited as: its token's
// name, or for anonymous requests the client's address.
func (p *principal) rateKey(r *http.Request) string {
	if !p.anonymous {
		return "token:" + p.name
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "anonymous:" + host
}

// LoadTokensFile reads a tokens file; see ParseTokens for its format.
func LoadTokensFile(path string) ([]Token, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	defer f.Close()
	toks, err := ParseTokens(f)
	if err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	return toks, nil
}

// ParseTokens reads the tokens file format: one token a line,
//
//	<token> <scope>[,<scope>...] [<name> [clusters=<c>[,<c>...]] [clusterSelector=<selector>]]
//
// where a scope is read, write, ingest, secrets or admin, and <token> is
// the bearer token or sha256:<64 hex digits> of it; clusters and
// clusterSelector (a label selector without spaces, e.g. env=prod,team)
// limit the clusters the token may report health of (Token.Clusters).
// Blank lines and lines starting with # are ignored. Every bad line is
// reported (by number, never echoing a token).
func ParseTokens(r io.Reader) ([]Token, error) {
	var toks []Token
	var errs []error
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) < 2 || len(fields) > 5 {
			errs = append(errs, fmt.Errorf("line %d: want <token> <scopes> [<name> [clusters=...] [clusterSelector=...]], found %d fields", line, len(fields)))
			continue
		}
		t := Token{Secret: fields[0]}
		if len(fields) >= 3 {
			t.Name = fields[2]
		}
		if err := t.parseOptions(fields[min(3, len(fields)):]); err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", line, err))
			continue
		}
		for s := range strings.SplitSeq(fields[1], ",") {
			if s = strings.TrimSpace(s); s != "" {
				t.Scopes = append(t.Scopes, api.Scope(s))
			}
		}
		if _, err := t.entry(); err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", line, err))
			continue
		}
		toks = append(toks, t)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	return toks, errors.Join(errs...)
}

// GenerateToken returns a new random bearer token (32 bytes, hex), for
// example for the admin token `capn dev` prints.
func GenerateToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// HashToken returns the sha256:<hex> form of a token, for a tokens file
// that should not hold it in the clear.
func HashToken(token string) string {
	d := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(d[:])
}
