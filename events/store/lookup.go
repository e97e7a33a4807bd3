package store

import "google.golang.org/protobuf/proto"

// Lookup decodes key from the cache: the value, its revision and whether it
// is there (a value that does not decode counts as absent — the cache holds
// what others wrote, and a reconciler treats garbage as nothing).
func Lookup[T proto.Message](c *Cache, key string, newT func() T) (T, uint64, bool) {
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

// KeysUnder lists the cached keys under prefix with the prefix cut off.
func (c *Cache) KeysUnder(prefix string) []string {
	entries := c.List(prefix)
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Key[len(prefix):])
	}
	return out
}
