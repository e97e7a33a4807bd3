package addonmanager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/kubeapi"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/secrets/clusterkubeconfig"
)

// moreAfter is the RequeueAfter of a reconcile that applied a set: at
// once, so that the sets of the next order go next (from the records it
// just wrote); cacheBehindWait how soon a reconcile held back by a cache
// that has not seen this replica's last write is tried again (the cache
// is normally milliseconds behind).
const (
	moreAfter       = time.Millisecond
	cacheBehindWait = 20 * time.Millisecond
)

var (
	newCluster       = store.New[capnv1.Cluster]()
	newClusterStatus = store.New[capnv1.ClusterStatus]()
	newAddonSet      = store.New[capnv1.AddonSet]()
	newRecord        = store.New[capnv1.ClusterAddonStatus]()
	newAnnouncement  = store.New[capnv1.ProviderAnnouncement]()
	newAddonSecret   = store.New[capnv1.AddonSecret]()
)

// reconcile makes one cluster's add-on step: it reads the cluster, the
// sets and its records from the caches (and the sets' content), plans
// with the pure Plan, and carries out the steps in order — each record
// write a compare-and-set on the revision read.
func (s *Service) reconcile(ctx context.Context, cluster string) (reconcile.Result, error) {
	if w, ok := s.written.Load(cluster); ok && s.observed.Revision() < w.(uint64) {
		return reconcile.Result{RequeueAfter: cacheBehindWait}, nil // plan once the cache has our last write
	}
	log := zerolog.Ctx(ctx).With().Str("cluster", cluster).Logger()
	ctx = log.WithContext(ctx)
	in, revs, contents, err := s.input(ctx, cluster)
	if err != nil {
		return reconcile.Result{}, err
	}
	res := Plan(in)
	if len(res.Steps) > 0 {
		log.Debug().Fields(res.Fields()).Msg("add-on plan")
	}
	var client *kubeapi.Client
	var clientErr error
	needClient := slices.ContainsFunc(res.Steps, func(st Step) bool { return st.Kind == StepApply || st.Kind == StepRemove })
	if needClient {
		client, clientErr = s.clients.Client(ctx, cluster)
	}
	var errs []error
	more := false
	for _, st := range res.Steps {
		key := keys.Addon(cluster, st.Set)
		var err error
		switch st.Kind {
		case StepForget:
			err = s.forget(ctx, &log, cluster, st, revs[st.Set], in.Cluster != nil)
		case StepRecord:
			err = s.write(ctx, key, st.Record, revs[st.Set])
		case StepRemove:
			err = s.remove(ctx, &log, client, clientErr, cluster, st, revs[st.Set])
		case StepApply:
			var applied bool
			applied, err = s.apply(ctx, &log, client, clientErr, cluster, st, contents[st.Set], revs[st.Set])
			more = more || applied
		}
		s.metrics.step(st.Kind, err)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	if more {
		return reconcile.Result{RequeueAfter: moreAfter}, nil
	}
	return reconcile.Result{RequeueAfter: res.RequeueAfter}, nil
}

// input reads what Plan needs, the records' revisions and the selected
// sets' content.
func (s *Service) input(ctx context.Context, cluster string) (Input, map[string]uint64, map[string]content, error) {
	now := s.cfg.Now()
	in := Input{Name: cluster, Now: now, Backoff: s.cfg.backoff, Records: map[string]*capnv1.ClusterAddonStatus{},
		Hashes: map[string]string{}, Unreadable: map[string]string{}}
	revs := map[string]uint64{}
	contents := map[string]content{}
	if cl, _, ok := store.Lookup(s.desired, keys.Cluster(cluster), newCluster); ok {
		in.Cluster = cl
	}
	prefix := keys.AddonsOf(cluster)
	for _, e := range s.observed.List(prefix) {
		name := strings.TrimPrefix(e.Key, prefix)
		rec, err := store.Decode(e.Value, newRecord)
		if err != nil {
			rec = &capnv1.ClusterAddonStatus{} // a record that does not decode: replaced
		}
		in.Records[name], revs[name] = rec, e.Revision
	}
	if in.Cluster == nil && len(in.Records) > 0 {
		// Forgetting rests on the cluster's absence: confirm it.
		cl, _, ok, err := store.LookupConfirmed(ctx, s.desired, s.clusterBucket, keys.Cluster(cluster))
		if err != nil {
			return Input{}, nil, nil, err
		}
		if ok {
			in.Cluster = cl
		}
	}
	st, _, _ := store.Lookup(s.observed, keys.Cluster(cluster), newClusterStatus)
	in.Initialized = st.GetControlPlaneInitialized()
	in.API = s.api(in.Cluster)
	for _, e := range s.desired.List(keys.AddonSetPrefix) {
		set, err := store.Decode(e.Value, newAddonSet)
		if err != nil {
			continue // the gateway writes valid sets; garbage selects nothing
		}
		in.Sets = append(in.Sets, set)
		name := set.GetMetadata().GetName()
		if !in.API || !in.Initialized || !manifest.AddonSetSelects(set, in.Cluster) {
			continue
		}
		c, err := contentOf(set, s.readSecret)
		if err != nil {
			in.Unreadable[name] = err.Error()
			continue
		}
		in.Hashes[name], contents[name] = c.hash, c
	}
	return in, revs, contents, nil
}

// api says whether the cluster has a real API server to apply to
// (clusterkubeconfig.HasAPIServer).
func (s *Service) api(cl *capnv1.Cluster) bool {
	return clusterkubeconfig.HasAPIServer(cl, func(p string) []string {
		a, _, _ := store.Lookup(s.observed, keys.Provider(p), newAnnouncement)
		return a.GetCapabilities()
	})
}

// readSecret reads an add-on secret from the secrets cache, opened with
// the secrets key.
func (s *Service) readSecret(name string) (string, bool, error) {
	key := keys.AddonSecret(name)
	e, ok := s.secrets.Get(key)
	if !ok {
		return "", false, nil
	}
	data, err := s.ring.Open(key, e.Value)
	if err != nil {
		return "", false, fmt.Errorf("does not open with the secrets key: %w", err)
	}
	sec, err := store.Decode(data, newAddonSecret)
	if err != nil {
		return "", false, fmt.Errorf("does not decode: %w", err)
	}
	return sec.GetYaml(), true, nil
}

// write stores rec under key: a create when rev is 0, else an update on
// rev.
func (s *Service) write(ctx context.Context, key string, rec *capnv1.ClusterAddonStatus, rev uint64) error {
	var err error
	var newRev uint64
	if rev == 0 {
		newRev, err = s.records.Create(ctx, key, rec)
	} else {
		newRev, err = s.records.Update(ctx, key, rec, rev)
	}
	if err == nil {
		s.wrote(rec.GetCluster(), newRev)
	}
	return err
}

// wrote notes a record write of cluster at rev (see Service.written).
func (s *Service) wrote(cluster string, rev uint64) {
	if cluster != "" {
		s.written.Store(cluster, rev)
	}
}

// deleteRecord deletes a record at rev (gone already is done).
func (s *Service) deleteRecord(ctx context.Context, cluster, set string, rev uint64) error {
	err := s.records.Delete(ctx, keys.Addon(cluster, set), rev)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err == nil {
		// A delete's revision is not returned: wait for the cache to pass
		// the revision read, at least.
		s.wrote(cluster, rev+1)
	}
	return err
}

// forget deletes a record (compare-and-set). While the cluster is there,
// the set left its objects: the timeline says so.
func (s *Service) forget(ctx context.Context, log *zerolog.Logger, cluster string, st Step, rev uint64, clusterExists bool) error {
	if err := s.deleteRecord(ctx, cluster, st.Set, rev); err != nil {
		return err
	}
	if clusterExists && len(st.Record.GetObjects()) > 0 {
		msg := fmt.Sprintf("set %s no longer selects the cluster; its %s left in place (onRemove %s)", st.Set, objects(len(st.Record.GetObjects()), "is", "are"), manifest.AddonRemoveLeave)
		log.Info().Str("addon_set", st.Set).Int("objects", len(st.Record.GetObjects())).Msg(msg)
		s.event(ctx, cluster, st.Set, "left", st.Record.GetSetUid(), &capnv1.AddonEvent{Reason: "Left", Message: msg, Objects: int32(len(st.Record.GetObjects()))})
	}
	return nil
}

// remove deletes a record's objects from the cluster, dependents first,
// then the record. A failure is recorded on the record (Removing) and
// tried again after the backoff.
func (s *Service) remove(ctx context.Context, log *zerolog.Logger, c *kubeapi.Client, clientErr error, cluster string, st Step, rev uint64) error {
	key := keys.Addon(cluster, st.Set)
	objs := st.Record.GetObjects()
	err := clientErr
	deleted := 0
	if err == nil {
		log.Info().Str("addon_set", st.Set).Int("objects", len(objs)).Msg("deleting the objects of an add-on set that no longer selects the cluster")
		for i := len(objs) - 1; i >= 0 && err == nil; i-- {
			o := objs[i]
			var gone bool
			gone, err = c.DeleteObject(ctx, o.GetApiVersion(), o.GetKind(), o.GetNamespace(), o.GetName())
			if gone {
				deleted++
			}
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rec := Failed(cluster, nil, st.Record, ReasonRemoving, err, s.cfg.Now())
		log.Warn().Err(err).Str("addon_set", st.Set).Int32("attempt", rec.GetAttempts()).Msg("deleting an add-on set's objects failed; retrying after a backoff")
		return s.write(ctx, key, rec, rev)
	}
	if err := s.deleteRecord(ctx, cluster, st.Set, rev); err != nil {
		return err
	}
	msg := fmt.Sprintf("set %s no longer selects the cluster: its %s deleted (%d still existed)", st.Set, objects(len(objs), "was", "were"), deleted)
	log.Info().Str("addon_set", st.Set).Int("deleted", deleted).Msg(msg)
	s.event(ctx, cluster, st.Set, "removed", st.Record.GetSetUid(), &capnv1.AddonEvent{Reason: "Removed", Message: msg, Objects: int32(len(objs))})
	return nil
}

// apply applies a set's objects to the cluster in order, each with
// server-side apply as field manager capn, forced: the set owns the fields
// it names (a field changed by hand is set back; fields it does not name
// are left alone). Then, when the set deletes what it drops, the objects
// of the last apply it no longer has are deleted. The outcome is
// recorded; applied is true when it succeeded.
func (s *Service) apply(ctx context.Context, log *zerolog.Logger, c *kubeapi.Client, clientErr error, cluster string, st Step, cont content, rev uint64) (bool, error) {
	set := st.AddonSet
	key := keys.Addon(cluster, st.Set)
	now := s.cfg.Now()
	prev := st.Record
	err := clientErr
	created := 0
	objs := refs(cont.objects)
	if err == nil {
		log.Info().Str("addon_set", st.Set).Int64("generation", set.GetMetadata().GetGeneration()).Int("objects", len(cont.objects)).
			Str("why", st.Why).Msg("applying an add-on set")
		for _, o := range cont.objects {
			var made bool
			made, err = c.ServerSideApply(ctx, o.Body, kubeapi.ApplyOptions{Force: true}, nil)
			if err != nil {
				break
			}
			if made {
				created++
			}
		}
	}
	if err == nil && st.Prune {
		for _, o := range pruned(prev.GetObjects(), objs) {
			log.Info().Str("addon_set", st.Set).Str("object", refString(o)).Msg("deleting an object the add-on set no longer has")
			if _, err = c.DeleteObject(ctx, o.GetApiVersion(), o.GetKind(), o.GetNamespace(), o.GetName()); err != nil {
				break
			}
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		s.clients.Failed(cluster, err)
		rec := Failed(cluster, set, prev, ReasonApplyFailed, err, now)
		log.Warn().Err(err).Str("addon_set", st.Set).Int32("attempt", rec.GetAttempts()).Msg("applying an add-on set failed; retrying after a backoff")
		if rec.GetAttempts() == 1 {
			s.event(ctx, cluster, st.Set, "failed", set.GetMetadata().GetUid()+"."+fmt.Sprint(now.Unix()),
				&capnv1.AddonEvent{Reason: ReasonApplyFailed, Message: rec.GetLastError(), Generation: set.GetMetadata().GetGeneration()})
		}
		return false, s.write(ctx, key, rec, rev)
	}
	s.clients.Answered(cluster)
	rec := Applied(cluster, set, prev, cont.hash, objs, now)
	if err := s.write(ctx, key, rec, rev); err != nil {
		return false, err
	}
	gen := set.GetMetadata().GetGeneration()
	switch {
	case prev == nil || prev.GetAppliedHash() != cont.hash || prev.GetAppliedGeneration() != gen || prev.GetAttempts() > 0:
		msg := fmt.Sprintf("set %s applied: %s (generation %d)", st.Set, strings.TrimSuffix(objects(len(objs), "", ""), " "), gen)
		s.event(ctx, cluster, st.Set, "applied", fmt.Sprintf("%s.%d.%s", set.GetMetadata().GetUid(), gen, cont.hash),
			&capnv1.AddonEvent{Reason: ReasonApplied, Message: msg, Generation: gen, Objects: int32(len(objs))})
	case created > 0:
		s.metrics.recreate(created)
		msg := fmt.Sprintf("set %s applied again: %d of its %d objects were missing and were created again", st.Set, created, len(objs))
		if created == 1 {
			msg = fmt.Sprintf("set %s applied again: 1 of its %d objects was missing and was created again", st.Set, len(objs))
		}
		log.Info().Str("addon_set", st.Set).Int("recreated", created).Msg(msg)
		s.event(ctx, cluster, st.Set, "restored", fmt.Sprintf("%s.%d", set.GetMetadata().GetUid(), now.UnixNano()),
			&capnv1.AddonEvent{Reason: "Restored", Message: msg, Generation: gen, Objects: int32(created)})
	}
	return true, nil
}

// objects is "1 object was", "3 objects were" (verbs singular, plural).
func objects(n int, one, many string) string {
	if n == 1 {
		return "1 object " + one
	}
	return fmt.Sprintf("%d objects %s", n, many)
}

// event publishes a fact about one set on one cluster:
// capn.evt.addon.<what>.<cluster>.<set>, id addon.<what>.<cluster>.<set>.<discriminator>.
func (s *Service) event(ctx context.Context, cluster, set, what, discriminator string, ev *capnv1.AddonEvent) {
	ev.Cluster, ev.AddonSet = cluster, set
	id := "addon." + what + "." + cluster + "." + set + "." + discriminator
	if _, err := s.pub.Publish(ctx, events.EventSubject("addon", what, cluster, set), events.TypeAddonEvent+"."+what, id, ev); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Str("addon_set", set).Msg("publish add-on event")
	}
}
