package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// watched decodes a watch event's data.
func watched(t *testing.T, ev sseTestEvent) (api.WatchEvent, string) {
	t.Helper()
	var we api.WatchEvent
	if err := json.Unmarshal([]byte(ev.data), &we); err != nil {
		t.Fatalf("event data %q: %v", ev.data, err)
	}
	if we.Type != ev.event {
		t.Fatalf("event %q carries type %q", ev.event, we.Type)
	}
	name := ""
	switch we.Kind {
	case api.KindCluster:
		c := new(capnv1.Cluster)
		if err := protojson.Unmarshal(we.Object, c); err != nil {
			t.Fatal(err)
		}
		name = c.GetMetadata().GetName()
	case api.KindMachine:
		m := new(capnv1.Machine)
		if err := protojson.Unmarshal(we.Object, m); err != nil {
			t.Fatal(err)
		}
		name = m.GetMetadata().GetName()
	}
	return we, name
}

// expect reads the next events and checks each is "TYPE Kind/name" (or just
// "TYPE" for SYNCED, RESET), skipping bookmarks; it returns the last one.
func (s *sseReader) expect(t *testing.T, want ...string) sseTestEvent {
	t.Helper()
	var ev sseTestEvent
	for _, w := range want {
		for {
			ev = s.next()
			if ev.event != api.WatchBookmark {
				break
			}
		}
		we, name := watched(t, ev)
		got := we.Type
		if we.Kind != "" {
			got += " " + we.Kind + "/" + name
		}
		if got != w {
			t.Fatalf("event %q (id %s), want %q", got, ev.id, w)
		}
	}
	return ev
}

func TestWatch(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Heartbeat = 100 * time.Millisecond })
	e.apply(demoYAML)

	s := e.openSSE(t, "/v1/watch", tokRead)
	s.expect(t, "ADDED Cluster/demo", "SYNCED")

	e.apply(manifestNamed("two", "{}"))
	s.expect(t, "ADDED Cluster/two")
	e.put(e.observed, "cluster.demo", &capnv1.ClusterStatus{Phase: "Provisioning"})
	ev := s.expect(t, "MODIFIED Cluster/demo")
	if !strings.Contains(ev.data, `"phase":"Provisioning"`) {
		t.Errorf("status not merged: %s", ev.data)
	}
	// The status of a cluster that does not exist is no event.
	e.put(e.observed, "cluster.ghost", &capnv1.ClusterStatus{Phase: "Deleting"})
	m := &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: "demo-md-0"}, Spec: &capnv1.MachineSpec{Cluster: "demo", Pool: "md-0"}}
	e.put(e.desired, "machine.demo.demo-md-0", m)
	s.expect(t, "ADDED Machine/demo-md-0")
	e.put(e.observed, "machine.demo.demo-md-0", &capnv1.MachineStatus{Phase: "Running"})
	mark := s.expect(t, "MODIFIED Machine/demo-md-0")

	// Changes while no one watches, then a resume from mark: only those.
	// (Changes of the two buckets are waited for one by one: the hub reads
	// the buckets side by side, so their relative order is not fixed.)
	e.put(e.observed, "cluster.two", &capnv1.ClusterStatus{Phase: "Ready"})
	s.expect(t, "MODIFIED Cluster/two")
	if err := e.desired.Delete(context.Background(), "machine.demo.demo-md-0"); err != nil {
		t.Fatal(err)
	}
	s.expect(t, "MODIFIED Machine/demo-md-0") // its status outlives its spec
	if err := e.observed.Delete(context.Background(), "machine.demo.demo-md-0"); err != nil {
		t.Fatal(err)
	}
	s.expect(t, "DELETED Machine/demo-md-0")
	if err := e.desired.Delete(context.Background(), "cluster.two"); err != nil { // the planner removes a deleted cluster
		t.Fatal(err)
	}
	del := s.expect(t, "DELETED Cluster/two")
	if !strings.Contains(del.data, `"phase":"Ready"`) {
		t.Errorf("DELETED carries the last state: %s", del.data)
	}

	r := e.openSSE(t, "/v1/watch", tokRead, "Last-Event-ID", mark.id)
	r.expect(t, "MODIFIED Cluster/two", "MODIFIED Machine/demo-md-0", "DELETED Machine/demo-md-0", "DELETED Cluster/two", "SYNCED")

	// Filters.
	f := e.openSSE(t, "/v1/watch?cluster=demo&kind=Machine", tokRead)
	f.expect(t, "SYNCED")
	e.apply(manifestNamed("three", "{}"))
	e.put(e.desired, "machine.three.three-md-0", &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: "three-md-0"}})
	e.put(e.desired, "machine.demo.demo-md-1", &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: "demo-md-1"}})
	f.expect(t, "ADDED Machine/demo-md-1")

	// An id the gateway cannot resume from: RESET, then the whole state.
	for _, id := range []string{"garbage", "999999-999999"} { // unparsable; from the future
		g := e.openSSE(t, "/v1/watch?kind=Cluster", tokRead, "Last-Event-ID", id)
		g.expect(t, "RESET", "ADDED Cluster/demo", "ADDED Cluster/three", "SYNCED")
	}

	// Heartbeats and bookmarks keep a quiet filtered stream resumable.
	q := e.openSSE(t, "/v1/watch?cluster=nothing", tokRead)
	q.expect(t, "SYNCED")
	e.put(e.observed, "cluster.demo", &capnv1.ClusterStatus{Phase: "Ready"})
	waitBookmark := func() {
		for {
			if ev := q.next(); ev.event == api.WatchBookmark {
				return
			}
		}
	}
	waitBookmark()
	q.heartbeat()
	e.put(e.observed, "cluster.demo", &capnv1.ClusterStatus{Phase: "Upgrading"})
	waitBookmark()

	e.do(http.MethodGet, "/v1/watch?kind=Pod", tokRead, nil).wantProblem(t, http.StatusBadRequest, "kind")
	e.do(http.MethodGet, "/v1/watch?cluster=Bad", tokRead, nil).wantProblem(t, http.StatusBadRequest, "cluster")
	e.do(http.MethodGet, "/v1/watch", "", nil).wantProblem(t, http.StatusUnauthorized)
	e.do(http.MethodGet, "/v1/watch", tokIngest, nil).wantProblem(t, http.StatusForbidden)
}

