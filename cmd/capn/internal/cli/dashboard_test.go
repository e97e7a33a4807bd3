package cli

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// TestDashboardLoginLink runs capn dashboard against capn dev: it prints a
// one-time link that logs a browser in once, and opens it unless
// --no-open.
func TestDashboardLoginLink(t *testing.T) {
	dev := startDev(t, t.TempDir())
	vars := map[string]string{envServer: dev.gatewayURL, envToken: dev.token, "DISPLAY": ":0"}
	var opened []string
	orig := openBrowser
	t.Cleanup(func() { openBrowser = orig })
	openBrowser = func(_ context.Context, _ func(string) (string, bool), url string) error {
		opened = append(opened, url)
		return errors.New("no browser in tests")
	}

	dashboard := func(args ...string) string {
		t.Helper()
		e, stdout, stderr := testEnv(vars)
		if code := run(context.Background(), e, append([]string{"dashboard"}, args...)); code != 0 {
			t.Fatalf("capn dashboard %v: exit %d\n%s", args, code, stderr)
		}
		if !strings.Contains(stderr.String(), "login link for the dashboard at "+dev.gatewayURL+" (works once, until ") {
			t.Errorf("stderr %q", stderr)
		}
		link := strings.TrimSpace(stdout.String())
		if !strings.HasPrefix(link, dev.gatewayURL+"/login?code=") {
			t.Fatalf("stdout %q, want the login link", link)
		}
		return link
	}
	link := dashboard("--no-open")
	if len(opened) != 0 {
		t.Errorf("--no-open opened %v", opened)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	visit := func(u string) *http.Response {
		t.Helper()
		res, err := noRedirect.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if res := visit(link); res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 || !res.Cookies()[0].HttpOnly {
		t.Fatalf("first visit: %d, cookies %v", res.StatusCode, res.Header["Set-Cookie"])
	}
	if res := visit(link); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("second visit: %d, want 401", res.StatusCode)
	}

	// Without --no-open it opens the link, and says so when it cannot.
	e, _, stderr := testEnv(vars)
	if code := run(context.Background(), e, []string{"dashboard"}); code != 0 || len(opened) != 1 || !strings.Contains(opened[0], "/login?code=") {
		t.Fatalf("exit %d, opened %v", code, opened)
	}
	if !strings.Contains(stderr.String(), "could not open a browser (no browser in tests): open the link above yourself") {
		t.Errorf("stderr %q", stderr)
	}
}

func TestBrowserCommand(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	if _, err := browserCommand("linux", none); err == nil || !strings.Contains(err.Error(), "no DISPLAY") {
		t.Errorf("linux without a display: %v", err)
	}
	if _, err := browserCommand("windows", none); err == nil {
		t.Error("windows: no error")
	}
}
