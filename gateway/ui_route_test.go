package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// The dashboard's static files need no token; everything else still does.
func TestDashboardRoutes(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		method, path string
		want         int
		body         string
	}{
		{http.MethodGet, "/", http.StatusOK, "<title>capn"},
		{http.MethodHead, "/", http.StatusOK, ""},
		{http.MethodGet, "/ui/", http.StatusOK, "<title>capn"},
		{http.MethodGet, "/ui/app.js", http.StatusOK, "/v1/watch"},
		{http.MethodGet, "/ui/missing.js", http.StatusNotFound, ""},
		{http.MethodPost, "/", http.StatusUnauthorized, ""},
		{http.MethodGet, "/nope", http.StatusUnauthorized, ""},
		{http.MethodGet, "/v1/clusters", http.StatusUnauthorized, ""},
	} {
		r := e.do(tc.method, tc.path, "", nil)
		if r.status != tc.want {
			t.Errorf("%s %s without a token: %d, want %d", tc.method, tc.path, r.status, tc.want)
			continue
		}
		if tc.body != "" && !strings.Contains(string(r.body), tc.body) {
			t.Errorf("%s %s: body lacks %q", tc.method, tc.path, tc.body)
		}
		if tc.want == http.StatusOK && !strings.Contains(r.header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("%s %s: no CSP", tc.method, tc.path)
		}
	}
}
