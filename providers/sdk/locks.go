package sdk

import (
	"context"
	"sync"
)

// keyLocks serialises work on one key (a machine or cluster): commands and
// drift checks of one machine never run at once, so "read observed, ask the
// provider, write observed" is one step. Locks are created on demand and
// dropped when nobody holds or waits for them. Safe for concurrent use.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	ch    chan struct{} // holds one token while locked
	users int           // holders and waiters
}

// lock waits for key's lock until ctx ends, and returns its unlock.
func (l *keyLocks) lock(ctx context.Context, key string) (func(), error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*keyLock{}
	}
	k := l.m[key]
	if k == nil {
		k = &keyLock{ch: make(chan struct{}, 1)}
		l.m[key] = k
	}
	k.users++
	l.mu.Unlock()

	select {
	case k.ch <- struct{}{}:
		return func() {
			<-k.ch
			l.release(key, k)
		}, nil
	case <-ctx.Done():
		l.release(key, k)
		return nil, ctx.Err()
	}
}

func (l *keyLocks) release(key string, k *keyLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k.users--
	if k.users == 0 {
		delete(l.m, key)
	}
}

// len is the number of keys held or waited for (tests).
func (l *keyLocks) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
