package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// cursor is a position in the watch stream: the last revision applied from
// the desired and from the observed bucket (each bucket's revisions
// increase on their own). Its text, "<desired>-<observed>", is the SSE
// event id a client sends back as Last-Event-ID to resume.
type cursor struct{ d, o uint64 }

func (c cursor) String() string {
	return strconv.FormatUint(c.d, 10) + "-" + strconv.FormatUint(c.o, 10)
}

// le reports whether c is at or before o in both buckets.
func (c cursor) le(o cursor) bool { return c.d <= o.d && c.o <= o.o }

func parseCursor(s string) (cursor, bool) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return cursor{}, false
	}
	d, err1 := strconv.ParseUint(a, 10, 64)
	o, err2 := strconv.ParseUint(b, 10, 64)
	return cursor{d, o}, err1 == nil && err2 == nil
}

// watchEvent is one event of the watch stream, rendered once and shared by
// every stream that sends it.
type watchEvent struct {
	typ     string // api.Watch*
	kind    string // api.KindCluster or api.KindMachine; "" for a bookmark
	cluster string // the cluster the object is or belongs to
	at      cursor // the hub's cursor once the change was applied
	data    []byte // an api.WatchEvent as JSON
}

// watchObj is the hub's view of one cluster or machine.
type watchObj struct {
	desired, observed []byte // as stored (shared with the cache: read-only)
	rev               uint64 // the desired value's revision
	object            json.RawMessage
}

// watchFilter selects the events a stream wants.
type watchFilter struct {
	cluster string // "" for all
	kind    string // "" for both
}

func (f watchFilter) match(ev watchEvent) bool {
	return ev.kind == "" || (f.cluster == "" || f.cluster == ev.cluster) && (f.kind == "" || f.kind == ev.kind)
}

// watcher is one stream's subscription to the hub.
type watcher struct {
	filter watchFilter
	// ch carries live events; the hub closes it when the stream falls too
	// far behind (or the hub stops): the stream then ends and its client
	// resumes with Last-Event-ID.
	ch chan watchEvent
}

// hub turns the desired and observed buckets into one stream of cluster
// and machine changes, fanned out to any number of SSE streams.
//
// It reads each bucket through one subscription (prefix "") of the
// process's one cache per bucket, so changes of a bucket arrive in revision
// order; it keeps the merged objects, their rendered JSON, and a ring of
// recent events to resume from. A cluster exists while its desired key
// does; a machine while its desired or observed key does (its status
// outlives its spec while its infrastructure is deleted).
//
// Resuming: a client that saw the event with cursor c has seen every
// change with revisions up to c. It can resume if floor <= c <= cur: the
// ring holds every event after floor. Otherwise it gets RESET and the
// current state. The floor starts at the bucket revisions at start-up (the
// hub knows nothing of deletes before them), rises as the ring drops old
// events, and jumps past cur when a cache resync repairs a key (a repair
// carries an old revision, so its event cannot be ordered by cursor).
//
// All methods are safe for concurrent use.
type hub struct {
	desired, observed *store.Cache
	log               zerolog.Logger
	ringSize, bufSize int
	bookmarkEvery     time.Duration

	mu         sync.Mutex
	cur, floor cursor
	ring       []watchEvent // circular; ring[start] is the oldest
	start      int
	clusters   map[string]*watchObj
	machines   map[string]*watchObj // key "<cluster>.<machine>"
	subs       map[*watcher]struct{}
	synced     [2]bool // a resync marker came from the desired, observed cache
	ready      chan struct{}
	stopped    bool
	bookmarked cursor
}

const (
	bucketDesired = iota
	bucketObserved
)

func newHub(desired, observed *store.Cache, log zerolog.Logger, ringSize, bufSize int, bookmarkEvery time.Duration) *hub {
	return &hub{
		desired: desired, observed: observed, log: log,
		ringSize: max(ringSize, 1), bufSize: max(bufSize, 1), bookmarkEvery: bookmarkEvery,
		clusters: map[string]*watchObj{}, machines: map[string]*watchObj{},
		subs: map[*watcher]struct{}{}, ready: make(chan struct{}),
	}
}

