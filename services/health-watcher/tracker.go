package healthwatcher

import (
	"strings"
	"sync"
	"time"
)

// tracker remembers, per machine ("<cluster>.<machine>"), the stream time of
// the latest heartbeat and of the latest report that changed the record.
// Heartbeats are kept here rather than written to KV each time: a steady
// node writes its record only every Config.PersistEvery. Safe for
// concurrent use.
type tracker struct {
	mu       sync.Mutex
	beats    map[string]beat
	reported map[string]time.Time
	// byCluster indexes the keys of beats by cluster, so that listing one
	// cluster's machines costs that cluster, not the fleet (every
	// reconcile of a cluster lists them).
	byCluster map[string]map[string]struct{}
}

// beat is the latest heartbeat of a node: when the stream stored it, and
// what it said.
type beat struct {
	at                       time.Time
	ready                    bool
	kubeletVersion, nodeName string
}

func newTracker() *tracker {
	return &tracker{beats: map[string]beat{}, reported: map[string]time.Time{}, byCluster: map[string]map[string]struct{}{}}
}

// beat records a heartbeat and reports whether it is the latest seen since
// start (false: a duplicate or a late one, which changes nothing).
func (t *tracker) beat(key string, b beat) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !b.at.After(t.beats[key].at) {
		return false
	}
	t.beats[key] = b
	c := trackedCluster(key)
	if t.byCluster[c] == nil {
		t.byCluster[c] = map[string]struct{}{}
	}
	t.byCluster[c][key] = struct{}{}
	return true
}

// lastBeat is the latest heartbeat seen (zero at: none since start).
func (t *tracker) lastBeat(key string) beat {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.beats[key]
}

// report records that a report stored at at changed the record.
func (t *tracker) report(key string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if at.After(t.reported[key]) {
		t.reported[key] = at
	}
}

// lastReport is when a report last changed the record (zero: none since start).
func (t *tracker) lastReport(key string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reported[key]
}

// forget drops a machine that is gone.
func (t *tracker) forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.beats, key)
	delete(t.reported, key)
	c := trackedCluster(key)
	delete(t.byCluster[c], key)
	if len(t.byCluster[c]) == 0 {
		delete(t.byCluster, c)
	}
}

// keys lists the machines of cluster that have a heartbeat tracked.
func (t *tracker) keys(cluster string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.byCluster[cluster]))
	for k := range t.byCluster[cluster] {
		out = append(out, k)
	}
	return out
}

// trackedCluster is the cluster of a tracker key ("<cluster>.<machine>").
func trackedCluster(key string) string {
	c, _, _ := strings.Cut(key, ".")
	return c
}
