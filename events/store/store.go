// Package store is the typed state store over JetStream KV that every capn
// service shares.
//
// Two halves:
//
//   - [Bucket] reads and writes protobuf values with compare-and-set on the
//     KV revision: [Bucket.Create], [Bucket.Update], [Bucket.Delete], and
//     [Bucket.Mutate], the read-modify-write loop that retries a lost race
//     from a fresh read.
//   - [Cache] holds the whole bucket in memory behind ONE KV watcher per
//     bucket per process and fans its changes out to any number of
//     [Subscription]s, each with its own queue, so a slow reconciler never
//     blocks the watcher or its neighbours. It resumes after a reconnect or a
//     server restart from the last applied revision, and a periodic resync
//     repairs anything it may have missed.
//
// Keys use '.' separators ("machine.c1.m1"); a prefix is a plain string
// prefix of the key ("machine.c1.").
package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

var (
	// ErrNotFound means the key does not exist or its last operation was a
	// delete or purge. Errors returned for a missing key also wrap
	// jetstream.ErrKeyNotFound.
	ErrNotFound = errors.New("store: key not found")

	// ErrConflict means a compare-and-set lost: the key's revision was not
	// the one the write expected (Update, Delete), or the key already existed
	// (Create). The error also wraps the jetstream error that caused it, so
	// errors.Is(err, jetstream.ErrKeyRevisionMismatch) or
	// errors.Is(err, jetstream.ErrKeyExists) hold as well. Re-read and retry:
	// see [RetryOnConflict] and [Bucket.Mutate].
	ErrConflict = errors.New("store: revision conflict")

	// ErrNoChange, returned by a [Bucket.Mutate] function, skips the write
	// and makes Mutate return the current value and revision.
	ErrNoChange = errors.New("store: no change")

	// ErrDelete, returned by a [Bucket.Mutate] function, makes Mutate delete
	// the key with a compare-and-set on the revision it read.
	ErrDelete = errors.New("store: delete")

	// ErrCorrupt means a stored value does not decode as the bucket's type
	// (a junk write, a record of another type under the key). Errors
	// matching it are a *[CorruptError], which says where.
	ErrCorrupt = errors.New("stored record is corrupt")
)

// CorruptError is a stored value that does not decode: the key, the
// revision it was read at (for a compare-and-set delete of it) and the
// decode error. It matches [ErrCorrupt].
type CorruptError struct {
	Key      string
	Revision uint64
	Err      error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s: %s at revision %d: %v", ErrCorrupt, e.Key, e.Revision, e.Err)
}

// Is makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func (e *CorruptError) Unwrap() error { return e.Err }

// DefaultTimeout bounds a call whose ctx carries no deadline.
const DefaultTimeout = 5 * time.Second

// Entry is one decoded value with its key and the KV revision it was read
// at (the stream sequence of the write; revisions increase across the whole
// bucket, not per key).
type Entry[T proto.Message] struct {
	Key      string
	Value    T
	Revision uint64
}

// withDefaultTimeout applies d to ctx unless ctx already has a deadline.
func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// isConflict reports whether err is a lost compare-and-set, however nats.go
// reported it: ErrKeyRevisionMismatch (Update, Delete), ErrKeyExists
// (Create), or a bare "wrong last sequence" API error (10071, or 10164 on
// replicated streams), which Create returns when it races on a deleted key.
func isConflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrConflict) ||
		errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return false
}

// conflict wraps a lost compare-and-set so that it matches ErrConflict and
// still matches the jetstream error underneath.
func conflict(op, key string, err error) error {
	return fmt.Errorf("%s %s: %w: %w", op, key, ErrConflict, err)
}

// watchFilter turns a key prefix into the NATS subject filter that covers
// it. Subjects match whole tokens, so a prefix that does not end on a '.'
// is widened to its last whole token; callers filter the rest in memory.
func watchFilter(prefix string) string {
	i := strings.LastIndexByte(prefix, '.')
	if i < 0 {
		return jetstream.AllKeys
	}
	return prefix[:i+1] + jetstream.AllKeys
}

// drain reads a stopped watcher's channel until nats.go closes it, so that
// nats.go's delivery goroutine, which may be blocked sending to the full
// channel, can finish and exit.
func drain(w jetstream.KeyWatcher) {
	go func() {
		for range w.Updates() {
		}
	}()
}
