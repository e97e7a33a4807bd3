package bootstrapper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/schemas/keys"
)

// purgeGone removes the sealed bootstrap data of the cluster's machines
// that are no longer desired: nothing may fetch it, and a machine's data
// holds a join token (a control plane's, the CA keys). A record whose
// token Secret may still exist in the workload cluster is left to the
// join-token pass, which deletes the Secret first; the next pass purges
// it. Each purge is conditional on the revision read, and the machine's
// absence is read from the bucket, not the cache: a machine created since
// keeps its data.
//
// The listing (a short-lived watcher on the secrets bucket) is skipped for
// a cluster whose last pass left nothing to purge, until one of its desired
// machines is deleted or data is stored for a machine not in the cache
// (s.gone); a restart or resync lists every cluster again.
func (s *Service) purgeGone(ctx context.Context, cluster string) (n int, err error) {
	if !s.gone.begin(cluster) {
		return 0, nil
	}
	left := false // a gone machine's record stays for now
	defer func() {
		if err != nil || left {
			s.gone.dirty(cluster)
		}
	}()
	stored, err := s.boots.Keys(ctx, keys.BootstrapsOf(cluster))
	if err != nil {
		return 0, err
	}
	for _, key := range stored {
		machine := strings.TrimPrefix(key, keys.BootstrapsOf(cluster))
		if _, ok := s.desired.Get(keys.Machine(cluster, machine)); ok {
			continue
		}
		if _, err := s.desiredKV.Get(ctx, keys.Machine(cluster, machine)); err == nil {
			continue
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return n, err
		}
		rec, rev, err := s.boots.Get(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			continue
		} else if err != nil {
			return n, err
		}
		if rec.GetTokenSecret() != "" {
			left = true
			continue
		}
		if err := s.secretsKV.Purge(ctx, key, jetstream.LastRevision(rev)); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				left = true
				continue // written meanwhile: the next pass looks again
			}
			return n, fmt.Errorf("purge %s: %w", key, err)
		}
		s.joinMemo.unsettle(key)
		s.tokens.done(key)
		n++
	}
	if n > 0 {
		zerolog.Ctx(ctx).Info().Str("cluster", cluster).Int("machines", n).Msg("bootstrap data of deleted machines purged")
	}
	return n, nil
}

// goneMemo remembers the clusters whose stored bootstrap data held no
// record of a machine that is not desired at their last purgeGone pass.
// It only saves listings: a cluster not known clean (after a start, a
// resync, a machine's deletion) is listed.
type goneMemo struct {
	mu    sync.Mutex
	clean map[string]bool
}

// begin says whether cluster must be listed, and takes it as clean from
// now: a deletion seen during the pass makes it dirty again.
func (m *goneMemo) begin(cluster string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.clean[cluster] {
		return false
	}
	if m.clean == nil {
		m.clean = map[string]bool{}
	}
	m.clean[cluster] = true
	return true
}

// dirty makes the next pass over cluster list its stored data.
func (m *goneMemo) dirty(cluster string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.clean, cluster)
}

// dirtyAll makes the next pass over every cluster list its stored data.
func (m *goneMemo) dirtyAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.clean)
}

// forget drops a deleted cluster.
func (m *goneMemo) forget(cluster string) { m.dirty(cluster) }

// desiredMachineChanged maps a desired machine change to its cluster's
// join-token pass (keys.ClusterOf), and a machine's deletion, or a resync,
// to a listing of the stored bootstrap data at that pass (s.gone).
func (s *Service) desiredMachineChanged(all func() []string) func(store.Change) []string {
	return func(ch store.Change) []string {
		if ch.Resync {
			s.gone.dirtyAll()
			return all()
		}
		cluster := keys.ClusterOf(ch.Key)
		if cluster == "" {
			return nil
		}
		if ch.Op == store.OpDelete {
			s.gone.dirty(cluster)
		}
		return []string{cluster}
	}
}
