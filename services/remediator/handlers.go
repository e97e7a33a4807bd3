package remediator

import (
	"context"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

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
// (verdicts.changed):
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
				if s.verdicts.changed(ch) {
					s.queue.Add(k.Cluster)
				}
			case k.Kind == keys.KindCluster, k.Kind == keys.KindMachine:
				s.queue.Add(k.Cluster)
			}
		}
	}
}

// verdicts remembers the last verdict seen in each node record, by key.
// Safe for concurrent use.
type verdicts struct {
	mu sync.Mutex
	m  map[string]*capnv1.NodeHealth // only healthy, unhealthy_reasons, unhealthy_since
}

func newVerdicts() *verdicts { return &verdicts{m: map[string]*capnv1.NodeHealth{}} }

// changed records the verdict of a node record's change and reports
// whether it differs from the last one seen: a record that appears, goes,
// does not decode, or whose healthy, unhealthy_reasons or unhealthy_since
// changed.
func (v *verdicts) changed(ch store.Change) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	old, seen := v.m[ch.Key]
	if ch.Op != store.OpPut {
		delete(v.m, ch.Key)
		return true
	}
	h, err := store.Decode(ch.Value, func() *capnv1.NodeHealth { return new(capnv1.NodeHealth) })
	if err != nil {
		delete(v.m, ch.Key)
		return true
	}
	cur := &capnv1.NodeHealth{Healthy: h.GetHealthy(), UnhealthyReasons: h.GetUnhealthyReasons(), UnhealthySince: h.GetUnhealthySince()}
	v.m[ch.Key] = cur
	return !seen || !proto.Equal(old, cur)
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
