// Package ui is the dashboard: static HTML, CSS and JavaScript embedded in
// the gateway's binary and served without a build step. The files hold no
// secret, so the gateway serves them without a token. The page's API calls
// authenticate with the session cookie of a login link (`capn dashboard`)
// or with a pasted token, which it keeps in localStorage and sends as
// Authorization.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var files embed.FS

// Prefix is where the static files are served; the page itself is at "/"
// too.
const Prefix = "/ui/"

// Handler serves the dashboard: index.html at "/" and "/ui/", the other
// files under /ui/. Only GET and HEAD are expected (the gateway routes only
// those here).
func Handler() http.Handler {
	static, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embedded tree always has static/
	}
	fileServer := http.StripPrefix(strings.TrimSuffix(Prefix, "/"), http.FileServerFS(static))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if r.URL.Path == "/" || r.URL.Path == Prefix {
			http.ServeFileFS(w, r, static, "index.html")
			return
		}
		fileServer.ServeHTTP(w, r)
	})
}
