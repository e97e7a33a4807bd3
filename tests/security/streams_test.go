package security

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/gateway"
)

// TestStreamsAreCapped (finding 7): one read token used to open 400
// watch and timeline streams (2,027 goroutines, +72 MB). Now a token
// holds at most gateway.DefaultMaxStreamsPerToken streams: more are
// answered 429 with Retry-After and cost nothing once answered, so the
// gateway's goroutines stay bounded however many the token asks for,
// while another token can still open its own.
func TestStreamsAreCapped(t *testing.T) {
	g := startEdgeGateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(token, path string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		// A connection per request, closed with its response: only what
		// the gateway holds counts.
		tr := &http.Transport{DisableKeepAlives: true}
		res, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	path := func(i int) string {
		if i%2 == 0 {
			return "/v1/watch"
		}
		return fmt.Sprintf("/v1/clusters/c%d/events?follow=true", i)
	}

	base := runtime.NumGoroutine()
	var held []*http.Response
	for i := range gateway.DefaultMaxStreamsPerToken {
		res := open(edgeRead, path(i))
		if res.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %d, want 200 below the cap", i, res.StatusCode)
		}
		held = append(held, res)
	}
	perStream := float64(runtime.NumGoroutine()-base) / float64(len(held))
	atCap := runtime.NumGoroutine()

	const extra = 100
	for i := range extra {
		res := open(edgeRead, path(i))
		res.Body.Close()
		if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
			t.Fatalf("stream %d over the cap: %d (Retry-After %q), want 429 with Retry-After", gateway.DefaultMaxStreamsPerToken+i, res.StatusCode, res.Header.Get("Retry-After"))
		}
	}
	// The refused streams hold nothing: goroutines fall back to what the
	// capped streams hold (slack for connections being torn down).
	natstest.WaitFor(t, 10*time.Second, "goroutines back to the capped streams' count", func() bool {
		return runtime.NumGoroutine() <= atCap+10
	})
	t.Logf("%d streams: %.1f goroutines each; %d refused streams left %d goroutines over that", len(held), perStream, extra, runtime.NumGoroutine()-atCap)

	// The cap is per token: the admin token still opens a stream.
	res := open(edgeAdmin, "/v1/watch")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("another token's stream: %d, want 200", res.StatusCode)
	}
	res.Body.Close()
	// A closed stream gives its slot back.
	held[0].Body.Close()
	natstest.WaitFor(t, 10*time.Second, "a slot freed by a closed stream", func() bool {
		res := open(edgeRead, "/v1/watch")
		defer res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	for _, r := range held[1:] {
		r.Body.Close()
	}
}
