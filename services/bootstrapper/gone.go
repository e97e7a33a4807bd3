package bootstrapper

import (
	"context"
	"errors"
	"fmt"
	"github.com/capn-dev/capn/schemas/keys"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events/store"
)

// purgeGone removes the sealed bootstrap data of the cluster's machines
// that are no longer desired: nothing may fetch it, and a machine's data
// holds a join token (a control plane's, the CA keys). A record whose
// token Secret may still exist in the workload cluster is left to the
// join-token pass, which deletes the Secret first; the next pass purges
// it. Each purge is conditional on the revision read, and the machine's
// absence is read from the bucket, not the cache: a machine created since
// keeps its data.
func (s *Service) purgeGone(ctx context.Context, cluster string) (int, error) {
	stored, err := s.boots.Keys(ctx, keys.BootstrapsOf(cluster))
	if err != nil {
		return 0, err
	}
	n := 0
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
			continue
		}
		if err := s.secretsKV.Purge(ctx, key, jetstream.LastRevision(rev)); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
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
