package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capn-dev/capn/gateway/api"
)

// clock is a settable Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newClockEnv(t *testing.T) (*env, *clock) {
	c := &clock{t: time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)}
	return newEnv(t, func(o *Options) { o.Now = c.now }), c
}

// mintLogin makes a login code with token.
func (e *env) mintLogin(token string) api.Login {
	e.t.Helper()
	r := e.do(http.MethodPost, "/v1/logins", token, nil)
	if r.status != http.StatusCreated {
		e.t.Fatalf("POST /v1/logins: %d %s", r.status, r.body)
	}
	var l api.Login
	if err := json.Unmarshal(r.body, &l); err != nil {
		e.t.Fatal(err)
	}
	if l.Code == "" || l.Path != "/login?code="+l.Code || l.ExpiresAt.IsZero() {
		e.t.Fatalf("login %+v", l)
	}
	return l
}

// visit GETs path like a browser without following redirects; hdr are
// name, value pairs.
func (e *env) visit(path string, hdr ...string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.url+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := hc.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// login exchanges a fresh code of token for the session cookie.
func (e *env) login(token string) *http.Cookie {
	e.t.Helper()
	res, body := e.visit(e.mintLogin(token).Path)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/" {
		e.t.Fatalf("login: %d Location %q, want 303 to /; %s", res.StatusCode, res.Header.Get("Location"), body)
	}
	for _, c := range res.Cookies() {
		if c.Name == SessionCookie {
			return c
		}
	}
	e.t.Fatalf("login set no %s cookie: %v", SessionCookie, res.Header["Set-Cookie"])
	return nil
}

// withCookie sends a request with the session cookie and no token; hdr as
// for do.
func (e *env) withCookie(method, path string, c *http.Cookie, body any, hdr ...string) resp {
	e.t.Helper()
	return e.do(method, path, "", body, append([]string{"Cookie", c.Name + "=" + c.Value}, hdr...)...)
}

func TestLoginLinkSetsSessionCookie(t *testing.T) {
	e, clk := newClockEnv(t)
	l := e.mintLogin(tokAdmin)
	if want := clk.now().Add(LoginCodeTTL); !l.ExpiresAt.Equal(want) {
		t.Errorf("expiresAt %s, want %s", l.ExpiresAt, want)
	}
	// A HEAD (a link preview) does not spend the code.
	req, _ := http.NewRequest(http.MethodHead, e.url+l.Path, nil)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("HEAD %s: %v %v", l.Path, res, err)
	}
	res, _ := e.visit(l.Path)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/" {
		t.Fatalf("login: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	set := strings.Join(res.Header["Set-Cookie"], "\n")
	for _, want := range []string{SessionCookie + "=", "Path=/", "HttpOnly", "SameSite=Strict", "Max-Age=43200"} {
		if !strings.Contains(set, want) {
			t.Errorf("Set-Cookie %q lacks %s", set, want)
		}
	}
	if strings.Contains(set, "Secure") {
		t.Errorf("Set-Cookie %q over plain http is Secure: the browser would drop it", set)
	}
	if cc := res.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q", cc)
	}
	c := res.Cookies()[0]

	// The cookie authenticates reads as the token that made the code.
	if r := e.withCookie(http.MethodGet, "/v1/clusters", c, nil); r.status != http.StatusOK {
		t.Fatalf("GET /v1/clusters with the cookie: %d %s", r.status, r.body)
	}
	r := e.withCookie(http.MethodGet, "/v1/session", c, nil)
	var s api.Session
	if err := json.Unmarshal(r.body, &s); err != nil || r.status != 200 {
		t.Fatalf("GET /v1/session: %d %s", r.status, r.body)
	}
	if s.Principal != "admin" || s.Via != "session" || len(s.Scopes) != 4 || s.ExpiresAt == nil {
		t.Errorf("session %+v", s)
	}
	// Same-origin writes pass the CSRF check (the cluster does not exist).
	e.withCookie(http.MethodPost, "/v1/clusters/nope/pause", c, "{}", "Origin", e.url, "Sec-Fetch-Site", "same-origin").wantProblem(t, http.StatusNotFound)

	// Behind a TLS proxy the cookie is Secure.
	res, _ = e.visit(e.mintLogin(tokAdmin).Path, "X-Forwarded-Proto", "https")
	if set := strings.Join(res.Header["Set-Cookie"], "\n"); !strings.Contains(set, "Secure") {
		t.Errorf("Set-Cookie %q over https lacks Secure", set)
	}
}

