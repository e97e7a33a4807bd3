// Package testkit is what capn's tests share that is not about NATS: a wait
// on a condition (poll, don't sleep), a buffer that a logger and a test may
// use at once, and an HTTP request helper. Only tests and test helper
// packages import it; it imports nothing but the standard library, so a
// test that needs no NATS links no nats-server.
//
// events/natstest.WaitFor is this package's WaitFor: the provider
// conformance suite and the SDK's test helpers may import only the events
// plumbing (tests/arch), not capn's internal packages.
package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// WaitFor polls cond every 10ms until it returns true or timeout passes,
// then fails the test with msg.
func WaitFor(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	if Poll(timeout, 10*time.Millisecond, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}) != nil {
		t.Fatalf("timed out after %s waiting for: %s", timeout, msg)
	}
}

var errNotYet = errors.New("not yet")

// Poll calls check at once and then every interval until it returns nil,
// and returns nil; once timeout has passed it returns check's last error.
// check runs on the caller's goroutine, so it may fail the test to give up
// early (a process it waits on exited).
func Poll(timeout, every time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-tick.C:
		}
	}
}

// Buffer is a bytes.Buffer safe for concurrent use: a logger or a command
// writes while the test reads. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Reset empties the buffer.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Reset()
}

// Lines are the JSON log records (zerolog's) whose message is msg.
func (b *Buffer) Lines(msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(b.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["message"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// Response is a finished HTTP response, its body read.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends a request to url and reads the whole response, failing the test
// on a transport error. body is a string, a []byte or nil; a non-empty token
// is sent as a bearer token; hdr are header name, value pairs, where "Host"
// sets the request's Host.
func Do(t testing.TB, method, url, token string, body any, hdr ...string) Response {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case string:
		if b != "" {
			r = strings.NewReader(b)
		}
	case []byte:
		r = bytes.NewReader(b)
	case nil:
	default:
		t.Fatalf("testkit.Do: body of type %T", body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if http.CanonicalHeaderKey(hdr[i]) == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Response{Status: res.StatusCode, Header: res.Header, Body: b}
}
