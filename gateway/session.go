package gateway

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/gateway/api"
)

// The dashboard's login by link: a bearer token mints a one-time code
// (POST /v1/logins, what `capn dashboard` does), the browser exchanges it
// at GET /login?code= for a session cookie, and the cookie then
// authenticates the page's API calls with the minting token's name and
// scopes. Sessions live in the gateway's memory: a gateway restart ends
// them (the page then asks to log in again).
const (
	// LoginCodeTTL is how long a login code may be exchanged.
	LoginCodeTTL = 60 * time.Second
	// SessionTTL is how long a session cookie authenticates.
	SessionTTL = 12 * time.Hour
	// SessionCookie is the session cookie's name.
	SessionCookie = "capn_session"
	// maxGrants bounds the codes and sessions held at once.
	maxGrants = 10000
)

// Routes of the login and session endpoints. loginRoute needs no token (the
// code is the credential).
const (
	loginRoute   = "GET /login"
	loginsRoute  = "POST /v1/logins"
	sessionRoute = "/v1/session"
)

// grant is what a code or a session stands for: the token it was minted
// with, until when.
type grant struct {
	name    string
	scopes  scopeSet
	reach   *reach
	expires time.Time
	used    bool // a code that was exchanged (kept until it expires, to say so)
}

// sessions holds the outstanding login codes and the live sessions, by the
// SHA-256 of their secret. Safe for concurrent use.
type sessions struct {
	now   func() time.Time
	mu    sync.Mutex
	codes map[[sha256.Size]byte]*grant
	live  map[[sha256.Size]byte]*grant
}

func newSessions(now func() time.Time) *sessions {
	return &sessions{now: now, codes: map[[sha256.Size]byte]*grant{}, live: map[[sha256.Size]byte]*grant{}}
}

// Why a login code is refused.
var (
	errCodeUnknown = errors.New("this login link is not one the gateway made (or the gateway restarted since)")
	errCodeUsed    = errors.New("this login link was used already: each link logs in once")
	errCodeExpired = fmt.Errorf("this login link expired: links work for %.0f seconds", LoginCodeTTL.Seconds())
)

// secret returns a new random secret and its digest.
func secret() (string, [sha256.Size]byte, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", [sha256.Size]byte{}, err
	}
	s := base64.RawURLEncoding.EncodeToString(b)
	return s, sha256.Sum256([]byte(s)), nil
}

// purge drops expired codes and sessions; mu is held.
func (s *sessions) purge(now time.Time) {
	for k, g := range s.codes {
		if !now.Before(g.expires) {
			delete(s.codes, k)
		}
	}
	for k, g := range s.live {
		if !now.Before(g.expires) {
			delete(s.live, k)
		}
	}
}

// mint makes a login code for p.
func (s *sessions) mint(p *principal) (string, time.Time, error) {
	code, d, err := secret()
	if err != nil {
		return "", time.Time{}, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purge(now)
	if len(s.codes)+len(s.live) >= maxGrants {
		return "", time.Time{}, unavailable("the gateway holds %d login codes and sessions, its limit; try again when some expire", maxGrants)
	}
	g := &grant{name: p.name, scopes: p.scopes, reach: p.reach, expires: now.Add(LoginCodeTTL)}
	s.codes[d] = g
	return code, g.expires, nil
}

// exchange spends a login code and returns a new session's secret and
// grant.
func (s *sessions) exchange(code string) (string, *grant, error) {
	id, sd, err := secret()
	if err != nil {
		return "", nil, err
	}
	cd := sha256.Sum256([]byte(code))
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.codes[cd]
	switch {
	case !ok:
		return "", nil, errCodeUnknown
	case c.used:
		return "", nil, errCodeUsed
	case !now.Before(c.expires):
		delete(s.codes, cd)
		return "", nil, errCodeExpired
	}
	c.used = true
	g := &grant{name: c.name, scopes: c.scopes, reach: c.reach, expires: now.Add(SessionTTL)}
	s.live[sd] = g
	return id, g, nil
}

// lookup returns the live session of a cookie's value, or nil.
func (s *sessions) lookup(id string) *grant {
	d := sha256.Sum256([]byte(id))
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.live[d]
	if !ok {
		return nil
	}
	if !now.Before(g.expires) {
		delete(s.live, d)
		return nil
	}
	return g
}

// end logs a session out.
func (s *sessions) end(id string) {
	d := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.live, d)
}

