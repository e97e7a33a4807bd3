package store

import (
	"sync"

	"google.golang.org/protobuf/proto"
)

// Facts remembers, per key of a [Cache], what a caller derives from the
// key's entry (a few fields of its decoded value), derived again only when
// the entry's revision changes. A hot path that reads the same unchanged
// records over and over — the health-watcher reads a machine's desired
// spec, its phase and its node record for every heartbeat, one per machine
// every 30 s — then pays a decode per change of a record instead of one
// per read. What derive returns is shared by every Get until the entry
// changes: it must be a value the callers do not modify (plain fields,
// not a message).
//
// The facts of a key are dropped when a Get finds the key gone from the
// cache, or by Forget. Safe for concurrent use.
type Facts[F any] struct {
	c      *Cache
	derive func(RawEntry) (F, bool)

	mu sync.Mutex
	m  map[string]fact[F]
}

type fact[F any] struct {
	rev uint64
	v   F
	ok  bool
}

// NewFacts returns the facts derive makes of c's entries; derive's false
// (the value does not decode, say) makes Get report the key as absent.
func NewFacts[F any](c *Cache, derive func(RawEntry) (F, bool)) *Facts[F] {
	return &Facts[F]{c: c, derive: derive, m: map[string]fact[F]{}}
}

// DecodedFacts returns the facts of c's entries that project makes of
// their values decoded as T; an entry that does not decode is absent, as
// in [View].
func DecodedFacts[T proto.Message, F any](c *Cache, newT func() T, project func(T) F) *Facts[F] {
	return NewFacts(c, func(e RawEntry) (F, bool) {
		m, err := Decode(e.Value, newT)
		if err != nil {
			var zero F
			return zero, false
		}
		return project(m), true
	})
}

// Get returns the facts of key's cached entry, the entry's revision (0:
// missing) and whether the key is there and derive accepted its value.
func (f *Facts[F]) Get(key string) (F, uint64, bool) {
	var zero F
	e, ok := f.c.Get(key)
	f.mu.Lock()
	x, hit := f.m[key]
	if !ok {
		delete(f.m, key)
	}
	f.mu.Unlock()
	switch {
	case !ok:
		return zero, 0, false
	case hit && x.rev == e.Revision:
		return x.v, x.rev, x.ok
	}
	v, derived := f.derive(e)
	f.mu.Lock()
	if cur, hit := f.m[key]; !hit || cur.rev < e.Revision {
		f.m[key] = fact[F]{rev: e.Revision, v: v, ok: derived}
	}
	f.mu.Unlock()
	if !derived {
		return zero, e.Revision, false
	}
	return v, e.Revision, true
}

// Forget drops what is remembered of key (a key the caller knows is gone,
// whose facts no Get would drop).
func (f *Facts[F]) Forget(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, key)
}

// Len is the number of keys whose facts are remembered.
func (f *Facts[F]) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m)
}
