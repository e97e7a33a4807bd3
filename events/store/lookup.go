package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// Getter reads one cached entry: a [Cache] is one. Reconcilers read
// through it so that a test can stand a cache that misses keys in.
type Getter interface {
	Get(key string) (RawEntry, bool)
}

// Lookup decodes key from the cache: the value, its revision and whether it
// is there (a value that does not decode counts as absent — the cache holds
// what others wrote, and a reconciler treats garbage as nothing).
func Lookup[T proto.Message](c Getter, key string, newT func() T) (T, uint64, bool) {
	var zero T
	e, ok := c.Get(key)
	if !ok {
		return zero, 0, false
	}
	v, err := Decode(e.Value, newT)
	if err != nil {
		return zero, 0, false
	}
	return v, e.Revision, true
}

// LookupConfirmed is Lookup for a decision that rests on the key's
// ABSENCE (a machine whose infrastructure is gone, a status to forget, an
// answer to drop): a watch cache may not hold a key yet (another replica's
// write not delivered) or momentarily not (a watcher re-created), so when c
// lacks key it reads b's bucket directly and believes that. It reports
// the key absent only when the bucket does (or holds a value that does not
// decode, as Lookup). An error is a failed read (or a sealed value that
// does not open): decide nothing.
func LookupConfirmed[T proto.Message](ctx context.Context, c Getter, b *Bucket[T], key string) (T, uint64, bool, error) {
	if v, rev, ok := Lookup(c, key, b.newT); ok {
		return v, rev, true, nil
	}
	var zero T
	ctx, cancel := withDefaultTimeout(ctx, b.timeout)
	defer cancel()
	e, err := b.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return zero, 0, false, nil
	}
	if err != nil {
		return zero, 0, false, fmt.Errorf("confirm %s: %w", key, err)
	}
	data, err := b.open(key, e.Value())
	if err != nil {
		return zero, 0, false, fmt.Errorf("confirm: %w", err)
	}
	v, err := Decode(data, b.newT)
	if err != nil {
		return zero, 0, false, nil // garbage counts as absent, as in Lookup
	}
	return v, e.Revision(), true, nil
}

// KeysUnder lists the cached keys under prefix with the prefix cut off.
func (c *Cache) KeysUnder(prefix string) []string {
	entries := c.List(prefix)
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Key[len(prefix):])
	}
	return out
}