// authenticateCookie is authenticate for a request that sent the session
// cookie and no Authorization header. A request that changes state must
// come from the gateway's own origin (CSRF: SameSite=Strict keeps other
// sites' requests from carrying the cookie in current browsers; the Origin
// check covers the rest).
func (s *sessions) authenticateCookie(r *http.Request, id string) (*principal, *problemError) {
	g := s.lookup(id)
	if g == nil {
		p := unauthorized("invalid_token", "the dashboard session ended (expired, logged out, or the gateway restarted): run capn dashboard for a new login link, or paste a token")
		p.header.Add("Set-Cookie", clearSessionCookie(r).String())
		return nil, p
	}
	if changesState(r) {
		if err := sameOrigin(r); err != nil {
			return nil, problem(http.StatusForbidden, api.ProblemForbidden, "Forbidden", "%v", err)
		}
	}
	return &principal{name: g.name, scopes: g.scopes, reach: g.reach, session: true}, nil
}

// secure tells whether the browser reached the gateway over TLS (directly,
// or through a proxy that says so).
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func sessionCookie(r *http.Request, id string, expires time.Time) *http.Cookie {
	return &http.Cookie{
		Name: SessionCookie, Value: id, Path: "/",
		Expires: expires, MaxAge: int(SessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r),
	}
}

func clearSessionCookie(r *http.Request) *http.Cookie {
	return &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)}
}

// createLogin is POST /v1/logins: a one-time login code for the calling
// token. It needs a bearer token: not anonymous access (which needs no
// login) and not a session (so that a session cannot outlive itself).
func (s *server) createLogin(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	switch {
	case p.anonymous:
		return problem(http.StatusForbidden, api.ProblemForbidden, "Forbidden", "a login link is made with a bearer token; anonymous access needs no login")
	case p.session:
		return problem(http.StatusForbidden, api.ProblemForbidden, "Forbidden", "a login link is made with a bearer token, not with a dashboard session")
	}
	code, expires, err := s.auth.sessions.mint(p)
	if err != nil {
		return err
	}
	zerolog.Ctx(r.Context()).Info().Time("expires", expires).Msg("login code made")
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, api.Login{Code: code, Path: "/login?code=" + url.QueryEscape(code), ExpiresAt: expires.UTC()})
	return nil
}

// getSession is GET /v1/session: who the caller is.
func (s *server) getSession(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	out := api.Session{Principal: p.name, Via: "token"}
	for _, sc := range strings.Split(p.scopes.String(), ",") {
		if sc != "" {
			out.Scopes = append(out.Scopes, api.Scope(sc))
		}
	}
	switch {
	case p.anonymous:
		out.Via = "anonymous"
	case p.session:
		out.Via = "session"
		if c, err := r.Cookie(SessionCookie); err == nil {
			if g := s.auth.sessions.lookup(c.Value); g != nil {
				t := g.expires.UTC()
				out.ExpiresAt = &t
			}
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteSession is DELETE /v1/session: log out. It ends the cookie's
// session, if any, and clears the cookie.
func (s *server) deleteSession(w http.ResponseWriter, r *http.Request) error {
	if c, err := r.Cookie(SessionCookie); err == nil {
		s.auth.sessions.end(c.Value)
	}
	http.SetCookie(w, clearSessionCookie(r))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// login is GET /login?code=: it spends the code, sets the session cookie
// and sends the browser to the dashboard; a bad code gets a 401 page that
// says why.
func (s *server) login(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	if r.Method == http.MethodHead { // a link preview must not spend the code
		w.WriteHeader(http.StatusOK)
		return
	}
	code := r.URL.Query().Get("code")
	if code == "" {
		loginRefused(w, errors.New("this login link has no code: make one with capn dashboard"))
		return
	}
	id, g, err := s.auth.sessions.exchange(code)
	if err != nil {
		zerolog.Ctx(r.Context()).Info().Err(err).Msg("login code refused")
		loginRefused(w, err)
		return
	}
	zerolog.Ctx(r.Context()).Info().Str("principal", g.name).Time("expires", g.expires).Msg("dashboard session started")
	http.SetCookie(w, sessionCookie(r, id, g.expires))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

var loginRefusedPage = template.Must(template.New("").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>capn: login link refused</title></head>
<body style="font: 1rem/1.5 system-ui, sans-serif; max-width: 40rem; margin: 3rem auto; padding: 0 1rem">
<h1>Login link refused</h1>
<p>{{.}}.</p>
<p>Run <code>capn dashboard</code> for a new link, or open <a href="/">the dashboard</a> and paste a token.</p>
</body></html>
`))

// loginRefused writes the 401 page of a login link that does not work.
func loginRefused(w http.ResponseWriter, why error) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; frame-ancestors 'none'")
	w.WriteHeader(http.StatusUnauthorized)
	msg := why.Error()
	_ = loginRefusedPage.Execute(w, strings.ToUpper(msg[:1])+msg[1:])
}
