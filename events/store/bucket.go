package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// Bucket is a typed view of a JetStream KV bucket whose values are protobuf
// messages of type T, encoded with deterministic binary marshalling. Every
// write is a compare-and-set on the revision the caller read.
//
// A Bucket is safe for concurrent use by multiple goroutines; it holds no
// state besides the KeyValue handle. Every method takes ctx first: if ctx
// has no deadline the bucket's timeout ([DefaultTimeout] unless
// [WithTimeout]) is applied, because a denied or lost NATS request never
// fails by itself, it only times out. Cancelling ctx abandons the call and
// returns an error wrapping ctx.Err() (the write may or may not have
// happened). Errors wrap the key and the underlying cause with %w.
type Bucket[T proto.Message] struct {
	kv       jetstream.KeyValue
	newT     func() T
	timeout  time.Duration
	attempts int
	sealer   Sealer
}

// Sealer protects values at rest: Seal turns the encoded value stored under
// key name into what KV holds, Open reverses it. Binding the result to the
// key name (e.g. as AEAD additional data) stops a value from being copied
// under another key. seal.Keyring is one.
type Sealer interface {
	Seal(name string, plaintext []byte) ([]byte, error)
	Open(name string, sealed []byte) ([]byte, error)
}

// WithSealer seals every value the bucket writes and opens every value it
// reads with s.
func WithSealer(s Sealer) BucketOption {
	return func(o *bucketOptions) { o.sealer = s }
}

func (b *Bucket[T]) encode(key string, v T) ([]byte, error) {
	data, err := Encode(v)
	if err != nil || b.sealer == nil {
		return data, err
	}
	return b.sealer.Seal(key, data)
}

// decode opens and decodes the value stored under key at rev; a value that
// opens but does not decode is a *CorruptError.
func (b *Bucket[T]) decode(key string, rev uint64, data []byte) (T, error) {
	var zero T
	data, err := b.open(key, data)
	if err != nil {
		return zero, err
	}
	v, err := Decode(data, b.newT)
	if err != nil {
		return zero, &CorruptError{Key: key, Revision: rev, Err: err}
	}
	return v, nil
}

// open unseals a stored value (as is without a sealer).
func (b *Bucket[T]) open(key string, data []byte) ([]byte, error) {
	if b.sealer == nil {
		return data, nil
	}
	data, err := b.sealer.Open(key, data)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", key, err)
	}
	return data, nil
}

// BucketOption configures a [Bucket].
type BucketOption func(*bucketOptions)

type bucketOptions struct {
	timeout  time.Duration
	attempts int
	sealer   Sealer
}

// WithTimeout sets the timeout applied to calls whose ctx has no deadline
// (default [DefaultTimeout]). For Mutate it bounds the whole loop, retries
// included. d <= 0 keeps the default.
func WithTimeout(d time.Duration) BucketOption {
	return func(o *bucketOptions) {
		if d > 0 {
			o.timeout = d
		}
	}
}

// WithAttempts sets how many compare-and-set attempts Mutate makes before
// it gives up with [ErrConflict] (default [DefaultAttempts]). n <= 0 keeps
// the default.
func WithAttempts(n int) BucketOption {
	return func(o *bucketOptions) {
		if n > 0 {
			o.attempts = n
		}
	}
}

// NewBucket returns a typed view of kv. newT must return a new, empty,
// non-nil T each time it is called (for example
// func() *capnv1alpha1.Machine { return new(capnv1alpha1.Machine) }); it is
// the target of every decode.
func NewBucket[T proto.Message](kv jetstream.KeyValue, newT func() T, opts ...BucketOption) *Bucket[T] {
	o := bucketOptions{timeout: DefaultTimeout, attempts: DefaultAttempts}
	for _, opt := range opts {
		opt(&o)
	}
	return &Bucket[T]{kv: kv, newT: newT, timeout: o.timeout, attempts: o.attempts, sealer: o.sealer}
}

