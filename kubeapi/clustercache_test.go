package kubeapi_test

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/secrets/kubeconfig"
	"github.com/capn-dev/capn/secrets/pki"
)

type clock struct{ t time.Time }

func (c *clock) Now() time.Time      { return c.t }
func (c *clock) Add(d time.Duration) { c.t = c.t.Add(d) }

var errRefused = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

func status(code int) error {
	return &kubeapi.StatusError{Method: "GET", Path: "/api/v1/nodes", Code: code}
}

func noKubeconfig(context.Context, string) ([]byte, uint64, error) {
	return nil, 0, errors.New("unused")
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestStateOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want kubeapi.ClusterState
	}{
		{"no connection", errRefused, kubeapi.StateUnreachable},
		{"timeout", context.DeadlineExceeded, kubeapi.StateUnreachable},
		{"placeholder endpoint (503)", status(http.StatusServiceUnavailable), kubeapi.StateUnreachable},
		{"throttled (429)", status(http.StatusTooManyRequests), kubeapi.StateUnreachable},
		{"forbidden (403)", fmt.Errorf("delete Node n: %w", status(http.StatusForbidden)), kubeapi.StateRefused},
		{"unauthorized (401)", status(http.StatusUnauthorized), kubeapi.StateRefused},
		{"kubeconfig", fmt.Errorf("%w of c: parse kubeconfig: bad", kubeapi.ErrKubeconfig), kubeapi.StateKubeconfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := kubeapi.StateOf(tt.err); got != tt.want {
				t.Errorf("StateOf(%v) = %s, want %s", tt.err, got, tt.want)
			}
		})
	}
}

// The backoff per cluster: base doubled per consecutive failure up to max,
// ended by an answer, cut short by a kick, forgotten by Invalidate; a
// cluster's failures never delay another.
func TestClusterCacheBackoff(t *testing.T) {
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	c := kubeapi.NewClusterCache(kubeapi.ClusterCacheConfig{Kubeconfig: noKubeconfig,
		BackoffBase: time.Second, BackoffMax: 4 * time.Second, Now: clk.Now})
	if w := c.Wait("a"); w != 0 {
		t.Fatalf("a cluster never tried waits %s", w)
	}
	type step struct {
		err         error // nil: Answered
		wantRetryIn time.Duration
		wantState   kubeapi.ClusterState
		wantChanged bool
	}
	for i, s := range []step{
		{errRefused, time.Second, kubeapi.StateUnreachable, true},
		{errRefused, 2 * time.Second, kubeapi.StateUnreachable, false},
		{status(503), 4 * time.Second, kubeapi.StateUnreachable, false},
		{status(403), 4 * time.Second, kubeapi.StateRefused, true}, // capped at max
		{nil, 0, kubeapi.StateAnswering, true},
		{nil, 0, kubeapi.StateAnswering, false},
		{errRefused, time.Second, kubeapi.StateUnreachable, true}, // an answer reset the count
	} {
		var a kubeapi.Attempt
		if s.err == nil {
			a = c.Answered("a")
		} else {
			a = c.Failed("a", s.err)
		}
		if a.RetryIn != s.wantRetryIn || a.State != s.wantState || a.Changed != s.wantChanged {
			t.Fatalf("step %d: %+v; want retry in %s, state %s, changed %v", i, a, s.wantRetryIn, s.wantState, s.wantChanged)
		}
		if w := c.Wait("a"); w != s.wantRetryIn {
			t.Fatalf("step %d: Wait = %s, want %s", i, w, s.wantRetryIn)
		}
	}
	if w := c.Wait("b"); w != 0 {
		t.Fatalf("a's backoff delays b by %s", w)
	}

	clk.Add(400 * time.Millisecond)
	if w := c.Wait("a"); w != 600*time.Millisecond {
		t.Fatalf("400ms into a 1s backoff: Wait = %s", w)
	}
	c.Kick("a")
	if w := c.Wait("a"); w != 0 {
		t.Fatalf("after a kick: Wait = %s", w)
	}
	if w := c.Wait("a"); w != 600*time.Millisecond {
		t.Fatalf("a kick ends one wait, not the backoff: Wait = %s", w)
	}
	clk.Add(600 * time.Millisecond)
	if w := c.Wait("a"); w != 0 {
		t.Fatalf("backoff over: Wait = %s", w)
	}

	c.Failed("a", errRefused)
	c.Invalidate("a")
	if w := c.Wait("a"); w != 0 {
		t.Fatalf("after Invalidate: Wait = %s", w)
	}
	if a := c.Failed("a", errRefused); a.RetryIn != time.Second || !a.Changed {
		t.Fatalf("first failure after Invalidate: %+v; want the base delay, state changed", a)
	}
}

