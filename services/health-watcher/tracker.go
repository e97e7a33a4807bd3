package healthwatcher

import (
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
}

// beat is the latest heartbeat of a node: when the stream stored it, and
// what it said.
type beat struct {
	at                       time.Time
	ready                    bool
	kubeletVersion, nodeName string
}

func newTracker() *tracker {
	return &tracker{beats: map[string]beat{}, reported: map[string]time.Time{}}
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
}

// keys lists the machines tracked whose key starts with prefix.
func (t *tracker) keys(prefix string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for k := range t.beats {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			out = append(out, k)
		}
	}
	return out
}