func TestLoginCodeRefused(t *testing.T) {
	e, clk := newClockEnv(t)
	used := e.mintLogin(tokAdmin)
	e.visit(used.Path)
	expired := e.mintLogin(tokAdmin)
	clk.add(LoginCodeTTL)
	for _, tc := range []struct{ name, path, want string }{
		{"reused", used.Path, "used already"},
		{"expired", expired.Path, "expired"},
		{"unknown", "/login?code=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "not one the gateway made"},
		{"none", "/login", "no code"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body := e.visit(tc.path)
			if res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401; %s", res.StatusCode, body)
			}
			if len(res.Cookies()) != 0 {
				t.Errorf("a refused code set cookies %v", res.Header["Set-Cookie"])
			}
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
				t.Errorf("Content-Type %q, want a page", ct)
			}
			for _, want := range []string{tc.want, "capn dashboard"} {
				if !strings.Contains(body, want) {
					t.Errorf("page lacks %q: %s", want, body)
				}
			}
		})
	}
}

func TestSessionCookieScopesAndCSRF(t *testing.T) {
	e, clk := newClockEnv(t)
	admin := e.login(tokAdmin)
	reader := e.login(tokRead)
	manifest := "apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: demo}\n"

	// A read token's session reads but cannot write.
	if r := e.withCookie(http.MethodGet, "/v1/clusters", reader, nil); r.status != 200 {
		t.Fatalf("reader's session GET: %d %s", r.status, r.body)
	}
	p := e.withCookie(http.MethodPost, "/v1/clusters", reader, manifest, "Origin", e.url, "Content-Type", "application/yaml").wantProblem(t, http.StatusForbidden)
	if !strings.Contains(p.Detail, "reader has scopes [read]") {
		t.Errorf("detail %q", p.Detail)
	}

	// Cross-origin, or no Origin at all: refused before the route runs.
	for _, hdr := range [][]string{
		{"Origin", "http://evil.example"},
		{"Origin", "null"},
		{"Origin", e.url, "Sec-Fetch-Site", "cross-site"},
		nil,
	} {
		p := e.withCookie(http.MethodPost, "/v1/clusters/demo/pause", admin, "{}", hdr...).wantProblem(t, http.StatusForbidden)
		if !strings.Contains(p.Detail, "Origin") && !strings.Contains(p.Detail, "cross-origin") {
			t.Errorf("%v: detail %q", hdr, p.Detail)
		}
	}
	e.withCookie(http.MethodDelete, "/v1/clusters/demo", admin, nil, "Origin", "http://evil.example").wantProblem(t, http.StatusForbidden)
	// A bearer token needs no Origin (scripts, the CLI).
	e.do(http.MethodPost, "/v1/clusters/demo/pause", tokAdmin, "{}").wantProblem(t, http.StatusNotFound)

	// A session cannot mint codes (it would never end).
	e.withCookie(http.MethodPost, "/v1/logins", admin, nil, "Origin", e.url).wantProblem(t, http.StatusForbidden)

	// Logout ends the session and clears the cookie.
	r := e.withCookie(http.MethodDelete, "/v1/session", reader, nil, "Origin", e.url)
	if r.status != http.StatusNoContent || !strings.Contains(strings.Join(r.header["Set-Cookie"], ""), "Max-Age=0") {
		t.Fatalf("logout: %d %v", r.status, r.header["Set-Cookie"])
	}
	e.withCookie(http.MethodGet, "/v1/clusters", reader, nil).wantProblem(t, http.StatusUnauthorized)

	// A session ends after SessionTTL; the 401 clears the cookie.
	if r := e.withCookie(http.MethodGet, "/v1/clusters", admin, nil); r.status != 200 {
		t.Fatalf("admin session: %d", r.status)
	}
	clk.add(SessionTTL)
	r = e.withCookie(http.MethodGet, "/v1/clusters", admin, nil)
	r.wantProblem(t, http.StatusUnauthorized)
	if set := strings.Join(r.header["Set-Cookie"], ""); !strings.Contains(set, SessionCookie+"=;") || !strings.Contains(set, "Max-Age=0") {
		t.Errorf("expired session's 401 does not clear the cookie: %q", set)
	}
}

func TestLoginNeedsToken(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.AllowAnonymous = true })
	e.do(http.MethodPost, "/v1/logins", "", nil).wantProblem(t, http.StatusForbidden)
	e.do(http.MethodPost, "/v1/logins", "wrong-token", nil).wantProblem(t, http.StatusUnauthorized)
	r := e.do(http.MethodGet, "/v1/session", "", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"via":"anonymous"`) {
		t.Errorf("anonymous session: %d %s", r.status, r.body)
	}
}
