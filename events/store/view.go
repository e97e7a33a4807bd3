package store

import (
	"fmt"

	"google.golang.org/protobuf/proto"
)

// View is a typed, read-only view of a [Cache] for one kind of key: its
// values are T, decoded with the constructor given once to [NewView]. A
// View is two words and does no I/O; make one where it is needed. It is
// safe for concurrent use, and every call decodes afresh, so callers own
// (and may modify) what they get.
//
// A value that does not decode counts as absent, as in [Lookup]: the cache
// holds what others wrote, and a reconciler treats garbage as nothing. Get
// still reports its revision and List its key, for callers that must tell
// garbage from nothing.
type View[T proto.Message] struct {
	c    *Cache
	newT func() T
}

// NewView returns the view of c whose values newT makes (see [NewBucket]).
func NewView[T proto.Message](c *Cache, newT func() T) View[T] {
	return View[T]{c: c, newT: newT}
}

// Cache returns the underlying cache (to Subscribe, for instance).
func (v View[T]) Cache() *Cache { return v.c }

// Get returns the cached value of key, its revision and whether it is
// there and decodes. A key that is there but does not decode returns the
// zero T, its revision (never 0) and false; a missing key 0 and false.
func (v View[T]) Get(key string) (T, uint64, bool) {
	var zero T
	e, ok := v.c.Get(key)
	if !ok {
		return zero, 0, false
	}
	m, err := Decode(e.Value, v.newT)
	if err != nil {
		return zero, e.Revision, false
	}
	return m, e.Revision, true
}

// Undecodable is a cached entry whose value does not decode.
type Undecodable struct {
	Key      string
	Revision uint64
	Err      error
}

// List returns the cached values under prefix that decode, sorted by key,
// and the entries under it that do not (also sorted by key).
func (v View[T]) List(prefix string) ([]Entry[T], []Undecodable) {
	raw := v.c.List(prefix)
	out := make([]Entry[T], 0, len(raw))
	var bad []Undecodable
	for _, e := range raw {
		m, err := Decode(e.Value, v.newT)
		if err != nil {
			bad = append(bad, Undecodable{Key: e.Key, Revision: e.Revision, Err: fmt.Errorf("key %s: %w", e.Key, err)})
			continue
		}
		out = append(out, Entry[T]{Key: e.Key, Value: m, Revision: e.Revision})
	}
	return out, bad
}