// run applies the caches' changes until ctx ends or a cache stops; then
// every stream's channel is closed. Each bucket is followed on its own
// goroutine (store.Subscription.Each, the loop a controller's watch uses);
// apply holds h.mu, so events are still emitted one at a time, each
// bucket's in revision order.
func (h *hub) run(ctx context.Context) {
	defer h.stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A subscription replays the current state, then goes live, with no
	// marker in between. A resync marker is one: it comes after every change
	// up to its revision, the replay included.
	subs := [...]*store.Subscription{bucketDesired: h.desired.Subscribe(""), bucketObserved: h.observed.Subscribe("")}
	h.desired.Resync()
	h.observed.Resync()
	var wg sync.WaitGroup
	for bucket, sub := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel() // a stopped cache ends the hub
			sub.Each(ctx, func(ch store.Change) { h.apply(bucket, ch) })
		}()
	}
	defer wg.Wait()
	tick := time.NewTicker(h.bookmarkEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			h.bookmark()
		}
	}
}

// apply applies one change of a bucket and emits the event it makes.
func (h *hub) apply(bucket int, ch store.Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pos := &h.cur.d
	if bucket == bucketObserved {
		pos = &h.cur.o
	}
	if ch.Resync {
		*pos = max(*pos, ch.Revision)
		if !h.synced[bucket] {
			h.synced[bucket] = true
			if h.synced[bucketDesired] && h.synced[bucketObserved] {
				h.floor = h.cur
				close(h.ready)
				h.log.Debug().Stringer("cursor", h.cur).Msg("watch hub synced")
			}
		}
		return
	}
	repair := ch.Revision <= *pos
	*pos = max(*pos, ch.Revision)
	if repair {
		// The repair's event gets the cursor of events already sent, so
		// only a client that saw a later change of this bucket (and so
		// this event) may resume.
		h.floor, h.ring, h.start = h.cur, nil, 0
		if bucket == bucketDesired {
			h.floor.d++
		} else {
			h.floor.o++
		}
	}

	k, _ := keys.Parse(ch.Key)
	var (
		objs          map[string]*watchObj
		kind, cluster string
		id, name      string
	)
	switch k.Kind {
	case keys.KindCluster:
		objs, kind, cluster, id, name = h.clusters, api.KindCluster, k.Cluster, k.Cluster, k.Cluster
	case keys.KindMachine:
		objs, kind, cluster, id, name = h.machines, api.KindMachine, k.Cluster, k.Cluster+"."+k.Name, k.Name
	default:
		return
	}
	o := objs[id]
	if o == nil {
		o = &watchObj{}
	}
	existed := o.exists(kind)
	prev := o.object
	if bucket == bucketDesired {
		o.desired, o.rev = ch.Value, ch.Revision
		if ch.Op == store.OpDelete {
			o.desired, o.rev = nil, 0
		}
	} else {
		o.observed = ch.Value
		if ch.Op == store.OpDelete {
			o.observed = nil
		}
	}
	exists := o.exists(kind)
	if o.desired == nil && o.observed == nil {
		delete(objs, id)
	} else {
		objs[id] = o
	}

	var typ string
	switch {
	case !existed && exists:
		typ = api.WatchAdded
	case existed && exists:
		typ = api.WatchModified
	case existed && !exists:
		typ = api.WatchDeleted
	default:
		return // e.g. the status of a cluster with no spec
	}
	if exists {
		obj, err := render(kind, name, o)
		if err != nil {
			h.log.Warn().Err(err).Str("key", ch.Key).Msg("watch: cannot render; event skipped")
			return
		}
		o.object = obj
	} else {
		o.object = nil
	}
	obj := o.object
	if typ == api.WatchDeleted {
		obj = prev
	}
	h.emit(watchEvent{typ: typ, kind: kind, cluster: cluster, at: h.cur, data: eventData(typ, kind, obj)})
}

func (o *watchObj) exists(kind string) bool {
	if kind == api.KindCluster {
		return o.desired != nil
	}
	return o.desired != nil || o.observed != nil
}

// render builds the API object of a cluster or machine from its stored
// values.
func render(kind, name string, o *watchObj) (json.RawMessage, error) {
	if kind == api.KindCluster {
		c, err := store.Decode(o.desired, store.New[capnv1.Cluster]())
		if err != nil {
			return nil, err
		}
		var st *capnv1.ClusterStatus
		if o.observed != nil {
			if st, err = store.Decode(o.observed, store.New[capnv1.ClusterStatus]()); err != nil {
				return nil, err
			}
		}
		return marshalObject(clusterObject(c, o.rev, st))
	}
	var m *capnv1.Machine
	var st *capnv1.MachineStatus
	var err error
	if o.desired != nil {
		if m, err = store.Decode(o.desired, store.New[capnv1.Machine]()); err != nil {
			return nil, err
		}
	}
	if o.observed != nil {
		if st, err = store.Decode(o.observed, store.New[capnv1.MachineStatus]()); err != nil {
			return nil, err
		}
	}
	return marshalObject(machineObject(name, m, o.rev, st))
}

