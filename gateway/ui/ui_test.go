package ui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	h := Handler()
	for _, tc := range []struct {
		path, wantType, wantBody string
		wantCode                 int
	}{
		{"/", "text/html", "<title>capn", 200},
		{"/ui/", "text/html", "<title>capn", 200},
		{"/ui/app.js", "javascript", "/v1/watch", 200},
		{"/ui/style.css", "text/css", "--fg", 200},
		{"/ui/nope.js", "", "", 404},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		if rec.Code != tc.wantCode {
			t.Errorf("%s: status %d, want %d", tc.path, rec.Code, tc.wantCode)
			continue
		}
		if tc.wantCode != 200 {
			continue
		}
		if ct := rec.Header().Get("Content-Type"); !strings.Contains(ct, tc.wantType) {
			t.Errorf("%s: Content-Type %q, want %q", tc.path, ct, tc.wantType)
		}
		if !strings.Contains(rec.Body.String(), tc.wantBody) {
			t.Errorf("%s: body lacks %q", tc.path, tc.wantBody)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("%s: CSP %q", tc.path, csp)
		}
	}
}
