package endpoint_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/cmd/capn-node/endpoint"
	"github.com/capn-dev/capn/internal/testkit"
)

// backend is a TCP server on 127.0.0.1 that writes its name to every
// connection, then echoes what it reads until EOF.
type backend struct {
	name string
	ln   net.Listener
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]bool
}

func newBackend(t *testing.T, name string) *backend {
	t.Helper()
	return listenBackend(t, name, "127.0.0.1:0")
}

func listenBackend(t *testing.T, name, addr string) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: name, ln: ln, conns: map[net.Conn]bool{}}
	b.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns[c] = true
			b.mu.Unlock()
			b.wg.Go(func() {
				defer func() {
					b.mu.Lock()
					delete(b.conns, c)
					b.mu.Unlock()
					c.Close()
				}()
				if _, err := io.WriteString(c, b.name+"\n"); err != nil {
					return
				}
				_, _ = io.Copy(c, c)
			})
		}
	})
	t.Cleanup(b.stop)
	return b
}

func (b *backend) addr() string { return b.ln.Addr().String() }

// stop kills the backend: it closes the listener and every connection,
// and waits for its goroutines to end.
func (b *backend) stop() {
	b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// backends is a backend list a test changes.
type backends struct {
	mu    sync.Mutex
	addrs []string
}

func (b *backends) set(addrs ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.addrs = addrs
}

func (b *backends) get() ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.addrs), nil
}

// serve runs an endpoint on 127.0.0.1 until the test ends; it returns its
// address and a stop that cancels it and waits for Serve to return.
func serve(t *testing.T, cfg endpoint.Config) (string, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- endpoint.Serve(ctx, ln, cfg) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Serve: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("Serve did not return 5s after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// hello connects, sends an HTTP/1.0 GET /healthz and reads the first line
// of the answer: a backend's name, or the placeholder's status line.
func hello(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.0\r\n\r\n"); err != nil {
		return "<" + err.Error() + ">"
	}
	line := make([]byte, 0, 32)
	one := make([]byte, 1)
	for {
		n, err := c.Read(one)
		if n == 1 {
			if one[0] == '\n' {
				return string(line)
			}
			line = append(line, one[0])
		}
		if err != nil {
			return string(line) + "<" + err.Error() + ">"
		}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func checkPlaceholder(t *testing.T, addr string) {
	t.Helper()
	if code, body := get(t, "http://"+addr+"/healthz"); code != http.StatusOK || !strings.Contains(body, "placeholder control-plane endpoint of cluster c1") {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, "http://"+addr+"/api/v1/nodes"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no Kubernetes API server runs here yet") {
		t.Errorf("/api/v1/nodes = %d %q", code, body)
	}
}

func TestPlaceholderWithoutBackends(t *testing.T) {
	addr, _ := serve(t, endpoint.Config{Cluster: "c1"})
	checkPlaceholder(t, addr)
}

// Backends that are listed but do not answer: the placeholder answers.
func TestPlaceholderWhileNoBackendIsUp(t *testing.T) {
	dead := newBackend(t, "dead")
	dead.stop()
	list := &backends{}
	list.set(dead.addr())
	addr, _ := serve(t, endpoint.Config{Cluster: "c1", Backends: list.get, CheckEvery: 20 * time.Millisecond})
	checkPlaceholder(t, addr)
}

func TestRoundRobinOverHealthyBackends(t *testing.T) {
	a, b, c := newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")
	dead := newBackend(t, "dead")
	dead.stop()
	list := &backends{}
	list.set(a.addr(), b.addr(), c.addr(), dead.addr())
	// No health check after the first: the order is the first check's.
	addr, _ := serve(t, endpoint.Config{Cluster: "c1", Backends: list.get, CheckEvery: time.Hour})
	var got []string
	for range 6 {
		got = append(got, hello(t, addr))
	}
	// The backends in address order, each in turn, the dead one never.
	order := []*backend{a, b, c}
	slices.SortFunc(order, func(x, y *backend) int { return strings.Compare(x.addr(), y.addr()) })
	var want []string
	for range 2 {
		for _, be := range order {
			want = append(want, be.name)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("connections went to %v, want %v", got, want)
	}
}

// A backend that dies between two health checks: its connections fall
// over to the next, and the endpoint logs it down.
func TestFailoverWhenABackendDies(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	list := &backends{}
	list.set(a.addr(), b.addr())
	var logs testkit.Buffer
	addr, _ := serve(t, endpoint.Config{Cluster: "c1", Backends: list.get, CheckEvery: time.Hour, Log: zerolog.New(&logs)})
	first := hello(t, addr)
	if first != "a" && first != "b" {
		t.Fatalf("first connection: %q", first)
	}
	// An established connection to the backend that dies ends with it.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line := make([]byte, 2)
	if _, err := io.ReadFull(c, line); err != nil {
		t.Fatal(err)
	}
	victim, survivor := a, b
	if string(line[:1]) == "b" {
		victim, survivor = b, a
	}
	victim.stop()
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("a connection to the dead backend still reads")
	}
	for i := range 4 {
		if got := hello(t, addr); got != survivor.name {
			t.Errorf("connection %d after %s died went to %q, want %s", i, victim.name, got, survivor.name)
		}
	}
	if l := logs.String(); !strings.Contains(l, `"backend":"`+victim.addr()+`"`) || !strings.Contains(l, "backend down") {
		t.Errorf("no down transition of %s logged:\n%s", victim.addr(), l)
	}
}

// A backend that comes up later takes the connections from then on; the
// placeholder answers before.
func TestBackendComingUpLater(t *testing.T) {
	later := newBackend(t, "later")
	port := later.addr()
	later.stop()
	list := &backends{}
	list.set(port)
	var logs testkit.Buffer
	addr, _ := serve(t, endpoint.Config{Cluster: "c1", Backends: list.get, CheckEvery: 20 * time.Millisecond, Log: zerolog.New(&logs)})
	checkPlaceholder(t, addr)
	up := listenBackend(t, "later", port)
	testkit.WaitFor(t, 10*time.Second, "connections to go to the backend that came up", func() bool { return hello(t, addr) == "later" })
	if !strings.Contains(logs.String(), "backend up") {
		t.Errorf("no up transition logged:\n%s", logs.String())
	}
	// And when it goes again, the placeholder is back.
	up.stop()
	testkit.WaitFor(t, 10*time.Second, "the placeholder to answer again", func() bool { return strings.HasPrefix(hello(t, addr), "HTTP/1.0 200") })
	checkPlaceholder(t, addr)
}

// A backend added to the list is used; one removed no longer is.
func TestBackendListChanges(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	list := &backends{}
	list.set(a.addr())
	addr, _ := serve(t, endpoint.Config{Cluster: "c1", Backends: list.get, CheckEvery: 20 * time.Millisecond})
	if got := hello(t, addr); got != "a" {
		t.Fatalf("went to %q, want a", got)
	}
	list.set(b.addr())
	testkit.WaitFor(t, 10*time.Second, "connections to go to b", func() bool { return hello(t, addr) == "b" })
	for i := range 3 {
		if got := hello(t, addr); got != "b" {
			t.Errorf("connection %d after a left the list went to %q, want b", i, got)
		}
	}
}

// Bytes pass unchanged both ways, and each side's half-close reaches the
// other.
func TestBytesPassThroughUnchanged(t *testing.T) {
	be := newBackend(t, "echo")
	list := &backends{}
	list.set(be.addr())
	addr, _ := serve(t, endpoint.Config{Cluster: "c1", Backends: list.get, CheckEvery: time.Hour})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	payload := make([]byte, 1<<20)
	_, _ = rand.Read(payload)
	go func() {
		_, _ = c.Write(payload)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c) // ends only if the backend's close comes through
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte("echo\n"), payload...)
	if !bytes.Equal(got, want) {
		t.Errorf("read %d bytes back, want %d: not the bytes sent", len(got), len(want))
	}
}

// TLS passes through: the client's handshake is with the backend itself.
func TestTLSPassesThrough(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "apiserver "+r.URL.Path+" over "+tls.VersionName(r.TLS.Version))
	}))
	defer srv.Close()
	list := &backends{}
	list.set(srv.Listener.Addr().String())
	addr, _ := serve(t, endpoint.Config{Cluster: "c1", Backends: list.get, CheckEvery: time.Hour})
	client := srv.Client() // trusts the backend's certificate, for 127.0.0.1
	resp, err := client.Get("https://" + addr + "/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(b), "apiserver /version over TLS") {
		t.Errorf("through the endpoint: %d %q", resp.StatusCode, b)
	}
}

