package maintenance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
)

// reconcile decides one cluster: read → Decide → the spec change (a
// compare-and-set on the revision read, decided again on every retry) →
// the record (compare-and-set; no write when it is unchanged). It comes
// back at the next transition (in real time) and at the Tick.
func (s *Service) reconcile(ctx context.Context, cluster string) (reconcile.Result, error) {
	if s.cfg.OnReconcile != nil {
		s.cfg.OnReconcile(cluster)
	}
	log := zerolog.Ctx(ctx).With().Str("cluster", cluster).Logger()
	ctx = log.WithContext(ctx)
	recKey := keys.Maintenance(cluster)
	view := store.NewView(s.desired, store.New[capnv1.Cluster]())
	if _, _, ok := view.Get(keys.Cluster(cluster)); !ok {
		_, _, err := s.records.Mutate(ctx, recKey, func(*capnv1.MaintenanceRecord, bool) (*capnv1.MaintenanceRecord, error) {
			return nil, store.ErrDelete
		})
		return reconcile.Result{}, err
	}
	rec, _, err := s.records.Get(ctx, recKey)
	switch {
	case errors.Is(err, store.ErrNotFound):
		rec = nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("read %s: %w", recKey, err)
	}
	cat, _, _ := store.NewView(s.desired, store.New[capnv1.KubernetesVersions]()).Get(keys.K8sVersionsDefault)
	now := s.cfg.Now()

	// The spec write decides again from the value it read, so a
	// concurrent change by the user is never overwritten blind.
	var out Output
	_, _, err = s.clusters.Mutate(ctx, keys.Cluster(cluster), func(c *capnv1.Cluster, exists bool) (*capnv1.Cluster, error) {
		if !exists {
			return nil, errGone
		}
		out = Decide(Input{Cluster: c, Record: rec, Catalogue: cat, Now: now})
		if !out.SpecChange() {
			return nil, store.ErrNoChange
		}
		old := c.GetSpec().GetKubernetesVersion()
		before := proto.CloneOf(c)
		if !out.Apply(c) {
			return nil, store.ErrNoChange
		}
		if err := manifest.ValidateUpdate(before, c); err != nil {
			return nil, fmt.Errorf("the change would not validate (kubernetes_version %s → %s): %w", old, c.GetSpec().GetKubernetesVersion(), err)
		}
		return c, nil
	})
	if errors.Is(err, errGone) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("write cluster %s: %w", cluster, err)
	}
	if out.Version != "" {
		log.Info().Str("change", out.Change).Str("from", out.From).Str("to", out.Version).Msg("applied in the maintenance window")
	}
	if out.SetHibernated != nil {
		log.Info().Bool("hibernated", *out.SetHibernated).Msg("applied the hibernation schedule")
	}
	_, _, err = s.records.Mutate(ctx, recKey, func(*capnv1.MaintenanceRecord, bool) (*capnv1.MaintenanceRecord, error) {
		if out.Record == nil {
			return nil, store.ErrDelete
		}
		return out.Record, nil
	})
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("write %s: %w", recKey, err)
	}
	var res reconcile.Result
	if !out.Recheck.IsZero() {
		res.RequeueAfter = max(out.Recheck.Sub(now), time.Second)
	}
	return res, nil
}
