package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func TestBucketCAS(t *testing.T) {
	kv := newKV(t)
	b := NewBucket(kv, newPool)
	ctx := testCtx(t)

	mustCreate := func(t *testing.T, key string) uint64 {
		t.Helper()
		rev, err := b.Create(ctx, key, pool(key, 1))
		if err != nil {
			t.Fatalf("create %s: %v", key, err)
		}
		return rev
	}
	tests := []struct {
		name string
		// run sets the key up and returns the error of the operation under
		// test.
		run     func(t *testing.T, key string) error
		wantErr []error // every one must match; nil means success
	}{
		{
			name: "create new key",
			run: func(t *testing.T, key string) error {
				rev, err := b.Create(ctx, key, pool(key, 1))
				if err == nil && rev == 0 {
					t.Error("create returned revision 0")
				}
				return err
			},
		},
		{
			name: "update with the revision read",
			run: func(t *testing.T, key string) error {
				rev := mustCreate(t, key)
				next, err := b.Update(ctx, key, pool(key, 2), rev)
				if err == nil && next <= rev {
					t.Errorf("update revision %d, want > %d", next, rev)
				}
				return err
			},
		},
		{
			name: "update with a stale revision",
			run: func(t *testing.T, key string) error {
				rev := mustCreate(t, key)
				if _, err := b.Update(ctx, key, pool(key, 2), rev); err != nil {
					t.Fatal(err)
				}
				_, err := b.Update(ctx, key, pool(key, 3), rev)
				return err
			},
			wantErr: []error{ErrConflict, jetstream.ErrKeyRevisionMismatch},
		},
		{
			name: "update of a missing key",
			run: func(t *testing.T, key string) error {
				_, err := b.Update(ctx, key, pool(key, 3), 1)
				return err
			},
			wantErr: []error{ErrConflict, jetstream.ErrKeyRevisionMismatch},
		},
		{
			name: "create of an existing key",
			run: func(t *testing.T, key string) error {
				mustCreate(t, key)
				_, err := b.Create(ctx, key, pool(key, 2))
				return err
			},
			wantErr: []error{ErrConflict, jetstream.ErrKeyExists},
		},
		{
			name: "create after delete",
			run: func(t *testing.T, key string) error {
				rev := mustCreate(t, key)
				if err := b.Delete(ctx, key, rev); err != nil {
					t.Fatal(err)
				}
				_, err := b.Create(ctx, key, pool(key, 2))
				return err
			},
		},
		{
			name: "create after purge",
			run: func(t *testing.T, key string) error {
				mustCreate(t, key)
				if err := kv.Purge(ctx, key); err != nil {
					t.Fatal(err)
				}
				_, err := b.Create(ctx, key, pool(key, 2))
				return err
			},
		},
		{
			name: "delete with the revision read",
			run: func(t *testing.T, key string) error {
				return b.Delete(ctx, key, mustCreate(t, key))
			},
		},
		{
			name: "delete with a stale revision",
			run: func(t *testing.T, key string) error {
				rev := mustCreate(t, key)
				if _, err := b.Update(ctx, key, pool(key, 2), rev); err != nil {
					t.Fatal(err)
				}
				return b.Delete(ctx, key, rev)
			},
			wantErr: []error{ErrConflict, jetstream.ErrKeyRevisionMismatch},
		},
		{
			name: "delete of a missing key is not an error",
			run: func(t *testing.T, key string) error {
				return b.Delete(ctx, key, 7)
			},
		},
		{
			name: "delete of a deleted key is not an error",
			run: func(t *testing.T, key string) error {
				rev := mustCreate(t, key)
				if err := b.Delete(ctx, key, rev); err != nil {
					t.Fatal(err)
				}
				return b.Delete(ctx, key, rev)
			},
		},
		{
			name: "get of a missing key",
			run: func(t *testing.T, key string) error {
				_, _, err := b.Get(ctx, key)
				return err
			},
			wantErr: []error{ErrNotFound, jetstream.ErrKeyNotFound},
		},
		{
			name: "get of a deleted key",
			run: func(t *testing.T, key string) error {
				if err := b.Delete(ctx, key, mustCreate(t, key)); err != nil {
					t.Fatal(err)
				}
				_, _, err := b.Get(ctx, key)
				return err
			},
			wantErr: []error{ErrNotFound},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "pool.c1.p" + string(rune('a'+i))
			err := tt.run(t, key)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %v", tt.wantErr)
			}
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("error %q does not match %q", err, want)
				}
			}
		})
	}
}

