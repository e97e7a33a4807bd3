package security

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// credsSystem runs the core services and a small cluster on the sim
// provider (one control-plane machine, one worker) and a second gateway
// that knows only a read token, which it returns with the gateway's URL.
func credsSystem(t *testing.T, o harness.Options) (sys *harness.System, readURL, readToken string) {
	t.Helper()
	if testing.Short() {
		t.Skip("attack against real processes: skipped with -short")
	}
	sys = harness.New(t, o)
	sys.StartAll(harness.Core...)
	token, err := gateway.GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gw := gateway.New(gateway.Options{Listener: ln, Keyring: sys.Ring,
		Tokens: []gateway.Token{{Name: "reader", Secret: token, Scopes: []api.Scope{api.ScopeRead}}}})
	sys.StartService("gateway-read", gw)
	natstest.WaitFor(t, 30*time.Second, "the read gateway listens", func() bool { return gw.URL() != "" })
	return sys, gw.URL(), token
}

// readGET is GET path with the read token; it fails the test unless 200.
func readGET(t *testing.T, url, token, path string) []byte {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return b
}

// publicChecksum is what a read token sees of a machine's bootstrap data:
// status.bootstrapDataChecksum of GET …/machines/{m}.
func publicChecksum(t *testing.T, url, token, cluster, machine string) string {
	t.Helper()
	var sum string
	natstest.WaitFor(t, 30*time.Second, machine+"'s checksum in the API", func() bool {
		var m struct {
			Status struct {
				BootstrapDataChecksum string `json:"bootstrapDataChecksum"`
			} `json:"status"`
		}
		_ = json.Unmarshal(readGET(t, url, token, "/v1/clusters/"+cluster+"/machines/"+machine), &m)
		sum = m.Status.BootstrapDataChecksum
		return strings.HasPrefix(sum, "sha256:")
	})
	return sum
}

// fetch asks for a machine's bootstrap data as a node agent does, with
// the headers given, and returns the refusal code ("" when data came).
func fetch(t *testing.T, nc *nats.Conn, cluster, machine string, headers map[string]string) (code string, data []byte) {
	t.Helper()
	req := nats.NewMsg("capn.bootstrap.fetch." + cluster + "." + machine)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reply, err := nc.RequestMsgWithContext(ctx, req)
	if err != nil {
		t.Fatalf("fetch %s/%s: %v", cluster, machine, err)
	}
	return reply.Header.Get("Nats-Service-Error-Code"), reply.Data
}

// machineOf waits for a machine of cluster with role and returns its name.
func machineOf(t *testing.T, sys *harness.System, cluster, role string) string {
	t.Helper()
	var name string
	natstest.WaitFor(t, 30*time.Second, "a "+role+" machine of "+cluster, func() bool {
		for _, k := range harness.Keys(t, sys.Desired, "machine."+cluster+".") {
			if m, _, err := sys.Machines.Get(context.Background(), k); err == nil && m.GetSpec().GetRole() == role {
				name = strings.TrimPrefix(k, "machine."+cluster+".")
				return true
			}
		}
		return false
	})
	return name
}