func eventData(typ, kind string, obj json.RawMessage) []byte {
	b, err := json.Marshal(api.WatchEvent{Type: typ, Kind: kind, Object: obj})
	if err != nil {
		return []byte(fmt.Sprintf(`{"type":%q}`, typ))
	}
	return b
}

// emit keeps ev in the ring and sends it to every stream that wants it. A
// stream whose buffer is full is closed. h.mu must be held.
func (h *hub) emit(ev watchEvent) {
	if ev.kind != "" {
		if len(h.ring) < h.ringSize {
			h.ring = append(h.ring, ev)
		} else {
			h.floor = h.ring[h.start].at
			h.ring[h.start] = ev
			h.start = (h.start + 1) % h.ringSize
		}
	}
	for w := range h.subs {
		if !w.filter.match(ev) {
			continue
		}
		select {
		case w.ch <- ev:
		default:
			h.log.Debug().Msg("watch stream fell behind; closing it (its client resumes)")
			delete(h.subs, w)
			close(w.ch)
		}
	}
}

// bookmark sends every stream the current cursor, so that a stream whose
// filter let nothing through for a while can still resume close to now.
// It goes through the streams' channels, after every event up to it.
func (h *hub) bookmark() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur == h.bookmarked || !h.isReady() {
		return
	}
	h.bookmarked = h.cur
	h.emit(watchEvent{typ: api.WatchBookmark, at: h.cur, data: []byte(`{"type":"BOOKMARK"}`)})
}

// desiredRevision is the last desired revision the hub applied.
func (h *hub) desiredRevision() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur.d
}

func (h *hub) isReady() bool {
	select {
	case <-h.ready:
		return true
	default:
		return false
	}
}

// subscribe registers a stream. With a resumable Last-Event-ID (see hub) it
// returns the events the client missed; otherwise the current state as
// ADDED events and reset true when the client asked to resume. at is the
// cursor the returned events bring the client to. Call it once ready is
// closed; unsubscribe when the stream ends.
func (h *hub) subscribe(lastEventID string, f watchFilter) (initial []watchEvent, reset bool, at cursor, w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w = &watcher{filter: f, ch: make(chan watchEvent, h.bufSize)}
	if h.stopped {
		close(w.ch)
		return nil, false, h.cur, w
	}
	h.subs[w] = struct{}{}
	if lastEventID != "" {
		if c, ok := parseCursor(lastEventID); ok && h.floor.le(c) && c.le(h.cur) {
			n := len(h.ring)
			for i := range n {
				ev := h.ring[(h.start+i)%n]
				if !ev.at.le(c) && f.match(ev) {
					initial = append(initial, ev)
				}
			}
			return initial, false, h.cur, w
		}
		reset = true
	}
	add := func(objs map[string]*watchObj, kind string, clusterOf func(string) string) {
		ids := make([]string, 0, len(objs))
		for id, o := range objs {
			if o.exists(kind) && o.object != nil {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		for _, id := range ids {
			ev := watchEvent{typ: api.WatchAdded, kind: kind, cluster: clusterOf(id), at: h.cur}
			if f.match(ev) {
				ev.data = eventData(api.WatchAdded, kind, objs[id].object)
				initial = append(initial, ev)
			}
		}
	}
	if f.kind == "" || f.kind == api.KindCluster {
		add(h.clusters, api.KindCluster, func(id string) string { return id })
	}
	if f.kind == "" || f.kind == api.KindMachine {
		add(h.machines, api.KindMachine, func(id string) string { c, _, _ := strings.Cut(id, "."); return c })
	}
	return initial, reset, h.cur, w
}

// unsubscribe removes a stream (idempotent).
func (h *hub) unsubscribe(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[w]; ok {
		delete(h.subs, w)
		close(w.ch)
	}
}

// stop closes every stream; later subscriptions are closed at once.
func (h *hub) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	for w := range h.subs {
		delete(h.subs, w)
		close(w.ch)
	}
}