// KV returns the underlying KeyValue, for the rare caller that needs it
// (a [Cache] on the same bucket, for instance).
func (b *Bucket[T]) KV() jetstream.KeyValue { return b.kv }

// Get returns the current value of key and its revision. A key that does
// not exist, or whose last operation was a delete or purge, returns an
// error matching [ErrNotFound] (and jetstream.ErrKeyNotFound). A value that
// does not decode as T returns a *[CorruptError] (matching [ErrCorrupt]).
func (b *Bucket[T]) Get(ctx context.Context, key string) (T, uint64, error) {
	ctx, cancel := withDefaultTimeout(ctx, b.timeout)
	defer cancel()
	return b.get(ctx, key)
}

func (b *Bucket[T]) get(ctx context.Context, key string) (T, uint64, error) {
	var zero T
	e, err := b.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return zero, 0, fmt.Errorf("get %s: %w: %w", key, ErrNotFound, err)
	}
	if err != nil {
		return zero, 0, fmt.Errorf("get %s: %w", key, err)
	}
	v, err := b.decode(key, e.Revision(), e.Value())
	if err != nil {
		return zero, 0, fmt.Errorf("get %s: %w", key, err)
	}
	return v, e.Revision(), nil
}

// Create writes v under key only if the key does not exist or was deleted
// (its last operation was a delete or purge), and returns the new revision.
// If the key exists it returns an error matching [ErrConflict] and
// jetstream.ErrKeyExists.
func (b *Bucket[T]) Create(ctx context.Context, key string, v T) (uint64, error) {
	ctx, cancel := withDefaultTimeout(ctx, b.timeout)
	defer cancel()
	return b.create(ctx, key, v)
}

func (b *Bucket[T]) create(ctx context.Context, key string, v T) (uint64, error) {
	data, err := b.encode(key, v)
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", key, err)
	}
	rev, err := b.kv.Create(ctx, key, data)
	if isConflict(err) {
		return 0, conflict("create", key, err)
	}
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", key, err)
	}
	return rev, nil
}

// Update writes v under key only if the key's current revision is rev, and
// returns the new revision. Otherwise (someone wrote first, or the key was
// deleted) it returns an error matching [ErrConflict] and
// jetstream.ErrKeyRevisionMismatch: re-read and try again.
func (b *Bucket[T]) Update(ctx context.Context, key string, v T, rev uint64) (uint64, error) {
	ctx, cancel := withDefaultTimeout(ctx, b.timeout)
	defer cancel()
	return b.update(ctx, key, v, rev)
}

func (b *Bucket[T]) update(ctx context.Context, key string, v T, rev uint64) (uint64, error) {
	data, err := b.encode(key, v)
	if err != nil {
		return 0, fmt.Errorf("update %s: %w", key, err)
	}
	next, err := b.kv.Update(ctx, key, data, rev)
	if isConflict(err) {
		return 0, conflict("update", key, err)
	}
	if err != nil {
		return 0, fmt.Errorf("update %s: %w", key, err)
	}
	return next, nil
}

// Delete places a delete marker on key if its current revision is rev
// (history is kept, as with jetstream Delete). rev 0 deletes whatever the
// revision is; use it only where no other writer can race.
//
// Deleting is idempotent: if the key is already missing or deleted, Delete
// returns nil, whatever rev says, because the state asked for is the state
// there is. If the key exists at another revision, Delete returns an error
// matching [ErrConflict] and jetstream.ErrKeyRevisionMismatch.
func (b *Bucket[T]) Delete(ctx context.Context, key string, rev uint64) error {
	ctx, cancel := withDefaultTimeout(ctx, b.timeout)
	defer cancel()
	err := b.del(ctx, key, rev)
	if !errors.Is(err, ErrConflict) {
		return err
	}
	if _, _, gerr := b.get(ctx, key); errors.Is(gerr, ErrNotFound) {
		return nil
	}
	return err
}

