package gateway

import "testing"

func TestStreamSlots(t *testing.T) {
	l := newStreamSlots(2, 3)
	a1, p := l.acquire("a")
	if p != nil {
		t.Fatal(p)
	}
	if _, p := l.acquire("a"); p != nil {
		t.Fatal(p)
	}
	if _, p := l.acquire("a"); p == nil || p.Status != 429 || p.retryAfter <= 0 {
		t.Fatalf("third stream of a: %v, want 429 with Retry-After", p)
	}
	if _, p := l.acquire("b"); p != nil {
		t.Fatal(p)
	}
	if _, p := l.acquire("c"); p == nil {
		t.Fatal("fourth stream in total: no 429")
	}
	a1()
	a1() // idempotent
	if _, p := l.acquire("c"); p != nil {
		t.Fatalf("a released slot was not given back: %v", p)
	}
	if _, p := l.acquire("d"); p == nil {
		t.Fatal("a double release gave two slots back")
	}
}
