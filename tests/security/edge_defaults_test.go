package security

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/gateway"
)

// TestSlowBodyIs408 (finding 10): a body that does not arrive within the
// read timeout was answered 500 and logged as the gateway's fault; it is
// the client's: 408.
func TestSlowBodyIs408(t *testing.T) {
	g := startEdgeGateway(t, func(o *gateway.Options) { o.ReadTimeout = time.Second })
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Headers and 10 of the 1,000 bytes announced, then nothing.
	if _, err := conn.Write([]byte("POST /v1/clusters HTTP/1.1\r\nHost: " + strings.TrimPrefix(g.url, "http://") +
		"\r\nAuthorization: Bearer " + edgeAdmin + "\r\nContent-Type: application/yaml\r\nContent-Length: 1000\r\n\r\napiVersion")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("slow body: %d, want 408", res.StatusCode)
	}
}

// TestFailedAuthenticationsAreLimited (finding 10): guessing tokens was
// never slowed down. Failed authentications are now limited per client
// address before any token is compared: past the burst, 429 with
// Retry-After, even for a token that would be right.
func TestFailedAuthenticationsAreLimited(t *testing.T) {
	g := startEdgeGateway(t)
	limited := 0
	for i := range 3 * gateway.DefaultAuthFailureBurst {
		r := g.do(http.MethodGet, "/v1/clusters", "guess-"+strings.Repeat("x", i), "")
		switch r.status {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			if r.header.Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
			limited++
		default:
			t.Fatalf("guess %d: %d %s", i, r.status, r.body)
		}
	}
	if limited < gateway.DefaultAuthFailureBurst {
		t.Fatalf("%d of %d guesses were limited, want at least %d", limited, 3*gateway.DefaultAuthFailureBurst, gateway.DefaultAuthFailureBurst)
	}
	g.do(http.MethodGet, "/v1/clusters", edgeRead, "").problem(t, http.StatusTooManyRequests)
}
