package bootstrapper

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events/store"
)

// resealAll re-seals with the primary key every secrets value sealed with
// an older key of the keyring (key rotation), each with a compare-and-set
// so a concurrent writer is never overwritten. It returns how many values
// it re-sealed. A value sealed with a key the keyring does not hold is an
// error: capn would otherwise run unable to read its own secrets.
func (s *Service) resealAll(ctx context.Context) (int, error) {
	keys, err := s.secretsKV.ListKeys(ctx)
	if err != nil {
		return 0, fmt.Errorf("list secrets: %w", err)
	}
	defer func() { _ = keys.Stop() }()
	n := 0
	for key := range keys.Keys() {
		err := store.RetryOnConflict(ctx, 5, func(ctx context.Context) error {
			e, err := s.secretsKV.Get(ctx, key)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			if !s.cfg.Keyring.NeedsReseal(e.Value()) {
				return nil
			}
			v, err := s.cfg.Keyring.Reseal(key, e.Value())
			if err != nil {
				return fmt.Errorf("re-seal %s: %w", key, err)
			}
			if _, err := s.secretsKV.Update(ctx, key, v, e.Revision()); err != nil {
				return err
			}
			n++
			return nil
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
