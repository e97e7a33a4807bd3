package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Snapshot is one KV bucket read at one point: every key's value as of
// stream sequence Sequence, with no write interleaved.
//
// It is read with ONE direct-get batch request over the whole stream
// (seq 1 to the end). nats-server answers a batch under the stream's
// isolation lock, which its writes take too (nats-server's
// stream.isolateMu): while the answer is being made, no write to that
// bucket lands, so the messages are the stream as it stood at one instant,
// and folding them by key in sequence order (the last put wins, a delete
// or purge removes the key) gives every key's value at that instant. The
// writers are held for as long as the server takes to copy the bucket
// into its outbound queue (about a millisecond per thousand keys here;
// docs/operations.md has the figures). A bucket with history keeps older
// revisions in the stream: they are read and folded away.
type Snapshot struct {
	// Bucket is the KV bucket, Stream its stream (KV_<bucket>).
	Bucket, Stream string
	// Sequence is the point: the last stream sequence the read covered
	// (0 for an empty stream).
	Sequence uint64
	// Entries are the keys that exist at Sequence, sorted by key.
	Entries []SnapshotEntry
	// ReadAt is when the read was asked for, Took how long until its last
	// message was taken (an upper bound of when the server made it).
	ReadAt time.Time
	Took   time.Duration
}

// SnapshotEntry is one key of a Snapshot: its value as stored (sealed
// values stay sealed), its revision and when it was written.
type SnapshotEntry struct {
	Key      string
	Value    []byte
	Revision uint64
	Created  time.Time
}

// Bytes is the sum of the entries' value sizes.
func (s Snapshot) Bytes() int {
	n := 0
	for _, e := range s.Entries {
		n += len(e.Value)
	}
	return n
}

// DefaultSnapshotMaxBytes bounds one bucket's read (the server's answer
// to one batch request): a bucket larger than this cannot be read at one
// point and ReadSnapshots says so.
const DefaultSnapshotMaxBytes = 512 << 20

// SnapshotOptions tune ReadSnapshots; the zero value takes the defaults.
type SnapshotOptions struct {
	// MaxBytes bounds each bucket's read (default DefaultSnapshotMaxBytes).
	MaxBytes int
}

// ErrSnapshotTooLarge: a bucket holds more than one read may carry.
var ErrSnapshotTooLarge = errors.New("bucket too large to read at one point")

// ReadSnapshots reads each bucket at one point (see [Snapshot]). The
// requests are sent together, in the order given, in one flush: on a
// single server, whose client connection handles them one after the
// other, each bucket's point follows the previous one's by the time the
// previous read took, and Snapshot.ReadAt/Took say how long that was.
// Give the buckets in the reverse of the order writes flow between them
// (a record written in reaction to another is then never read without
// the record it reacted to).
//
// The NATS user needs to publish on $JS.API.DIRECT.GET.KV_<bucket> (the
// batch form names no key) and to receive on its inbox. ctx bounds the
// whole read (a default timeout applies when it has no deadline).
func ReadSnapshots(ctx context.Context, nc *nats.Conn, opts SnapshotOptions, buckets ...string) ([]Snapshot, error) {
	ctx, cancel := withDefaultTimeout(ctx, DefaultLoadTimeout)
	defer cancel()
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultSnapshotMaxBytes
	}
	req, err := json.Marshal(struct {
		Seq      uint64 `json:"seq"`
		Batch    int    `json:"batch"`
		MaxBytes int    `json:"max_bytes"`
	}{Seq: 1, Batch: 1 << 30, MaxBytes: opts.MaxBytes})
	if err != nil {
		return nil, err
	}
	type pending struct {
		sub *nats.Subscription
		at  time.Time
	}
	reads := make([]pending, len(buckets))
	defer func() {
		for _, r := range reads {
			if r.sub != nil {
				_ = r.sub.Unsubscribe()
			}
		}
	}()
	for i, b := range buckets {
		sub, err := nc.SubscribeSync(nc.NewRespInbox())
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", b, err)
		}
		// The answer comes as fast as the server can send it: never drop
		// any of it for a slow reader.
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", b, err)
		}
		reads[i] = pending{sub: sub}
	}
	for i, b := range buckets {
		reads[i].at = time.Now()
		if err := nc.PublishRequest("$JS.API.DIRECT.GET.KV_"+b, reads[i].sub.Subject, req); err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", b, err)
		}
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	out := make([]Snapshot, len(buckets))
	for i, b := range buckets {
		s, err := collectSnapshot(ctx, b, reads[i].sub, opts.MaxBytes)
		if err != nil {
			return nil, err
		}
		s.ReadAt, s.Took = reads[i].at, time.Since(reads[i].at)
		out[i] = s
	}
	return out, nil
}

// collectSnapshot folds one batch answer, message by message, until its
// end-of-batch status.
func collectSnapshot(ctx context.Context, bucket string, sub *nats.Subscription, maxBytes int) (Snapshot, error) {
	s := Snapshot{Bucket: bucket, Stream: "KV_" + bucket}
	prefix := "$KV." + bucket + "."
	byKey := map[string]SnapshotEntry{}
	fail := func(format string, args ...any) (Snapshot, error) {
		return Snapshot{}, fmt.Errorf("snapshot %s: "+format, append([]any{bucket}, args...)...)
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return fail("%w (%d keys read so far)", err, len(byKey))
		}
		if status := m.Header.Get("Status"); status != "" {
			switch status {
			case "204": // end of the batch
				if np, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64); np > 0 {
					return fail("%w: %d messages left after %d bytes (raise the read limit above %d bytes)", ErrSnapshotTooLarge, np, s.Bytes(), maxBytes)
				}
			case "404": // an empty stream
			case "503":
				return fail("no responders: is the bucket there, and may this user read it?")
			default:
				return fail("the server answered %s %s", status, m.Header.Get("Description"))
			}
			break
		}
		seq, err := strconv.ParseUint(m.Header.Get(nats.JSSequence), 10, 64)
		if err != nil {
			return fail("message without a sequence: %v", err)
		}
		subj := m.Header.Get(nats.JSSubject)
		key, ok := strings.CutPrefix(subj, prefix)
		if !ok {
			return fail("message on %s, outside the bucket", subj)
		}
		s.Sequence = max(s.Sequence, seq)
		switch m.Header.Get(kvOperation) {
		case "DEL", "PURGE":
			delete(byKey, key)
			continue
		}
		created, _ := time.Parse(time.RFC3339Nano, m.Header.Get(nats.JSTimeStamp))
		byKey[key] = SnapshotEntry{Key: key, Value: m.Data, Revision: seq, Created: created}
	}
	s.Entries = make([]SnapshotEntry, 0, len(byKey))
	for _, e := range byKey {
		s.Entries = append(s.Entries, e)
	}
	slices.SortFunc(s.Entries, func(a, b SnapshotEntry) int { return strings.Compare(a.Key, b.Key) })
	return s, nil
}

// kvOperation is the header of a KV delete or purge marker.
const kvOperation = "KV-Operation"
