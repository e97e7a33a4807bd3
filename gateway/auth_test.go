package gateway

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/services/daemon"
)

func TestParseTokens(t *testing.T) {
	hashed := HashToken("hashed-secret")
	in := `# capn gateway tokens
admin-secret   admin           alice
` + hashed + `   read,write   ci

reader-secret  read
`
	toks, err := ParseTokens(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	a, err := newAuthenticator(toks, false)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		header string
		name   string
		scopes string
		status int
	}{
		{"Bearer admin-secret", "alice", "read,write,ingest,secrets", 0},
		{"bearer hashed-secret", "ci", "read,write", 0},
		{"Bearer reader-secret", "sha256:", "read", 0},
		{"Bearer " + hashed, "", "", 401}, // the hash is not the token
		{"Bearer nope", "", "", 401},
		{"Basic YTpi", "", "", 401},
		{"Bearer", "", "", 401},
		{"", "", "", 401},
	}
	for _, tt := range tests {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		if tt.header != "" {
			r.Header.Set("Authorization", tt.header)
		}
		p, perr := a.authenticate(r)
		if tt.status != 0 {
			if perr == nil || perr.Status != tt.status || perr.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%q: %v, want %d with WWW-Authenticate", tt.header, perr, tt.status)
			}
			continue
		}
		if perr != nil || !strings.HasPrefix(p.name, tt.name) || p.scopes.String() != tt.scopes {
			t.Errorf("%q: %+v %v, want %s [%s]", tt.header, p, perr, tt.name, tt.scopes)
		}
	}

	bad := "ok-token read\n" +
		"only-a-token\n" +
		"t2 read,root\n" +
		"sha256:abc write\n" +
		"t3 read x y\n"
	_, err = ParseTokens(strings.NewReader(bad))
	for _, want := range []string{"line 2: want <token> <scopes>", `line 3: unknown scope "root"`, "line 4: sha256: must be followed by 64 hex digits", "line 5:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "ok-token") {
		t.Error("a token leaked into the error")
	}
	if _, err := newAuthenticator([]Token{{Secret: "x", Scopes: []api.Scope{api.ScopeRead}}, {Secret: "x", Scopes: []api.Scope{api.ScopeWrite}}}, false); err == nil {
		t.Error("the same token twice was accepted")
	}
}

func TestServiceValidate(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tokens")
	if err := os.WriteFile(good, []byte("s3cret admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badFile := filepath.Join(dir, "bad")
	if err := os.WriteFile(badFile, []byte("s3cret superuser\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CAPN_SECRETS_KEY", "")
	os.Unsetenv("CAPN_SECRETS_KEY")
	tests := []struct {
		name string
		opts Options
		want []string
	}{
		{name: "tokens file", opts: Options{TokensFile: good}},
		{name: "anonymous", opts: Options{AllowAnonymous: true}},
		{name: "nothing to authenticate with", opts: Options{}, want: []string{"--tokens-file", "no way to authenticate"}},
		{name: "bad tokens file", opts: Options{TokensFile: badFile}, want: []string{`unknown scope "superuser"`}},
		{name: "missing tokens file", opts: Options{TokensFile: filepath.Join(dir, "none")}, want: []string{"no such file"}},
		{name: "bad address", opts: Options{AllowAnonymous: true, Addr: "localhost"}, want: []string{"--addr"}},
		{name: "bad key file", opts: Options{AllowAnonymous: true, SecretsKeyFile: good}, want: []string{"--secrets-key-file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := New(tt.opts).Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			msg := strings.Join(daemon.Problems(err), "\n")
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("problems %q lack %q", msg, w)
				}
			}
			if strings.Contains(msg, "s3cret") {
				t.Error("a token leaked into the problems")
			}
		})
	}
}

func TestAnonymous(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.AllowAnonymous = true })
	if r := e.do(http.MethodPost, "/v1/clusters", "", demoYAML); r.status != http.StatusCreated {
		t.Fatalf("anonymous apply: %d %s", r.status, r.body)
	}
	if r := e.do(http.MethodGet, "/v1/clusters/demo", "", nil); r.status != http.StatusOK {
		t.Errorf("anonymous get: %d", r.status)
	}
	e.do(http.MethodGet, "/v1/clusters/demo/kubeconfig", "", nil).wantProblem(t, http.StatusForbidden)
	// A bad token is refused even when anonymous access is on.
	e.do(http.MethodGet, "/v1/clusters/demo", "wrong", nil).wantProblem(t, http.StatusUnauthorized)
}

func TestRateLimit(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.RateLimit, o.RateBurst = 0.5, 2 })
	for i := range 2 {
		if r := e.do(http.MethodGet, "/v1/clusters", tokRead, nil); r.status != http.StatusOK {
			t.Fatalf("request %d: %d", i, r.status)
		}
	}
	r := e.do(http.MethodGet, "/v1/clusters", tokRead, nil)
	r.wantProblem(t, http.StatusTooManyRequests)
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 || s > 2 {
		t.Errorf("Retry-After %q", r.header.Get("Retry-After"))
	}
	// Another token has its own bucket; /healthz is not limited.
	if r := e.do(http.MethodGet, "/v1/clusters", tokAdmin, nil); r.status != http.StatusOK {
		t.Errorf("other token: %d", r.status)
	}
	for range 3 {
		if r := e.do(http.MethodGet, "/healthz", "", nil); r.status != http.StatusOK {
			t.Errorf("healthz: %d", r.status)
		}
	}
}

func TestRoutes(t *testing.T) {
	e := newEnv(t)
	if r := e.do(http.MethodGet, "/healthz", "", nil); r.status != http.StatusOK || !strings.Contains(string(r.body), `"ok"`) {
		t.Errorf("healthz: %d %s", r.status, r.body)
	}
	e.do(http.MethodGet, "/v2/clusters", tokRead, nil).wantProblem(t, http.StatusNotFound)
	e.do(http.MethodGet, "/v2/clusters", "", nil).wantProblem(t, http.StatusUnauthorized) // no probing without a token
	r := e.do(http.MethodPatch, "/v1/clusters/demo", tokAdmin, nil)
	r.wantProblem(t, http.StatusMethodNotAllowed)
	if allow := r.header.Get("Allow"); allow != "GET, PUT, DELETE" {
		t.Errorf("Allow %q", allow)
	}
	e.do(http.MethodGet, "/v1/clusters/a/b/c", tokRead, nil).wantProblem(t, http.StatusNotFound)
	e.do(http.MethodGet, "/v1/clusters/demo", tokRead, "x").wantProblem(t, http.StatusNotFound) // a small body is tolerated
	e.do(http.MethodGet, "/v1/clusters", tokRead, strings.Repeat("x", 5<<10)).wantProblem(t, http.StatusRequestEntityTooLarge)
}