// TestWatchRingOverflow: an id older than the ring of recent events gets
// RESET rather than a silent gap.
func TestWatchRingOverflow(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.WatchRing = 2 })
	s := e.openSSE(t, "/v1/watch", tokRead)
	s.expect(t, "SYNCED")
	e.apply(manifestNamed("a", "{}"))
	first := s.expect(t, "ADDED Cluster/a")
	e.apply(manifestNamed("b", "{}"))
	second := s.expect(t, "ADDED Cluster/b")
	e.apply(manifestNamed("c", "{}"))
	e.apply(manifestNamed("d", "{}"))
	s.expect(t, "ADDED Cluster/c", "ADDED Cluster/d")
	e.openSSE(t, "/v1/watch", tokRead, "Last-Event-ID", first.id).
		expect(t, "RESET", "ADDED Cluster/a", "ADDED Cluster/b", "ADDED Cluster/c", "ADDED Cluster/d", "SYNCED")
	e.openSSE(t, "/v1/watch", tokRead, "Last-Event-ID", second.id).
		expect(t, "ADDED Cluster/c", "ADDED Cluster/d", "SYNCED")
}

// newTestHub is a hub fed by hand, ready (both resync markers seen).
func newTestHub(t *testing.T, ring, buf int) *hub {
	h := newHub(nil, nil, zerolog.Nop(), ring, buf, time.Hour)
	h.apply(bucketDesired, store.Change{Resync: true})
	h.apply(bucketObserved, store.Change{Resync: true})
	if !h.isReady() {
		t.Fatal("hub not ready after both markers")
	}
	return h
}

func clusterChange(t *testing.T, name string, rev uint64) store.Change {
	t.Helper()
	b, err := store.Encode(&capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: name}, Spec: &capnv1.ClusterSpec{}})
	if err != nil {
		t.Fatal(err)
	}
	return store.Change{Key: "cluster." + name, Value: b, Revision: rev, Op: store.OpPut}
}

func TestHubSlowStreamIsClosed(t *testing.T) {
	h := newTestHub(t, 16, 1)
	_, _, _, w := h.subscribe("", watchFilter{})
	h.apply(bucketDesired, clusterChange(t, "a", 1))
	h.apply(bucketDesired, clusterChange(t, "b", 2)) // the buffer of 1 is full
	if ev, ok := <-w.ch; !ok || ev.typ != api.WatchAdded {
		t.Fatalf("first event %v %v", ev, ok)
	}
	if _, ok := <-w.ch; ok {
		t.Fatal("a stream that fell behind was not closed")
	}
	h.unsubscribe(w) // idempotent after the hub closed it
}

func TestHubRepairMovesTheFloor(t *testing.T) {
	h := newTestHub(t, 16, 16)
	h.apply(bucketDesired, clusterChange(t, "a", 5))
	h.apply(bucketDesired, clusterChange(t, "b", 6))
	seen := cursor{d: 6}
	// A resync repairs key c at an old revision: the event after it has
	// the cursor already sent, so a client at 6 must not skip it.
	h.apply(bucketDesired, clusterChange(t, "c", 3))
	if _, reset, _, _ := h.subscribe(seen.String(), watchFilter{}); !reset {
		t.Fatal("a client at the repair's cursor resumed and would miss the repair")
	}
	h.apply(bucketDesired, clusterChange(t, "d", 7))
	initial, reset, at, _ := h.subscribe(cursor{d: 7}.String(), watchFilter{})
	if reset || len(initial) != 0 || at != (cursor{d: 7}) {
		t.Fatalf("a client past the repair: reset %v, %d events, at %v", reset, len(initial), at)
	}
}

func TestCursor(t *testing.T) {
	for _, s := range []string{"0-0", "12-7", "18446744073709551615-1"} {
		c, ok := parseCursor(s)
		if !ok || c.String() != s {
			t.Errorf("%q -> %v %v", s, c, ok)
		}
	}
	for _, s := range []string{"", "1", "a-b", "1-", "-1", "1-2-3"} {
		if _, ok := parseCursor(s); ok {
			t.Errorf("%q parsed", s)
		}
	}
}
