// Package reconcile is the level-driven control loop every capn service
// shares: changes (from KV watches, events or timers) enqueue a key; workers
// call a Reconciler for it. A key is never reconciled by two workers at
// once, a key enqueued many times while waiting is reconciled once, and a
// failed reconcile is retried with exponential backoff. A Controller
// declares a service's watches, consumers and reconcile; Run wires them.
//
//	watch cache ─┐
//	events ──────┼─► Queue (dedup by key, delayed adds) ─► workers ─► Reconcile(key)
//	resync ──────┘         ▲                                  │
//	                       └──── requeue after / backoff ◄────┘
package reconcile

import (
	"context"
	"sync"
	"time"
)

// Queue is a de-duplicating work queue of string keys with delayed adds.
// It is safe for concurrent use.
type Queue struct {
	mu         sync.Mutex
	cond       *sync.Cond
	queue      []string
	queued     map[string]bool // waiting in queue
	processing map[string]bool // handed to a worker
	dirty      map[string]bool // added again while processing
	timers     map[string]*delayed
	// soon are the pending AddCoalesced timers, apart from timers: a
	// reconcile's Reschedule never cancels a change's wake-up.
	soon     map[string]*time.Timer
	shutdown bool
}

// NewQueue returns an empty queue.
func NewQueue() *Queue {
	q := &Queue{queued: map[string]bool{}, processing: map[string]bool{}, dirty: map[string]bool{}, timers: map[string]*delayed{}, soon: map[string]*time.Timer{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Add enqueues key unless it is already waiting. A key added while a worker
// processes it is queued again when that worker calls Done.
func (q *Queue) Add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addLocked(key)
}

func (q *Queue) addLocked(key string) {
	if q.shutdown || q.queued[key] {
		return
	}
	if q.processing[key] {
		q.dirty[key] = true
		return
	}
	q.queued[key] = true
	q.queue = append(q.queue, key)
	q.cond.Signal()
}

// AddAfter enqueues key after d. An earlier pending AddAfter of the same
// key wins; a later one is dropped (the earliest deadline is kept).
func (q *Queue) AddAfter(key string, d time.Duration) {
	if d <= 0 {
		q.Add(key)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	at := time.Now().Add(d)
	if old, ok := q.timers[key]; ok {
		if !old.at.After(at) {
			return // the pending one is sooner
		}
		old.timer.Stop()
	}
	dl := &delayed{at: at}
	dl.timer = time.AfterFunc(d, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.timers[key] == dl {
			delete(q.timers, key)
		}
		q.addLocked(key)
	})
	q.timers[key] = dl
}

// AddCoalesced enqueues key within window: the first call starts the
// window, later ones while it runs (or while the key waits in the queue)
// fold into it, so a burst of changes to one key within window is
// reconciled once, as Kubernetes controllers' rate-limited queues batch
// a busy object's events. Nothing is lost: the reconcile that ends the
// window reads the state after every change folded into it. A key
// handed to a worker (Get) drops its pending window, the reconcile
// reading the same state; a key being reconciled when the window ends
// is queued again after it (Done), as with Add. Reschedule does not
// cancel it. window <= 0 is Add.
func (q *Queue) AddCoalesced(key string, window time.Duration) {
	if window <= 0 {
		q.Add(key)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown || q.queued[key] || q.soon[key] != nil {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(window, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.soon[key] != t {
			return // handed out (Get) before the window ended
		}
		delete(q.soon, key)
		q.addLocked(key)
	})
	q.soon[key] = t
}

// Reschedule makes key's next delayed add d from now, replacing any
// pending one (sooner or later); d <= 0 cancels a pending one. The loop
// reschedules a key after every reconcile, so the latest result decides
// when the key is looked at again: a timer an earlier result asked for
// (a re-ask for an answer that has since come, a timeout of a phase the
// machine has left) does not fire for nothing.
func (q *Queue) Reschedule(key string, d time.Duration) {
	q.mu.Lock()
	if old, ok := q.timers[key]; ok {
		old.timer.Stop()
		delete(q.timers, key)
	}
	q.mu.Unlock()
	if d > 0 {
		q.AddAfter(key, d)
	}
}

type delayed struct {
	at    time.Time
	timer *time.Timer
}

// Get blocks until a key is available or the queue shuts down (ok false).
// The caller must call Done(key) when finished.
func (q *Queue) Get() (key string, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.queue) == 0 && !q.shutdown {
		q.cond.Wait()
	}
	if len(q.queue) == 0 {
		return "", false
	}
	key, q.queue = q.queue[0], q.queue[1:]
	delete(q.queued, key)
	q.processing[key] = true
	if t, ok := q.soon[key]; ok {
		// The reconcile about to run reads the state every change of the
		// window left (each came after the cache had applied it).
		t.Stop()
		delete(q.soon, key)
	}
	return key, true
}

// Done marks key finished; if it was added meanwhile it is queued again.
func (q *Queue) Done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if q.dirty[key] {
		delete(q.dirty, key)
		q.addLocked(key)
	}
}

// Len is the number of keys waiting.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

// ShutDown wakes every Get; no key is handed out afterwards.
func (q *Queue) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutdown = true
	for _, t := range q.timers {
		t.timer.Stop()
	}
	for _, t := range q.soon {
		t.Stop()
	}
	q.cond.Broadcast()
}