// kubeconfigs is a cluster's admin kubeconfig as the secrets bucket holds
// it: a value and its revision.
type kubeconfigs struct {
	mu   sync.Mutex
	data []byte
	rev  uint64
	err  error
}

func (k *kubeconfigs) set(data []byte, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.data, k.err = data, err
	k.rev++
}

func (k *kubeconfigs) get(context.Context, string) ([]byte, uint64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.data, k.rev, k.err
}

// newCA is a cluster CA (its pair and parsed) and an admin certificate
// it issued.
func newCA(t *testing.T, name string) (pki.KeyPair, *pki.CA, pki.KeyPair) {
	t.Helper()
	now := time.Now()
	pair, err := pki.NewCA(name, now)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCA(pair, now)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pki.IssueAdmin(ca, now)
	if err != nil {
		t.Fatal(err)
	}
	return pair, ca, admin
}

func render(t *testing.T, server string, caPEM []byte, admin pki.KeyPair) []byte {
	t.Helper()
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	kc, err := kubeconfig.Render(kubeconfig.Input{ClusterName: "c", Host: u.Hostname(), Port: int32(port),
		CACertPEM: caPEM, ClientCertPEM: admin.CertPEM, ClientKeyPEM: admin.KeyPEM})
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// The client is kept while the kubeconfig's revision holds and replaced
// when it changes (here, the cluster's CA); reading or parsing the
// kubeconfig fails as ErrKubeconfig with the reader's error kept.
func TestClusterCacheReplacesClientWhenKubeconfigChanges(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"gitVersion":"v1.37.2"}`)
	}))
	defer srv.Close()
	caPair, _, admin := newCA(t, "kubernetes")
	srvCA := pemCert(srv.Certificate().Raw)

	kc := &kubeconfigs{}
	c := kubeapi.NewClusterCache(kubeapi.ClusterCacheConfig{Kubeconfig: kc.get, Timeout: 5 * time.Second})
	defer c.Close()

	errNotFound := errors.New("key not found")
	kc.set(nil, errNotFound)
	_, err := c.Client(t.Context(), "c")
	if !errors.Is(err, errNotFound) || !errors.Is(err, kubeapi.ErrKubeconfig) || kubeapi.StateOf(err) != kubeapi.StateKubeconfig {
		t.Fatalf("no kubeconfig: %v; want ErrKubeconfig wrapping the reader's error", err)
	}
	kc.set([]byte("not: [a kubeconfig"), nil)
	if _, err := c.Client(t.Context(), "c"); !errors.Is(err, kubeapi.ErrKubeconfig) {
		t.Fatalf("a kubeconfig that does not parse: %v", err)
	}

	// The kubeconfig names the cluster's CA before a rotation: the server's
	// certificate is not of it.
	kc.set(render(t, srv.URL, caPair.CertPEM, admin), nil)
	old, err := c.Client(t.Context(), "c")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Version(t.Context()); err == nil || kubeapi.StateOf(err) != kubeapi.StateUnreachable {
		t.Fatalf("a server of another CA: %v; want it unreachable", err)
	}
	if again, err := c.Client(t.Context(), "c"); err != nil || again != old {
		t.Fatalf("same revision: got another client (%v)", err)
	}
	// The CA rotates: a new revision, a new client, and it answers.
	kc.set(render(t, srv.URL, srvCA, admin), nil)
	rotated, err := c.Client(t.Context(), "c")
	if err != nil {
		t.Fatal(err)
	}
	if rotated == old {
		t.Fatal("a new kubeconfig revision kept the old client")
	}
	if v, err := rotated.Version(t.Context()); err != nil || v != "v1.37.2" {
		t.Fatalf("after the CA rotation: %q, %v", v, err)
	}
	if rotated.HTTP.Timeout != 5*time.Second {
		t.Errorf("client timeout %s, want the cache's 5s", rotated.HTTP.Timeout)
	}
	c.Invalidate("c")
	if fresh, err := c.Client(t.Context(), "c"); err != nil || fresh == rotated {
		t.Fatalf("after Invalidate: the same client (%v)", err)
	}
}
