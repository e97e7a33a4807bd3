package gateway

import (
	"net/http"
	"sync"
	"time"

	"github.com/capn-dev/capn/gateway/api"
)

// streamRetryAfter is the Retry-After of a stream refused for the caps:
// streams are long-lived, a slot frees when one ends.
const streamRetryAfter = 5 * time.Second

// streamSlots caps the long-lived streams (GET /v1/watch and
// GET /v1/clusters/{name}/events?follow=true) open at once, per principal
// (its rate-limit key: a token's name, an anonymous client's address) and
// in total. Each stream costs a few goroutines and bounded buffers (the
// hub's per-stream channel, the timeline's pull batch), so the caps bound
// the gateway's memory and goroutines whatever its clients do. Safe for
// concurrent use.
type streamSlots struct {
	perKey, total int

	mu    sync.Mutex
	open  int
	byKey map[string]int
}

func newStreamSlots(perKey, total int) *streamSlots {
	return &streamSlots{perKey: perKey, total: total, byKey: map[string]int{}}
}

// acquire takes a slot for key, or returns the 429 (with Retry-After)
// saying which cap is reached. release gives the slot back; call it once.
func (l *streamSlots) acquire(key string) (release func(), _ *problemError) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.byKey[key] >= l.perKey:
		return nil, tooManyStreams("%d streams are open for this caller, the most one token (or anonymous address) may hold (--max-streams-per-token); close one or retry later", l.perKey)
	case l.open >= l.total:
		return nil, tooManyStreams("%d streams are open, the most the gateway serves (--max-streams); retry later", l.total)
	}
	l.open++
	l.byKey[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.open--
			if l.byKey[key]--; l.byKey[key] <= 0 {
				delete(l.byKey, key)
			}
		})
	}, nil
}

func tooManyStreams(format string, args ...any) *problemError {
	p := problem(http.StatusTooManyRequests, api.ProblemRateLimited, "Too many streams", format, args...)
	p.retryAfter = streamRetryAfter
	return p
}

// openStream takes a stream slot for the request's principal.
func (s *server) openStream(r *http.Request) (release func(), _ error) {
	release, p := s.streams.acquire(principalFrom(r.Context()).rateKey(r))
	if p != nil {
		return nil, p
	}
	return release, nil
}