// del is a strict compare-and-set delete: a missing key is a conflict too.
func (b *Bucket[T]) del(ctx context.Context, key string, rev uint64) error {
	err := b.kv.Delete(ctx, key, jetstream.LastRevision(rev))
	if isConflict(err) {
		return conflict("delete", key, err)
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// Mutate is the read-modify-write loop. It reads key, calls fn with a fresh
// copy of the current value (exists false and an empty T if the key is
// missing or deleted), and writes what fn returns with a compare-and-set:
// Create when the key did not exist, Update on the revision read otherwise.
// If that write loses a race it re-reads and calls fn again, up to the
// bucket's attempts (default [DefaultAttempts]) with a short jittered
// backoff; then it gives up with an error matching [ErrConflict].
//
// fn may be called several times and must be a pure function of its
// input; it may modify cur in place and return it. What fn returns decides:
//
//   - a value proto.Equal to the current one (key exists): no write;
//   - any other value: the compare-and-set write;
//   - [ErrNoChange]: no write;
//   - [ErrDelete]: a compare-and-set delete (nothing if the key is missing);
//   - any other error: Mutate stops and returns it wrapped, without retry
//     (unless it is itself a conflict).
//
// Mutate returns the value now stored and its revision. After a delete, or
// when the key is missing and nothing was written, the revision is 0 and
// the value is the last one read (empty if there was none). The bucket's
// timeout, when ctx has no deadline, bounds the whole loop.
func (b *Bucket[T]) Mutate(ctx context.Context, key string, fn func(cur T, exists bool) (T, error)) (T, uint64, error) {
	ctx, cancel := withDefaultTimeout(ctx, b.timeout)
	defer cancel()

	var (
		out    T
		outRev uint64
	)
	err := RetryOnConflict(ctx, b.attempts, func(ctx context.Context) error {
		cur, rev, err := b.get(ctx, key)
		exists := err == nil
		switch {
		case errors.Is(err, ErrNotFound):
			cur, rev = b.newT(), 0
		case err != nil:
			return fmt.Errorf("mutate: %w", err)
		}
		orig, ok := proto.Clone(cur).(T)
		if !ok {
			return fmt.Errorf("mutate %s: cannot copy %T", key, cur)
		}

		next, err := fn(cur, exists)
		switch {
		case errors.Is(err, ErrNoChange):
			out, outRev = orig, rev
			return nil
		case errors.Is(err, ErrDelete):
			if exists {
				if err := b.del(ctx, key, rev); err != nil {
					return fmt.Errorf("mutate: %w", err)
				}
			}
			out, outRev = orig, 0
			return nil
		case err != nil:
			return fmt.Errorf("mutate %s: %w", key, err)
		}
		if !next.ProtoReflect().IsValid() {
			return fmt.Errorf("mutate %s: fn returned a nil %T", key, next)
		}
		if exists && proto.Equal(next, orig) {
			out, outRev = orig, rev
			return nil
		}

		var newRev uint64
		if exists {
			newRev, err = b.update(ctx, key, next, rev)
		} else {
			newRev, err = b.create(ctx, key, next)
		}
		if err != nil {
			return fmt.Errorf("mutate: %w", err)
		}
		out, outRev = next, newRev
		return nil
	})
	if err != nil {
		var zero T
		return zero, 0, err
	}
	return out, outRev, nil
}

// Keys returns the keys that start with prefix and are not deleted, sorted.
// An empty prefix lists the whole bucket; no keys is an empty result, not an
// error. It reads through one short-lived filtered watcher (the server
// filters on the prefix's whole '.'-separated tokens, e.g. "machine.c1."
// becomes "machine.c1.>"), with metadata only.
func (b *Bucket[T]) Keys(ctx context.Context, prefix string) ([]string, error) {
	ctx, cancel := withDefaultTimeout(ctx, b.timeout)
	defer cancel()
	seen := make(map[string]struct{})
	err := scan(ctx, b.kv, prefix, true, func(e jetstream.KeyValueEntry) error {
		seen[e.Key()] = struct{}{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("keys %q: %w", prefix, err)
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}

// List returns the decoded entries whose keys start with prefix, sorted by
// key: a consistent snapshot of the latest value of each key as of one
// moment (like [Bucket.Keys], through one short-lived filtered watcher). A
// value that does not decode as T fails the whole call (see
// [Bucket.ListSkipping]).
func (b *Bucket[T]) List(ctx context.Context, prefix string) ([]Entry[T], error) {
	out, corrupt, err := b.ListSkipping(ctx, prefix)
	if err == nil && len(corrupt) > 0 {
		err = fmt.Errorf("list %q: %w", prefix, corrupt[0])
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListSkipping is List that leaves out the values that do not decode as T
// and returns them apart, sorted by key: one junk record does not hide the
// others. An error is a failed read.
func (b *Bucket[T]) ListSkipping(ctx context.Context, prefix string) ([]Entry[T], []*CorruptError, error) {
	ctx, cancel := withDefaultTimeout(ctx, b.timeout)
	defer cancel()
	latest := make(map[string]jetstream.KeyValueEntry)
	err := scan(ctx, b.kv, prefix, false, func(e jetstream.KeyValueEntry) error {
		if old, ok := latest[e.Key()]; !ok || e.Revision() > old.Revision() {
			latest[e.Key()] = e
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	out := make([]Entry[T], 0, len(latest))
	var corrupt []*CorruptError
	for k, e := range latest {
		v, err := b.decode(e.Key(), e.Revision(), e.Value())
		var ce *CorruptError
		switch {
		case errors.As(err, &ce):
			corrupt = append(corrupt, ce)
			continue
		case err != nil:
			return nil, nil, fmt.Errorf("list %q: key %s: %w", prefix, k, err)
		}
		out = append(out, Entry[T]{Key: k, Value: v, Revision: e.Revision()})
	}
	slices.SortFunc(out, func(a, b Entry[T]) int { return strings.Compare(a.Key, b.Key) })
	slices.SortFunc(corrupt, func(a, b *CorruptError) int { return strings.Compare(a.Key, b.Key) })
	return out, corrupt, nil
}

// scan calls fn for the latest, non-deleted entry of each key under prefix,
// in revision order, and returns once the watcher reports the end of the
// initial values. It fails rather than return a partial listing.
func scan(ctx context.Context, kv jetstream.KeyValue, prefix string, metaOnly bool, fn func(jetstream.KeyValueEntry) error) error {
	// The watcher lives as long as its ctx: cancel it on return.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	opts := []jetstream.WatchOpt{jetstream.IgnoreDeletes()}
	if metaOnly {
		opts = append(opts, jetstream.MetaOnly())
	}
	w, err := kv.WatchFiltered(wctx, []string{watchFilter(prefix)}, opts...)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer func() {
		_ = w.Stop()
		drain(w)
	}()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watcher closed before the end of the initial values")
			}
			if e == nil {
				return nil
			}
			if !strings.HasPrefix(e.Key(), prefix) {
				continue
			}
			if err := fn(e); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Encode marshals v with protobuf binary, deterministically (map entries in
// key order), so that equal values produce equal bytes.
func Encode[T proto.Message](v T) ([]byte, error) {
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return data, nil
}

// New returns the constructor of message M that NewBucket, NewView and
// Decode take: store.New[capnv1.Machine]() makes a new(capnv1.Machine).
func New[M any, PM interface {
	*M
	proto.Message
}]() func() PM {
	return func() PM { return new(M) }
}

// Decode unmarshals protobuf binary data into a new T from newT.
func Decode[T proto.Message](data []byte, newT func() T) (T, error) {
	v := newT()
	if err := proto.Unmarshal(data, v); err != nil {
		var zero T
		return zero, fmt.Errorf("decode %T: %w", v, err)
	}
	return v, nil
}