// Result tells the loop when to look at a key again although nothing
// changed (0: not until something does). It replaces whatever an earlier
// result or a failure's backoff asked for the same key.
type Result struct {
	RequeueAfter time.Duration
}

// Reconciler makes one idempotent step toward convergence for key. An
// error means "retry with backoff". Reconcile is never called concurrently
// for the same key.
type Reconciler interface {
	Reconcile(ctx context.Context, key string) (Result, error)
}

// Func adapts a function to Reconciler.
type Func func(ctx context.Context, key string) (Result, error)

// Reconcile calls f.
func (f Func) Reconcile(ctx context.Context, key string) (Result, error) { return f(ctx, key) }

// Backoff is the retry delay after a key's n-th consecutive failure.
type Backoff struct {
	Base, Max time.Duration
}

func (b Backoff) delay(failures int) time.Duration {
	d := b.Base
	for i := 1; i < failures && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// Loop runs workers over a Queue.
type Loop struct {
	Queue      *Queue
	Reconciler Reconciler
	Workers    int
	Backoff    Backoff
	// OnError is told of every failed reconcile (for logs and metrics).
	OnError func(key string, err error, failures int)

	mu       sync.Mutex
	failures map[string]int
}

// Run processes keys until ctx is cancelled, then shuts the queue down and
// waits for running reconciles to return.
func (l *Loop) Run(ctx context.Context) {
	if l.Workers < 1 {
		l.Workers = 1
	}
	if l.Backoff.Base == 0 {
		l.Backoff = Backoff{Base: 100 * time.Millisecond, Max: 30 * time.Second}
	}
	l.failures = map[string]int{}
	go func() {
		<-ctx.Done()
		l.Queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range l.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				key, ok := l.Queue.Get()
				if !ok {
					return
				}
				l.one(ctx, key)
				l.Queue.Done(key)
			}
		}()
	}
	wg.Wait()
}

func (l *Loop) one(ctx context.Context, key string) {
	res, err := l.Reconciler.Reconcile(ctx, key)
	l.mu.Lock()
	if err != nil {
		l.failures[key]++
	} else {
		delete(l.failures, key)
	}
	n := l.failures[key]
	l.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		if l.OnError != nil {
			l.OnError(key, err, n)
		}
		l.Queue.Reschedule(key, l.Backoff.delay(n))
		return
	}
	l.Queue.Reschedule(key, res.RequeueAfter)
}
