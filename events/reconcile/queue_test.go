package reconcile

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestQueueDedupAndDirty(t *testing.T) {
	q := NewQueue()
	q.Add("a")
	q.Add("a")
	q.Add("b")
	if q.Len() != 2 {
		t.Fatalf("len %d, want 2 (a deduplicated)", q.Len())
	}
	k, _ := q.Get()
	if k != "a" {
		t.Fatalf("got %q, want a (FIFO)", k)
	}
	q.Add("a") // while processing: must come back after Done, not now
	if q.Len() != 1 {
		t.Fatalf("len %d, want 1: a key being processed is not handed out twice", q.Len())
	}
	q.Done("a")
	if q.Len() != 2 {
		t.Fatalf("len %d, want 2: a re-added during processing is queued on Done", q.Len())
	}
}

func TestAddAfterKeepsEarliest(t *testing.T) {
	q := NewQueue()
	q.AddAfter("k", 20*time.Millisecond)
	q.AddAfter("k", time.Hour)
	deadline := time.Now().Add(2 * time.Second)
	for q.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if q.Len() != 1 {
		t.Fatal("key not added after the earlier delay")
	}
	q.ShutDown()
}

func TestReschedule(t *testing.T) {
	q := NewQueue()
	defer q.ShutDown()
	q.AddAfter("later", 20*time.Millisecond)
	q.Reschedule("later", time.Hour) // replaces the sooner one
	q.AddAfter("cancelled", 20*time.Millisecond)
	q.Reschedule("cancelled", 0)
	q.AddAfter("sooner", time.Hour)
	q.Reschedule("sooner", 20*time.Millisecond)
	deadline := time.Now().Add(2 * time.Second)
	for q.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the replaced and cancelled timers would have fired by now
	if q.Len() != 1 {
		t.Fatalf("%d keys queued, want 1", q.Len())
	}
	if k, _ := q.Get(); k != "sooner" {
		t.Fatalf("queued %q, want sooner", k)
	}
}

// TestLoopLatestResultDecides checks that a reconcile that asks for no
// requeue cancels the timer an earlier reconcile of the key asked for: a
// machine-manager re-ask 30s after a bootstrap request must not fire once
// the answer came and the machine moved on.
func TestLoopLatestResultDecides(t *testing.T) {
	q := NewQueue()
	var calls atomic.Int32
	r := Func(func(ctx context.Context, key string) (Result, error) {
		if calls.Add(1) == 1 {
			return Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		return Result{}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go (&Loop{Queue: q, Reconciler: r, Workers: 1}).Run(ctx)
	q.Add("k")
	for calls.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	q.Add("k") // a change: reconciled at once, and asks for nothing more
	time.Sleep(300 * time.Millisecond)
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d reconciles, want 2: the first one's requeue fired after the second asked for none", n)
	}
}

func TestLoopNeverRunsOneKeyConcurrentlyAndRetries(t *testing.T) {
	q := NewQueue()
	var mu sync.Mutex
	running := map[string]bool{}
	var calls, overlaps atomic.Int32
	failOnce := map[string]bool{"k0": true}
	r := Func(func(ctx context.Context, key string) (Result, error) {
		mu.Lock()
		if running[key] {
			overlaps.Add(1)
		}
		running[key] = true
		fail := failOnce[key]
		delete(failOnce, key)
		mu.Unlock()
		calls.Add(1)
		time.Sleep(time.Millisecond)
		mu.Lock()
		running[key] = false
		mu.Unlock()
		if fail {
			return Result{}, errors.New("transient")
		}
		return Result{}, nil
	})
	var errs atomic.Int32
	l := &Loop{Queue: q, Reconciler: r, Workers: 4, Backoff: Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond},
		OnError: func(string, error, int) { errs.Add(1) }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	for i := range 200 {
		q.Add([]string{"k0", "k1", "k2"}[i%3])
	}
	deadline := time.Now().Add(5 * time.Second)
	for (errs.Load() < 1 || q.Len() > 0) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	<-done
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping reconciles of one key", overlaps.Load())
	}
	if errs.Load() != 1 || calls.Load() < 4 {
		t.Fatalf("errors %d calls %d; want the failed key retried", errs.Load(), calls.Load())
	}
}
