package bootstrapper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

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
	if err := s.gone.audited(ctx, s.auditGone); err != nil {
		return 0, err
	}
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

// auditGone lists the stored bootstrap data of every cluster at once and
// returns the clusters holding data of a machine the desired cache does
// not have (one created since may be among them: its cluster's own pass
// reads the bucket).
func (s *Service) auditGone(ctx context.Context) (map[string]bool, error) {
	// A bucket operation's own deadline (5 s) is for one cluster's keys;
	// this lists every cluster's, 100,000 at 10,000 clusters.
	ctx, cancel := context.WithTimeout(ctx, auditTimeout)
	defer cancel()
	stored, err := s.boots.Keys(ctx, keys.BootstrapPrefix)
	if err != nil {
		return nil, fmt.Errorf("list the stored bootstrap data: %w", err)
	}
	suspect := map[string]bool{}
	for _, key := range stored {
		k, err := keys.Parse(key)
		if err != nil || k.Cluster == "" {
			continue
		}
		if _, ok := s.desired.Get(keys.Machine(k.Cluster, k.Name)); !ok {
			suspect[k.Cluster] = true
		}
	}
	return suspect, nil
}

// auditTimeout bounds the audit's listing of every cluster's stored data.
const auditTimeout = time.Minute

// goneMemo remembers the clusters whose stored bootstrap data held no
// record of a machine that is not desired at their last purgeGone pass.
// It only saves listings: a cluster not known clean (after a machine's
// deletion) is listed. After a start or a resync every cluster is unknown:
// one listing of all of them (an audit) tells which hold such data, and
// only those are listed on their own. One short-lived watcher per cluster
// was, at 10,000 clusters, 10,000 consumers on the secrets stream at one
// moment, each scanning it (the 100,000-machine create's collapse).
type goneMemo struct {
	mu    sync.Mutex
	clean map[string]bool
	// audit is the listing of every cluster since the last start or
	// resync; nil until a pass makes one.
	audit *goneAudit
}

// goneAudit is one listing of every cluster's stored data.
type goneAudit struct {
	done     chan struct{}
	finished bool
	err      error // the listing failed: every cluster is listed on its own
	// suspect holds the clusters with data of a machine not desired when
	// listed, and those dirtied since the audit began.
	suspect map[string]bool
}

// audited returns once the audit since the last start or resync is made:
// the first caller makes it with list, the others wait for it. A failed
// listing is not an error here: every cluster is then listed on its own.
func (m *goneMemo) audited(ctx context.Context, list func(context.Context) (map[string]bool, error)) error {
	m.mu.Lock()
	a := m.audit
	if a != nil {
		m.mu.Unlock()
		select {
		case <-a.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	a = &goneAudit{done: make(chan struct{}), suspect: map[string]bool{}}
	m.audit = a
	m.mu.Unlock()
	suspect, err := list(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	for c := range suspect {
		a.suspect[c] = true
	}
	a.err, a.finished = err, true
	close(a.done)
	return nil
}

// begin says whether cluster must be listed, and takes it as clean from
// now: a deletion seen during the pass makes it dirty again. A cluster not
// known clean is listed unless the audit found nothing of it to purge.
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
	if a := m.audit; a != nil && a.finished && a.err == nil {
		if !a.suspect[cluster] {
			return false
		}
		delete(a.suspect, cluster)
	}
	return true
}

// dirty makes the next pass over cluster list its stored data.
func (m *goneMemo) dirty(cluster string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.clean, cluster)
	if m.audit != nil {
		m.audit.suspect[cluster] = true
	}
}

// resync forgets what is known clean: the next pass makes a new audit.
func (m *goneMemo) resync() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.clean)
	m.audit = nil
}

// forget drops a deleted cluster.
func (m *goneMemo) forget(cluster string) { m.dirty(cluster) }

// desiredMachineChanged maps a desired machine change to its cluster's
// join-token pass (keys.ClusterOf), and a machine's deletion, or a resync,
// to a listing of the stored bootstrap data at that pass (s.gone).
func (s *Service) desiredMachineChanged(all func() []string) func(store.Change) []string {
	return func(ch store.Change) []string {
		if ch.Resync {
			s.gone.resync()
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
