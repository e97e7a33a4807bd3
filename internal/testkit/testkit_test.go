package testkit

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestDoSendsTokenHeadersAndHost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen", r.Method+" "+r.Host+" "+r.Header.Get("Authorization")+" "+r.Header.Get("X-A"))
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte("body"))
	}))
	defer srv.Close()
	r := Do(t, http.MethodPost, srv.URL+"/x", "tok", "data", "X-A", "a", "Host", "example.test")
	if r.Status != http.StatusTeapot || string(r.Body) != "body" || r.Header.Get("X-Seen") != "POST example.test Bearer tok a" {
		t.Fatalf("response %d %q, seen %q", r.Status, r.Body, r.Header.Get("X-Seen"))
	}
}

func TestPollReturnsTheLastError(t *testing.T) {
	n := 0
	err := Poll(50*time.Millisecond, time.Millisecond, func() error { n++; return errors.New("still no") })
	if err == nil || err.Error() != "still no" || n < 2 {
		t.Fatalf("Poll = %v after %d checks, want the check's error after several", err, n)
	}
	if err := Poll(time.Hour, time.Hour, func() error { return nil }); err != nil {
		t.Fatalf("Poll = %v for a check that passes at once", err)
	}
}

func TestBufferLines(t *testing.T) {
	var b Buffer
	_, _ = b.Write([]byte(`{"message":"a","n":1}` + "\nnot json\n" + `{"message":"b"}` + "\n" + `{"message":"a","n":2}` + "\n"))
	if got := b.Lines("a"); len(got) != 2 || got[1]["n"] != float64(2) {
		t.Fatalf("Lines(a) = %v", got)
	}
	b.Reset()
	if b.String() != "" {
		t.Fatalf("after Reset: %q", b.String())
	}
}
