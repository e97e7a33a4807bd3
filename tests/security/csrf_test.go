package security

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/gateway/api"
)

const csrfManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata: {name: pwned}
spec:
  kubernetesVersion: v1.34.2
  controlPlane: {provider: sim, replicas: 1}
`

// TestCSRFAndDNSRebinding (finding 9): against a gateway with
// --insecure-allow-anonymous on loopback, what a page elsewhere can make
// a browser send — a cross-origin text/plain or form POST (no preflight),
// or any request once its DNS name is rebound to 127.0.0.1 — changes and
// reads nothing, while scripts, the CLI's content types and every
// CloudEvents mode keep working.
func TestCSRFAndDNSRebinding(t *testing.T) {
	g := startEdgeGateway(t, func(o *gateway.Options) { o.AllowAnonymous = true })
	u, err := url.Parse(g.url)
	if err != nil {
		t.Fatal(err)
	}
	evil := "http://evil.example"
	rebound := "evil.example:" + u.Port()

	refused := []struct {
		name   string
		method string
		path   string
		body   string
		status int
		hdr    []string
	}{
		{"cross-origin text/plain manifest", http.MethodPost, "/v1/clusters", csrfManifest, http.StatusForbidden,
			[]string{"Content-Type", "text/plain;charset=UTF-8", "Origin", evil, "Sec-Fetch-Site", "cross-site"}},
		{"cross-origin form manifest", http.MethodPost, "/v1/clusters", csrfManifest, http.StatusForbidden,
			[]string{"Content-Type", "application/x-www-form-urlencoded", "Origin", evil}},
		{"cross-origin YAML manifest", http.MethodPost, "/v1/clusters", csrfManifest, http.StatusForbidden,
			[]string{"Content-Type", api.MediaYAML, "Origin", evil}},
		{"cross-origin delete", http.MethodDelete, "/v1/clusters/pwned", "", http.StatusForbidden, []string{"Origin", "null"}},
		{"text/plain manifest without Origin", http.MethodPost, "/v1/clusters", csrfManifest, http.StatusUnsupportedMediaType,
			[]string{"Content-Type", "text/plain"}},
		{"form manifest without Origin", http.MethodPost, "/v1/clusters", csrfManifest, http.StatusUnsupportedMediaType,
			[]string{"Content-Type", "application/x-www-form-urlencoded"}},
		{"multipart manifest", http.MethodPut, "/v1/clusters/pwned", csrfManifest, http.StatusUnsupportedMediaType,
			[]string{"Content-Type", "multipart/form-data; boundary=x"}},
		{"text/plain scale", http.MethodPost, "/v1/clusters/pwned/scale", `{"pool":"md-0","replicas":9}`, http.StatusUnsupportedMediaType,
			[]string{"Content-Type", "text/plain"}},
		{"rebound read", http.MethodGet, "/v1/clusters", "", http.StatusMisdirectedRequest, []string{"Host", rebound}},
		{"rebound same-origin write", http.MethodPost, "/v1/clusters", csrfManifest, http.StatusMisdirectedRequest,
			[]string{"Host", rebound, "Origin", "http://" + rebound, "Content-Type", api.MediaYAML}},
		{"rebound dashboard", http.MethodGet, "/", "", http.StatusMisdirectedRequest, []string{"Host", rebound}},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			p := g.do(tt.method, tt.path, "", tt.body, tt.hdr...).problem(t, tt.status)
			if tt.status == http.StatusUnsupportedMediaType && !strings.Contains(p.Detail, api.MediaYAML) {
				t.Errorf("the 415 does not name the allowed types: %s", p.Detail)
			}
		})
	}
	if r := g.do(http.MethodGet, "/v1/clusters/pwned", "", ""); r.status != http.StatusNotFound {
		t.Fatalf("a refused request created the cluster: GET is %d %s", r.status, r.body)
	}

	// What legitimate clients send keeps working.
	if r := g.do(http.MethodPost, "/v1/clusters", "", csrfManifest, "Content-Type", api.MediaYAML); r.status != http.StatusCreated {
		t.Fatalf("YAML apply from a script: %d %s", r.status, r.body)
	}
	if r := g.do(http.MethodPost, "/v1/clusters/pwned/pause", "", `{}`, "Content-Type", api.MediaJSON, "Origin", g.url,
		"Sec-Fetch-Site", "same-origin"); r.status != http.StatusOK {
		t.Fatalf("same-origin pause from the dashboard: %d %s", r.status, r.body)
	}
	if r := g.do(http.MethodGet, "/v1/clusters", "", "", "Host", "localhost:"+u.Port()); r.status != http.StatusOK {
		t.Fatalf("Host localhost: %d %s", r.status, r.body)
	}
	ce := func(hdr ...string) {
		t.Helper()
		if r := g.do(http.MethodPost, "/v1/events", edgeIngest, hdr[len(hdr)-1], hdr[:len(hdr)-1]...); r.status != http.StatusAccepted {
			t.Errorf("CloudEvents %v: %d %s", hdr, r.status, r.body)
		}
	}
	ce("Ce-Specversion", "1.0", "Ce-Id", "b-1", "Ce-Source", "s", "Ce-Type", "com.example.t", "Content-Type", "text/plain", "binary text/plain")
	ce("Ce-Specversion", "1.0", "Ce-Id", "b-2", "Ce-Source", "s", "Ce-Type", "com.example.t", "Content-Type", "application/octet-stream", "\x00\x01")
	ce("Content-Type", api.MediaCloudEvent, `{"specversion":"1.0","id":"s-1","source":"s","type":"com.example.t"}`)
	ce("Content-Type", api.MediaCloudBatch, `[{"specversion":"1.0","id":"s-2","source":"s","type":"com.example.t"}]`)
}
