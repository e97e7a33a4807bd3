package remediator

import (
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// verdictChanged maps a changed node.<c>.<m> key to its cluster if the
// record's verdict — healthy, unhealthy_reasons, unhealthy_since — differs
// from the last one seen, or the record appeared or went; to "" otherwise.
// It reads the record from the watch cache, so a burst of writes the
// cache's queue compacted is judged on the latest.
func (s *Service) verdictChanged(key string) string {
	k, err := keys.Parse(key)
	if err != nil || k.Kind != keys.KindNode {
		return ""
	}
	e, ok := s.observed.Get(key)
	if !s.verdicts.changed(key, e.Value, ok) {
		return ""
	}
	return k.Cluster
}

// verdicts remembers the last verdict seen in each node record, by key.
// Safe for concurrent use.
type verdicts struct {
	mu sync.Mutex
	m  map[string]*capnv1.NodeHealth // only healthy, unhealthy_reasons, unhealthy_since
}

func newVerdicts() *verdicts { return &verdicts{m: map[string]*capnv1.NodeHealth{}} }

// changed records the verdict of the record value at key (exists false:
// none) and reports whether it differs from the last one seen: a record
// that appears, goes, does not decode, or whose verdict changed.
func (v *verdicts) changed(key string, value []byte, exists bool) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	old, seen := v.m[key]
	if !exists {
		delete(v.m, key)
		return seen
	}
	h, err := store.Decode(value, store.New[capnv1.NodeHealth]())
	if err != nil {
		delete(v.m, key)
		return true
	}
	cur := &capnv1.NodeHealth{Healthy: h.GetHealthy(), UnhealthyReasons: h.GetUnhealthyReasons(), UnhealthySince: h.GetUnhealthySince()}
	v.m[key] = cur
	return !seen || !proto.Equal(old, cur)
}
