package remediator

import (
	"context"
	"sync"
	"time"

	"github.com/capn-dev/capn/events"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
	"github.com/capn-dev/capn/schemas/keys"
)

// onUnhealthy remembers when the health input behind a machine.unhealthy
// event reached capn, to measure the latency of the repair. It does not
// wake the cluster: the health-watcher publishes the event just before it
// writes the verdict, so a reconcile woken by it would find the verdict not
// yet in the watch cache and decide nothing; the write wakes the cluster
// (verdictChanged) and carries the verdict itself. The event is the fact the
// cluster's timeline shows; the record is what the remediator acts on.
func (s *Service) onUnhealthy(_ context.Context, m *events.Message, u *capnv1.MachineUnhealthy) error {
	if u.GetCluster() == "" || u.GetMachine() == "" {
		return events.Permanent(errMissingNames)
	}
	at := m.Event.Time()
	if v, ok := m.Event.Extensions()[policy.ExtensionHealthTime].(string); ok {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			at = t
		}
	}
	s.seen.put(u.GetCluster()+"."+u.GetMachine(), at)
	return nil
}

// clusterOf maps a watched key to the cluster it concerns: cluster.<c>,
// machine.<c>.<m> or node.<c>.<m> ("" for any other key). A node record
// is watched through verdictChanged instead: it wakes its cluster only
// when its verdict changes.
func clusterOf(key string) string {
	if k, err := keys.Parse(key); err == nil && (k.Kind == keys.KindCluster || k.Kind == keys.KindMachine || k.Kind == keys.KindNode) {
		return k.Cluster
	}
	return ""
}

// healthTimes remembers when the health input behind each unhealthy event
// arrived, by "<cluster>.<machine>", until a repair takes it.
type healthTimes struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func newHealthTimes() *healthTimes { return &healthTimes{m: map[string]time.Time{}} }

// put keeps the earliest time of an episode.
func (h *healthTimes) put(key string, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur, ok := h.m[key]; !ok || at.Before(cur) {
		h.m[key] = at
	}
}

// take returns and forgets the time of key (zero: none).
func (h *healthTimes) take(key string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	at := h.m[key]
	delete(h.m, key)
	return at
}
