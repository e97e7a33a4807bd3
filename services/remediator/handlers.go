package remediator

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
	"github.com/capn-dev/capn/schemas/keys"
)

// onUnhealthy remembers when the health input behind a machine.unhealthy
// event reached capn, to measure the latency of the repair. It does not
// wake the cluster: the health-watcher publishes the event just before it
// writes the verdict, so a reconcile woken by it would find the verdict not
// yet in the watch cache and decide nothing; the write wakes the cluster
// (feed) and carries the verdict itself. The event is the fact the
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

// feed maps watch changes to the cluster they concern (every entry is
// replayed at the start: a restarted remediator looks at every cluster).
// A machine's node record wakes its cluster only when its verdict changes
// (verdictChanged):
// the remediator reads nothing else of it that a change alone must act on,
// and most writes of the record (a heartbeat refreshed every few minutes, a
// condition or problem that changes no verdict) are not verdict changes.
func (s *Service) feed(ctx context.Context, sub *store.Subscription) {
	defer sub.Unsubscribe()
	for {
		select {
		case <-ctx.Done():
			return
		case ch, ok := <-sub.C():
			if !ok {
				return
			}
			if ch.Resync {
				for _, e := range s.desired.List(keys.ClusterPrefix) {
					s.queue.Add(strings.TrimPrefix(e.Key, keys.ClusterPrefix))
				}
				continue
			}
			k, err := keys.Parse(ch.Key)
			switch {
			case err != nil:
			case k.Kind == keys.KindNode:
				if c := s.verdictChanged(ch.Key); c != "" {
					s.queue.Add(c)
				}
			case k.Kind == keys.KindCluster, k.Kind == keys.KindMachine:
				s.queue.Add(k.Cluster)
			}
		}
	}
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
