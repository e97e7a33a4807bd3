package reconcile

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capn-dev/capn/internal/testkit"
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
	testkit.WaitFor(t, 2*time.Second, "the key added after the earlier delay", func() bool { return q.Len() > 0 })
	if q.Len() != 1 {
		t.Fatalf("%d keys queued, want 1", q.Len())
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
	testkit.WaitFor(t, 2*time.Second, "the rescheduled key", func() bool { return q.Len() > 0 })
	// The replaced and cancelled timers were due when sooner was: a marker
	// due later comes after anything they would have queued.
	q.AddAfter("marker", 50*time.Millisecond)
	testkit.WaitFor(t, 2*time.Second, "the marker", func() bool { return q.Len() >= 2 })
	var got []string
	for q.Len() > 0 {
		k, _ := q.Get()
		got = append(got, k)
	}
	if !slices.Equal(got, []string{"sooner", "marker"}) {
		t.Fatalf("queued %q, want sooner, then the marker", got)
	}
}

// TestLoopLatestResultDecides checks that a reconcile that asks for no
// requeue cancels the timer an earlier reconcile of the key asked for: a
// machine-manager re-ask 30s after a bootstrap request must not fire once
// the answer came and the machine moved on.
func TestLoopLatestResultDecides(t *testing.T) {
	q := NewQueue()
	var calls atomic.Int32
	var marker atomic.Bool
	r := Func(func(ctx context.Context, key string) (Result, error) {
		if key == "marker" {
			marker.Store(true)
			return Result{}, nil
		}
		if calls.Add(1) == 1 {
			return Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		return Result{}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go (&Loop{Queue: q, Reconciler: r, Workers: 1}).Run(ctx)
	q.Add("k")
	testkit.WaitFor(t, 2*time.Second, "the first reconcile", func() bool { return calls.Load() >= 1 })
	q.Add("k") // a change: reconciled at once, and asks for nothing more
	testkit.WaitFor(t, 2*time.Second, "the second reconcile", func() bool { return calls.Load() >= 2 })
	// A marker due after the first requeue would have been: one worker
	// reconciles in queue order, so a wrong requeue would come first.
	q.AddAfter("marker", 200*time.Millisecond)
	testkit.WaitFor(t, 2*time.Second, "the marker reconciled", marker.Load)
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d reconciles, want 2: the first one's requeue fired after the second asked for none", n)
	}
}

func TestLoopNeverRunsOneKeyConcurrentlyAndRetries(t *testing.T) {
	q := NewQueue()
	var mu sync.Mutex
	running := map[string]bool{}
	var calls, overlaps atomic.Int32
	var k0Done atomic.Bool // k0 reconciled without error (after its failure)
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
		time.Sleep(time.Millisecond) //sleep-ok: a reconcile that lasts, so an overlap would show
		mu.Lock()
		running[key] = false
		mu.Unlock()
		if fail {
			return Result{}, errors.New("transient")
		}
		if key == "k0" {
			k0Done.Store(true)
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
	testkit.WaitFor(t, 5*time.Second, "k0 failed, then reconciled, and nothing queued", func() bool {
		return errs.Load() >= 1 && k0Done.Load() && q.Len() == 0
	})
	cancel()
	<-done
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping reconciles of one key", overlaps.Load())
	}
	if errs.Load() != 1 || calls.Load() < 4 {
		t.Fatalf("errors %d calls %d; want the failed key retried", errs.Load(), calls.Load())
	}
}

// A burst of changes within the window is one reconcile; a reconcile's
// Reschedule does not cancel a change's window; a key being reconciled
// when its window ends comes back after Done; a key handed out drops its
// pending window (the reconcile reads the state the window's changes
// left).
func TestAddCoalesced(t *testing.T) {
	q := NewQueue()
	defer q.ShutDown()
	const window = 30 * time.Millisecond
	for range 50 {
		q.AddCoalesced("burst", window)
	}
	if q.Len() != 0 {
		t.Fatalf("len %d right after the burst, want 0: the window has not ended", q.Len())
	}
	testkit.WaitFor(t, 2*time.Second, "the burst's key", func() bool { return q.Len() > 0 })
	k, _ := q.Get()
	if k != "burst" {
		t.Fatalf("got %q, want burst", k)
	}
	// A change while "burst" is reconciled; the reconcile then asks for
	// nothing (Reschedule 0), which must not cancel the change's window.
	q.AddCoalesced("burst", window)
	q.Reschedule("burst", 0)
	testkit.WaitFor(t, 2*time.Second, "the window's end marking burst for after its reconcile", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.dirty["burst"]
	})
	if q.Len() != 0 {
		t.Fatalf("len %d, want 0: burst is still being reconciled", q.Len())
	}
	q.Done("burst")
	if q.Len() != 1 {
		t.Fatalf("len %d after Done, want 1: the change during the reconcile is queued again", q.Len())
	}
	drain(t, q, 1)

	// Handed out with a window pending: the window is dropped.
	q.AddCoalesced("k", window)
	q.Add("k")
	if k, _ := q.Get(); k != "k" {
		t.Fatalf("got %q, want k", k)
	}
	q.mu.Lock()
	pending := len(q.soon)
	q.mu.Unlock()
	if pending != 0 {
		t.Fatalf("%d windows pending after Get, want 0: k's window ends with its reconcile", pending)
	}
	q.Done("k")
	if q.Len() != 0 {
		t.Fatalf("len %d after Done, want 0", q.Len())
	}

	// window <= 0 is Add.
	q.AddCoalesced("now", 0)
	if q.Len() != 1 {
		t.Fatalf("len %d, want 1", q.Len())
	}
}

func drain(t *testing.T, q *Queue, n int) {
	t.Helper()
	for range n {
		k, _ := q.Get()
		q.Done(k)
	}
}