// When its context ends, Serve closes every connection (proxied,
// placeholder, idle) and leaves no goroutine behind.
func TestNoGoroutineLeftAfterTheEnd(t *testing.T) {
	be := newBackend(t, "echo")
	list := &backends{}
	list.set(be.addr())
	before := runtime.NumGoroutine() // the backend's accept loop is among them: made before newBackend returns

	addr, stop := serve(t, endpoint.Config{Cluster: "c1", Backends: list.get, CheckEvery: 10 * time.Millisecond})
	proxied, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxied.Close()
	_ = proxied.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(proxied, make([]byte, 5)); err != nil { // "echo\n": proxied
		t.Fatal(err)
	}
	list.set() // the next connections get the placeholder
	testkit.WaitFor(t, 10*time.Second, "the placeholder", func() bool { return strings.HasPrefix(hello(t, addr), "HTTP/1.0 200") })
	idle, err := net.Dial("tcp", addr) // a placeholder connection that sends nothing
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_ = idle.SetDeadline(time.Now().Add(10 * time.Second))

	stop()
	if _, err := proxied.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("the proxied connection after the end: %v, want EOF", err)
	}
	if _, err := idle.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("the idle placeholder connection after the end: %v, want EOF", err)
	}
	if err := testkit.Poll(5*time.Second, 10*time.Millisecond, func() error {
		if now := runtime.NumGoroutine(); now > before {
			buf := make([]byte, 1<<20)
			return fmt.Errorf("%d goroutines after the end, %d before:\n%s", now, before, buf[:runtime.Stack(buf, true)])
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}
