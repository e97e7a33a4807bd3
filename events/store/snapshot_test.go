package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events/natstest"
)

func TestSnapshotFoldsHistoryDeletesAndPurges(t *testing.T) {
	js, kv := newJSKV(t)
	ctx := testCtx(t)
	mustPut := func(k, v string) uint64 {
		rev, err := kv.PutString(ctx, k, v)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	empty, err := ReadSnapshots(ctx, js.Conn(), SnapshotOptions{}, kv.Bucket())
	if err != nil || len(empty) != 1 || len(empty[0].Entries) != 0 || empty[0].Sequence != 0 {
		t.Fatalf("empty bucket: %+v, %v", empty, err)
	}
	mustPut("a", "1")
	aRev := mustPut("a", "2")
	mustPut("b", "1")
	if err := kv.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	mustPut("c", "1")
	if err := kv.Purge(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	dRev := mustPut("d.e", "x")
	snaps, err := ReadSnapshots(ctx, js.Conn(), SnapshotOptions{}, kv.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	s := snaps[0]
	if s.Bucket != kv.Bucket() || s.Stream != "KV_"+kv.Bucket() || s.Sequence != dRev {
		t.Errorf("snapshot %s/%s at %d, want at %d", s.Bucket, s.Stream, s.Sequence, dRev)
	}
	if len(s.Entries) != 2 {
		t.Fatalf("entries %+v, want a and d.e", s.Entries)
	}
	if e := s.Entries[0]; e.Key != "a" || string(e.Value) != "2" || e.Revision != aRev || e.Created.IsZero() {
		t.Errorf("a: %+v, want its last value at revision %d", e, aRev)
	}
	if e := s.Entries[1]; e.Key != "d.e" || string(e.Value) != "x" || e.Revision != dRev {
		t.Errorf("d.e: %+v", e)
	}
	if s.Bytes() != 2 || s.ReadAt.IsZero() || s.Took <= 0 {
		t.Errorf("bytes %d, read at %v, took %v", s.Bytes(), s.ReadAt, s.Took)
	}
}

// A writer rewrites k00..k99 round robin with an ever-growing counter
// while snapshots are read: at any one instant the values are 100
// consecutive numbers, so a snapshot that is one point holds exactly
// those; one taken key by key while the writer runs would not.
func TestSnapshotIsOnePointWhileWritersRun(t *testing.T) {
	js, _ := newJSKV(t)
	ctx := testCtx(t)
	name := fmt.Sprintf("snapshot_point_%d", bucketSeq.Add(1))
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	var written atomic.Int64
	for i := range n {
		if _, err := kv.PutString(ctx, fmt.Sprintf("k%02d", i), strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	written.Store(n)
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := n; wctx.Err() == nil; i++ {
			if _, err := kv.PutString(wctx, fmt.Sprintf("k%02d", i%n), strconv.Itoa(i)); err != nil {
				return
			}
			written.Store(int64(i + 1))
		}
	}()
	defer func() { stop(); wg.Wait() }()
	reads, during := 0, int64(0)
	for reads < 20 {
		before := written.Load()
		snaps, err := ReadSnapshots(ctx, js.Conn(), SnapshotOptions{}, name)
		if err != nil {
			t.Fatal(err)
		}
		during += written.Load() - before
		reads++
		s := snaps[0]
		if len(s.Entries) != n {
			t.Fatalf("read %d: %d keys, want %d", reads, len(s.Entries), n)
		}
		lo, hi := int(^uint(0)>>1), -1
		seen := map[int]bool{}
		for _, e := range s.Entries {
			v, err := strconv.Atoi(string(e.Value))
			if err != nil {
				t.Fatal(err)
			}
			if e.Revision > s.Sequence {
				t.Errorf("read %d: %s at revision %d, after the point %d", reads, e.Key, e.Revision, s.Sequence)
			}
			seen[v] = true
			lo, hi = min(lo, v), max(hi, v)
		}
		if hi-lo != n-1 || len(seen) != n {
			t.Fatalf("read %d: values %d..%d (%d distinct): not one instant of the writer", reads, lo, hi, len(seen))
		}
	}
	if during == 0 {
		t.Fatal("the writer wrote nothing while the snapshots were read: the test proved nothing")
	}
	t.Logf("%d snapshots of %d keys, %d writes landed while they were read", reads, n, during)
}

func TestSnapshotOfSeveralBucketsKeepsTheirOrder(t *testing.T) {
	js, a := newJSKV(t)
	b := createKV(t, js)
	ctx := testCtx(t)
	if _, err := a.PutString(ctx, "x", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PutString(ctx, "x", "b"); err != nil {
		t.Fatal(err)
	}
	snaps, err := ReadSnapshots(ctx, js.Conn(), SnapshotOptions{}, b.Bucket(), a.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 2 || snaps[0].Bucket != b.Bucket() || string(snaps[0].Entries[0].Value) != "b" ||
		snaps[1].Bucket != a.Bucket() || string(snaps[1].Entries[0].Value) != "a" {
		t.Fatalf("snapshots %+v", snaps)
	}
	if !snaps[1].ReadAt.After(snaps[0].ReadAt) && !snaps[1].ReadAt.Equal(snaps[0].ReadAt) {
		t.Errorf("asked for %s before %s", snaps[1].Bucket, snaps[0].Bucket)
	}
}

func TestSnapshotRefusesABucketLargerThanOneRead(t *testing.T) {
	js, kv := newJSKV(t)
	ctx := testCtx(t)
	for i := range 50 {
		if _, err := kv.Put(ctx, fmt.Sprintf("k%d", i), make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := ReadSnapshots(ctx, js.Conn(), SnapshotOptions{MaxBytes: 1000}, kv.Bucket())
	if !errors.Is(err, ErrSnapshotTooLarge) {
		t.Fatalf("err = %v, want ErrSnapshotTooLarge", err)
	}
}

func TestSnapshotOfAMissingBucketFails(t *testing.T) {
	js, _ := newJSKV(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := ReadSnapshots(ctx, js.Conn(), SnapshotOptions{}, "no_such_bucket"); err == nil {
		t.Fatal("read a bucket that does not exist")
	}
}

// BenchmarkReadSnapshot reads a history-1 bucket of n keys (500-byte
// values) at one point while a writer puts as fast as it can, and reports
// the read's time and the longest put seen meanwhile: the writers' stall
// the isolated read costs.
func BenchmarkReadSnapshot(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			js, _ := newJSKV(b)
			ctx := context.Background()
			name := fmt.Sprintf("snapshot_bench_%d", bucketSeq.Add(1))
			kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, History: 1})
			if err != nil {
				b.Fatal(err)
			}
			value := make([]byte, 500)
			for i := range n {
				if _, err := kv.Put(ctx, fmt.Sprintf("machine.c%d.m%d", i/10, i%10), value); err != nil {
					b.Fatal(err)
				}
			}
			// The writer on a connection of its own, as a service has.
			wjs, _ := newJSKV(b)
			wkv, err := wjs.KeyValue(ctx, name)
			if err != nil {
				b.Fatal(err)
			}
			put := func(stop <-chan struct{}) time.Duration {
				var worst time.Duration
				for i := 0; ; i++ {
					select {
					case <-stop:
						return worst
					default:
					}
					start := time.Now()
					if _, err := wkv.Put(ctx, fmt.Sprintf("machine.c%d.m%d", (i%n)/10, i%10), value); err != nil {
						b.Error(err)
						return worst
					}
					worst = max(worst, time.Since(start))
				}
			}
			// The longest put without reads, for comparison.
			idle := make(chan struct{})
			var baseline time.Duration
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); baseline = put(idle) }()
			deadline := time.Now().Add(500 * time.Millisecond)
			natstest.WaitFor(b, time.Second, "half a second of puts", func() bool { return time.Now().After(deadline) })
			close(idle)
			wg.Wait()
			wctx, stop := context.WithCancel(ctx)
			var worst atomic.Int64
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; wctx.Err() == nil; i++ {
					start := time.Now()
					if _, err := wkv.Put(wctx, fmt.Sprintf("machine.c%d.m%d", (i%n)/10, i%10), value); err != nil {
						return
					}
					if d := int64(time.Since(start)); d > worst.Load() {
						worst.Store(d)
					}
				}
			}()
			b.ResetTimer()
			for range b.N {
				if _, err := ReadSnapshots(ctx, js.Conn(), SnapshotOptions{}, name); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			stop()
			wg.Wait()
			b.ReportMetric(float64(worst.Load())/1e6, "max-put-ms")
			b.ReportMetric(float64(baseline)/1e6, "max-put-idle-ms")
		})
	}
}
