package gateway

import (
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/capn-dev/capn/gateway/api"
)

// rateLimiter is a token bucket per key: per principal (see
// principal.rateKey) for requests, per client address for failed
// authentications.
// Buckets idle for longer than idleAfter are dropped, so the map stays as
// small as the set of recent callers. Safe for concurrent use.
type rateLimiter struct {
	limit rate.Limit
	burst int
	now   func() time.Time

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	lim      *rate.Limiter
	lastSeen time.Time
}

const idleAfter = 10 * time.Minute

// newRateLimiter returns nil (no limit) when perSecond <= 0.
func newRateLimiter(perSecond float64, burst int, now func() time.Time) *rateLimiter {
	if perSecond <= 0 {
		return nil
	}
	if burst < 1 {
		burst = 1
	}
	return &rateLimiter{limit: rate.Limit(perSecond), burst: burst, now: now, buckets: map[string]*bucket{}}
}

// allow takes one token from key's bucket, or returns the 429 problem with
// the time until a token is available as Retry-After.
func (l *rateLimiter) allow(key string) *problemError {
	if l == nil {
		return nil
	}
	now := l.now()
	res := l.bucket(key, now).ReserveN(now, 1)
	if !res.OK() {
		return tooMany(time.Second)
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return tooMany(d)
	}
	return nil
}

// spent returns the 429 while key's bucket is empty, taking nothing: the
// failed-authentication limiter asks it before authenticating and takes a
// token (allow) only on a failure.
func (l *rateLimiter) spent(key string) *problemError {
	if l == nil {
		return nil
	}
	now := l.now()
	lim := l.bucket(key, now)
	if tokens := lim.TokensAt(now); tokens < 1 {
		return tooMany(time.Duration((1 - tokens) / float64(l.limit) * float64(time.Second)))
	}
	return nil
}

// bucket returns key's limiter, made on first use; idle ones are swept.
func (l *rateLimiter) bucket(key string, now time.Time) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) > idleAfter {
		for k, b := range l.buckets {
			if now.Sub(b.lastSeen) > idleAfter {
				delete(l.buckets, k)
			}
		}
		l.lastSweep = now
	}
	b, ok := l.buckets[key]
	if !ok {
		b = &bucket{lim: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[key] = b
	}
	b.lastSeen = now
	return b.lim
}

// clientAddr is the address a request came from, without its port.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func tooMany(retry time.Duration) *problemError {
	p := problem(http.StatusTooManyRequests, api.ProblemRateLimited, "Too many requests",
		"rate limit exceeded; retry after the time in Retry-After")
	p.retryAfter = max(retry, time.Second)
	return p
}
