package store

import (
	"context"
	"slices"
	"sync"
)

// Subscription delivers a [Cache]'s changes under one key prefix; see
// [Cache.Subscribe] for the ordering and queueing contract. Its methods are
// safe for concurrent use.
type Subscription struct {
	c      *Cache
	prefix string
	ch     chan Change

	notify chan struct{} // a change was queued (capacity 1)
	done   chan struct{} // closed by stop
	exited chan struct{} // closed when the pump has returned
	once   sync.Once

	mu        sync.Mutex
	queue     []Change
	head      int // queue[head:] is pending
	limit     int // compact when more than this is pending
	baseLimit int
}

func newSubscription(c *Cache, prefix string, limit int) *Subscription {
	s := &Subscription{
		c:         c,
		prefix:    prefix,
		ch:        make(chan Change),
		notify:    make(chan struct{}, 1),
		done:      make(chan struct{}),
		exited:    make(chan struct{}),
		limit:     limit,
		baseLimit: limit,
	}
	go s.pump()
	return s
}

// C returns the channel of changes. It is closed after Unsubscribe or when
// the cache stops; changes still queued then are discarded.
func (s *Subscription) C() <-chan Change { return s.ch }

// Each calls f with every change, in order, until ctx is cancelled or the
// channel closes (Unsubscribe, or the cache stopped), then unsubscribes.
// f runs on the caller's goroutine;
// it should not block for long, or changes queue up (and are compacted,
// see [Cache.Subscribe]). Every loop that follows a subscription — a
// controller's watch, the gateway's watch hub — is this one.
func (s *Subscription) Each(ctx context.Context, f func(Change)) {
	defer s.Unsubscribe()
	for {
		select {
		case <-ctx.Done():
			return
		case ch, ok := <-s.ch:
			if !ok {
				return
			}
			f(ch)
		}
	}
}

// Prefix returns the key prefix the subscription was made for.
func (s *Subscription) Prefix() string { return s.prefix }

// Unsubscribe stops the subscription and returns once its channel is
// closed. It does not wait for the reader and may be called more than once
// and from any goroutine, including the one reading C.
func (s *Subscription) Unsubscribe() {
	s.c.unsubscribe(s)
	s.stop()
}

// Pending returns how many changes wait in the queue (after compaction).
func (s *Subscription) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) - s.head
}

func (s *Subscription) stop() {
	s.once.Do(func() { close(s.done) })
	<-s.exited
}

// push queues ch without blocking.
func (s *Subscription) push(ch Change) {
	s.mu.Lock()
	s.queue = append(s.queue, ch)
	if len(s.queue)-s.head > s.limit {
		s.compact()
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// compact keeps only the latest pending change per key and the latest
// Resync marker, in their original (revision) order. So that a queue of
// many distinct keys is not compacted on every push, the limit then grows
// to twice what is left. s.mu must be held.
func (s *Subscription) compact() {
	pending := s.queue[s.head:]
	seen := make(map[string]struct{}, len(pending))
	var resync bool
	kept := make([]Change, 0, len(pending))
	for i := len(pending) - 1; i >= 0; i-- {
		ch := pending[i]
		if ch.Resync {
			if resync {
				continue
			}
			resync = true
		} else {
			if _, ok := seen[ch.Key]; ok {
				continue
			}
			seen[ch.Key] = struct{}{}
		}
		kept = append(kept, ch)
	}
	slices.Reverse(kept)
	s.queue, s.head = kept, 0
	s.limit = max(s.baseLimit, 2*len(kept))
}

// pop takes the oldest pending change.
func (s *Subscription) pop() (Change, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.head == len(s.queue) {
		return Change{}, false
	}
	ch := s.queue[s.head]
	s.queue[s.head] = Change{} // let the value be collected
	s.head++
	switch {
	case s.head == len(s.queue):
		s.queue, s.head = s.queue[:0], 0
	case s.head >= 1024 && 2*s.head >= len(s.queue):
		n := copy(s.queue, s.queue[s.head:])
		clear(s.queue[n:])
		s.queue, s.head = s.queue[:n], 0
	}
	return ch, true
}

// pump moves changes from the queue to the channel until stopped.
func (s *Subscription) pump() {
	defer close(s.exited)
	defer close(s.ch)
	for {
		ch, ok := s.pop()
		if !ok {
			select {
			case <-s.notify:
				continue
			case <-s.done:
				return
			}
		}
		select {
		case s.ch <- ch:
		case <-s.done:
			return
		}
	}
}