func TestBucketGetRoundTrip(t *testing.T) {
	b := NewBucket(newKV(t), newPool)
	ctx := testCtx(t)
	want := &capnv1.PoolStatus{Name: "workers", Desired: 3, Replicas: 2, Version: "v1.31.0"}
	rev, err := b.Create(ctx, "pool.c1.workers", want)
	if err != nil {
		t.Fatal(err)
	}
	got, gotRev, err := b.Get(ctx, "pool.c1.workers")
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) || gotRev != rev {
		t.Fatalf("got %v@%d, want %v@%d", got, gotRev, want, rev)
	}
}

func TestMutate(t *testing.T) {
	kv := newKV(t)
	b := NewBucket(kv, newPool)
	ctx := testCtx(t)
	inc := func(cur *capnv1.PoolStatus, _ bool) (*capnv1.PoolStatus, error) {
		cur.Replicas++
		return cur, nil
	}
	tests := []struct {
		name     string
		initial  *capnv1.PoolStatus // nil: key missing
		fn       func(cur *capnv1.PoolStatus, exists bool) (*capnv1.PoolStatus, error)
		wantErr  error
		wantRep  int32
		wantGone bool // the key is missing afterwards
		wantSame bool // the revision did not change (no write)
	}{
		{name: "creates a missing key", fn: inc, wantRep: 1},
		{name: "updates an existing key", initial: pool("p", 4), fn: inc, wantRep: 5},
		{
			name: "sees exists", initial: pool("p", 4),
			fn: func(cur *capnv1.PoolStatus, exists bool) (*capnv1.PoolStatus, error) {
				if !exists {
					return nil, errors.New("exists is false")
				}
				return cur, nil
			},
			wantRep: 4, wantSame: true,
		},
		{
			name: "ErrNoChange skips the write", initial: pool("p", 4),
			fn: func(cur *capnv1.PoolStatus, _ bool) (*capnv1.PoolStatus, error) {
				cur.Replicas = 99 // must not be written
				return nil, ErrNoChange
			},
			wantRep: 4, wantSame: true,
		},
		{
			name: "an equal value skips the write", initial: pool("p", 4),
			fn: func(_ *capnv1.PoolStatus, _ bool) (*capnv1.PoolStatus, error) {
				return pool("p", 4), nil
			},
			wantRep: 4, wantSame: true,
		},
		{
			name: "ErrDelete deletes", initial: pool("p", 4),
			fn: func(*capnv1.PoolStatus, bool) (*capnv1.PoolStatus, error) {
				return nil, ErrDelete
			},
			wantGone: true,
		},
		{
			name: "ErrDelete on a missing key",
			fn: func(*capnv1.PoolStatus, bool) (*capnv1.PoolStatus, error) {
				return nil, ErrDelete
			},
			wantGone: true,
		},
		{
			name: "fn error stops", initial: pool("p", 4),
			fn: func(*capnv1.PoolStatus, bool) (*capnv1.PoolStatus, error) {
				return nil, errTest
			},
			wantErr: errTest, wantRep: 4, wantSame: true,
		},
		{
			name: "nil value is refused", initial: pool("p", 4),
			fn: func(*capnv1.PoolStatus, bool) (*capnv1.PoolStatus, error) {
				return nil, nil
			},
			wantErr: errAny, wantRep: 4, wantSame: true,
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "mutate.k" + string(rune('a'+i))
			var before uint64
			if tt.initial != nil {
				rev, err := b.Create(ctx, key, tt.initial)
				if err != nil {
					t.Fatal(err)
				}
				before = rev
			}
			var calls int
			got, rev, err := b.Mutate(ctx, key, func(cur *capnv1.PoolStatus, exists bool) (*capnv1.PoolStatus, error) {
				calls++
				return tt.fn(cur, exists)
			})
			if calls != 1 {
				t.Errorf("fn called %d times, want 1", calls)
			}
			switch {
			case tt.wantErr == errAny:
				if err == nil {
					t.Fatal("no error")
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error %v, want %v", err, tt.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			}

			stored, storedRev, gerr := b.Get(ctx, key)
			if tt.wantGone {
				if !errors.Is(gerr, ErrNotFound) {
					t.Fatalf("after mutate get: %v, want ErrNotFound", gerr)
				}
				if rev != 0 {
					t.Errorf("mutate revision %d after delete, want 0", rev)
				}
				return
			}
			if gerr != nil {
				t.Fatal(gerr)
			}
			if stored.GetReplicas() != tt.wantRep {
				t.Errorf("stored replicas %d, want %d", stored.GetReplicas(), tt.wantRep)
			}
			if tt.wantSame && storedRev != before {
				t.Errorf("revision %d, want unchanged %d", storedRev, before)
			}
			if tt.wantErr == nil && (!proto.Equal(got, stored) || rev != storedRev) {
				t.Errorf("mutate returned %v@%d, stored %v@%d", got, rev, stored, storedRev)
			}
		})
	}
}

var (
	errTest = errors.New("test error")
	errAny  = errors.New("any error")
)

// TestMutateRace makes two writers read the same revision every round, so
// that exactly one compare-and-set wins and the other must retry from a
// fresh read.
func TestMutateRace(t *testing.T) {
	b := NewBucket(newKV(t), newPool)
	ctx := testCtx(t)
	const (
		key     = "pool.c1.workers"
		writers = 2
		rounds  = 20
	)
	var calls, conflicts atomic.Int64
	for round := range rounds {
		var (
			ready sync.WaitGroup // both writers have read
			done  sync.WaitGroup
		)
		ready.Add(writers)
		errs := make([]error, writers)
		for w := range writers {
			done.Add(1)
			go func() {
				defer done.Done()
				attempt := 0
				_, _, errs[w] = b.Mutate(ctx, key, func(cur *capnv1.PoolStatus, _ bool) (*capnv1.PoolStatus, error) {
					calls.Add(1)
					attempt++
					if attempt == 1 {
						ready.Done()
						ready.Wait()
					} else {
						conflicts.Add(1)
						// The retry starts from the winner's write.
						if want := int32(writers*round + 1); cur.Replicas != want {
							t.Errorf("round %d: retry read replicas %d, want %d", round, cur.Replicas, want)
						}
					}
					cur.Replicas++
					return cur, nil
				})
			}()
		}
		done.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	got, _, err := b.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if want := int32(writers * rounds); got.Replicas != want {
		t.Errorf("replicas %d, want %d", got.Replicas, want)
	}
	// Each round: one first attempt wins, the other loses once and retries.
	if conflicts.Load() != rounds || calls.Load() != rounds*(writers+1) {
		t.Errorf("conflicts %d calls %d, want %d and %d", conflicts.Load(), calls.Load(), rounds, rounds*(writers+1))
	}
}

// TestMutateContention lets several writers race freely: no increment may
// be lost whatever the interleaving.
func TestMutateContention(t *testing.T) {
	b := NewBucket(newKV(t), newPool, WithAttempts(1000))
	ctx := testCtx(t)
	const writers, each = 4, 25
	var calls atomic.Int64
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range each {
				_, _, err := b.Mutate(ctx, "counter", func(cur *capnv1.PoolStatus, _ bool) (*capnv1.PoolStatus, error) {
					calls.Add(1)
					cur.Replicas++
					return cur, nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, _, err := b.Get(ctx, "counter")
	if err != nil {
		t.Fatal(err)
	}
	if got.Replicas != writers*each {
		t.Errorf("replicas %d, want %d", got.Replicas, writers*each)
	}
	t.Logf("%d increments took %d attempts (%d conflicts)", writers*each, calls.Load(), calls.Load()-writers*each)
}

func TestMutateGivesUp(t *testing.T) {
	kv := newKV(t)
	b := NewBucket(kv, newPool, WithAttempts(3))
	ctx := testCtx(t)
	var calls int
	_, _, err := b.Mutate(ctx, "k", func(cur *capnv1.PoolStatus, _ bool) (*capnv1.PoolStatus, error) {
		calls++
		put(t, kv, "k", int32(100+calls)) // another writer always gets in first
		cur.Replicas++
		return cur, nil
	})
	if !errors.Is(err, ErrConflict) || calls != 3 {
		t.Fatalf("err %v after %d calls, want ErrConflict after 3", err, calls)
	}
}

func TestKeysAndList(t *testing.T) {
	kv := newKV(t)
	b := NewBucket(kv, newPool)
	ctx := testCtx(t)
	for i, k := range []string{"machine.c1.a", "machine.c1.b", "machine.c10.x", "cluster.c1", "machine.c1.gone"} {
		put(t, kv, k, int32(i))
	}
	put(t, kv, "machine.c1.b", 42) // latest value wins
	if err := kv.Delete(ctx, "machine.c1.gone"); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		prefix string
		want   []string
	}{
		{"machine.c1.", []string{"machine.c1.a", "machine.c1.b"}},
		{"machine.c1", []string{"machine.c1.a", "machine.c1.b", "machine.c10.x"}},
		{"machine.", []string{"machine.c1.a", "machine.c1.b", "machine.c10.x"}},
		{"", []string{"cluster.c1", "machine.c1.a", "machine.c1.b", "machine.c10.x"}},
		{"node.", []string{}},
	}
	for _, tt := range tests {
		t.Run("prefix "+tt.prefix, func(t *testing.T) {
			keys, err := b.Keys(ctx, tt.prefix)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(keys, tt.want) {
				t.Errorf("keys %v, want %v", keys, tt.want)
			}
			list, err := b.List(ctx, tt.prefix)
			if err != nil {
				t.Fatal(err)
			}
			var listed []string
			for _, e := range list {
				listed = append(listed, e.Key)
				if e.Value.Name != e.Key || e.Revision == 0 {
					t.Errorf("entry %s: %v@%d", e.Key, e.Value, e.Revision)
				}
				if e.Key == "machine.c1.b" && e.Value.Replicas != 42 {
					t.Errorf("machine.c1.b replicas %d, want the latest 42", e.Value.Replicas)
				}
			}
			if !slices.Equal(listed, tt.want) && len(tt.want) > 0 {
				t.Errorf("list %v, want %v", listed, tt.want)
			}
		})
	}

	if _, err := kv.PutString(ctx, "machine.c1.bad", "\xff\xff not protobuf"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.List(ctx, "machine.c1."); !errors.Is(err, ErrCorrupt) {
		t.Errorf("list of an undecodable value: %v, want ErrCorrupt", err)
	}
	list, corrupt, err := b.ListSkipping(ctx, "machine.c1.")
	if err != nil || len(list) != 2 || len(corrupt) != 1 || corrupt[0].Key != "machine.c1.bad" || corrupt[0].Revision == 0 {
		t.Fatalf("ListSkipping: %d entries, corrupt %v, %v; want 2 and machine.c1.bad", len(list), corrupt, err)
	}
	_, _, err = b.Get(ctx, "machine.c1.bad")
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Revision != corrupt[0].Revision || !strings.Contains(err.Error(), "stored record is corrupt: machine.c1.bad at revision") {
		t.Errorf("Get of an undecodable value: %v, want a CorruptError at its revision", err)
	}
	if err := b.Delete(ctx, "machine.c1.bad", ce.Revision); err != nil {
		t.Errorf("compare-and-set delete at the corrupt revision: %v", err)
	}
}

func TestBucketDefaultTimeout(t *testing.T) {
	b := NewBucket(newKV(t), newPool, WithTimeout(1))
	// A 1ns timeout expires before any request completes.
	if _, _, err := b.Get(context.Background(), "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get with an expired default timeout: %v, want DeadlineExceeded", err)
	}
}

func TestNew(t *testing.T) {
	newT := New[capnv1.PoolStatus]()
	a, b := newT(), newT()
	if a == nil || a == b {
		t.Fatalf("New's constructor made %p and %p; want two distinct messages", a, b)
	}
	data, err := Encode(&capnv1.PoolStatus{Name: "workers", Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(data, New[capnv1.PoolStatus]())
	if err != nil || got.GetName() != "workers" || got.GetReplicas() != 2 {
		t.Fatalf("Decode with New = %v, %v; want workers with 2 replicas", got, err)
	}
}
