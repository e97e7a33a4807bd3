package security

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/services/daemon"
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

// TestOpsEndpointsDefaultToLoopback (finding 10): a standalone service's
// unauthenticated /metrics listened on every interface (:8081), and the
// rendered nats.conf served monitoring on 0.0.0.0:8222 without
// authentication. Both now bind loopback; docker-compose.yaml, whose
// containers must bind their interface, says so explicitly.
func TestOpsEndpointsDefaultToLoopback(t *testing.T) {
	if got := (daemon.Config{}).WithDefaults().HTTPAddr; got != "127.0.0.1:8081" {
		t.Errorf("default --http-addr %q, want 127.0.0.1:8081", got)
	}

	dir := t.TempDir()
	d := natsconfig.Compose()
	if _, err := natsconfig.Render(d, dir); err != nil {
		t.Fatal(err)
	}
	for _, s := range d.Servers {
		b, err := os.ReadFile(filepath.Join(dir, "nats", s.Name, natsconfig.ServerConfigFile))
		if err != nil {
			t.Fatal(err)
		}
		conf := string(b)
		if !strings.Contains(conf, `http: "127.0.0.1:8222"`) || strings.Contains(conf, "0.0.0.0:8222") {
			t.Errorf("%s: monitoring is not on loopback only:\n%s", s.Name, conf)
		}
		if !strings.Contains(conf, `listen: "0.0.0.0:4222"`) {
			t.Errorf("%s: the client port no longer binds the container's interface:\n%s", s.Name, conf)
		}
	}

	b, err := os.ReadFile("../../docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image       string            `json:"image"`
			Environment map[string]string `json:"environment"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	for name, s := range compose.Services {
		if strings.HasPrefix(name, "nats-") || name == "capn-init" {
			continue // not capn services: no ops endpoint
		}
		if got := s.Environment["CAPN_HTTP_ADDR"]; got != "0.0.0.0:8081" {
			t.Errorf("compose service %s: CAPN_HTTP_ADDR %q, want 0.0.0.0:8081 (its container's interface)", name, got)
		}
	}
}
