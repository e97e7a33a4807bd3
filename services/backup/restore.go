package backup

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/schemas/backupfile"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// maxReportLines bounds each list of a report (dropped records, machines
// still waiting): a report must fit in one NATS message.
const maxReportLines = 200

// onRestore answers capn.backup.restore: the file uploaded to the object
// store is read and checked, planned against what the deployment holds,
// and applied (unless a dry run).
func (s *Service) onRestore(ctx context.Context, data []byte) proto.Message {
	req := &capnv1.RestoreBackup{}
	if err := proto.Unmarshal(data, req); err != nil {
		return &capnv1.RestoreReport{Error: refuse(CodeInvalid, "the request does not decode: "+err.Error())}
	}
	log := s.log.With().Str("object", req.GetObject()).Bool("merge", req.GetMerge()).Bool("dry_run", req.GetDryRun()).
		Str("requested_by", req.GetRequestedBy()).Logger()
	ctx = log.WithContext(ctx)
	s.restoring.Lock()
	defer s.restoring.Unlock()
	r := s.restore(ctx, req)
	if e := r.GetError(); e != nil {
		log.Warn().Str("code", e.GetCode()).Str("error", e.GetMessage()).Strs("details", e.GetDetails()).Msg("restore refused or failed")
	} else {
		log.Info().Strs("restored", r.GetRestored()).Int("conflicts", len(r.GetConflicts())).Uint64("adoptions", r.GetAdoptions()).
			Uint64("adopted", r.GetAdopted()).Int("waiting", len(r.GetWaiting())).Msg("restore done")
	}
	s.metrics.restored(r)
	return r
}

func (s *Service) restore(ctx context.Context, req *capnv1.RestoreBackup) *capnv1.RestoreReport {
	r := &capnv1.RestoreReport{DryRun: req.GetDryRun()}
	data, err := s.objects.GetBytes(ctx, req.GetObject())
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		r.Error = refuse(CodeNotFound, "no uploaded file "+req.GetObject())
		return r
	}
	if err != nil {
		r.Error = refuse(CodeInternal, "read the uploaded file: "+err.Error())
		return r
	}
	f, err := backupfile.Decode(data)
	if err == nil {
		err = f.Check()
	}
	var inv *backupfile.InvalidError
	if errors.As(err, &inv) {
		r.Error = refuse(CodeInvalid, "the file is not a valid backup: nothing was written", inv.Problems...)
		return r
	}
	if err != nil {
		r.Error = refuse(CodeInternal, err.Error())
		return r
	}
	r.Manifest = f.Manifest
	snaps, err := store.ReadSnapshots(ctx, s.nc, store.SnapshotOptions{MaxBytes: s.cfg.MaxBytes}, backupfile.Buckets...)
	if err != nil {
		r.Error = refuse(CodeInternal, "read what the deployment holds: "+err.Error())
		return r
	}
	target := Target{}
	for _, sn := range snaps {
		target[sn.Bucket] = map[string]bool{}
		for _, e := range sn.Entries {
			target[sn.Bucket][e.Key] = true
		}
	}
	now := s.cfg.Now()
	opts := PlanOptions{Merge: req.GetMerge(), Clusters: req.GetClusters(), Source: f.Manifest.GetName(), Now: now}
	if len(req.GetKeyIds()) > 0 {
		opts.KeyIDs = req.GetKeyIds()
	}
	plan, berr := PlanRestore(f, target, opts)
	if berr != nil {
		r.Error = berr
		return r
	}
	r.Conflicts, r.KeysChecked, r.Written = plan.Conflicts, plan.KeysChecked, plan.Keys()
	r.Dropped = first(plan.Dropped, maxReportLines)
	for _, c := range plan.Clusters {
		r.Restored = append(r.Restored, c.Name)
		r.Adoptions += uint64(len(c.Adopt))
	}
	if req.GetDryRun() || (len(plan.Clusters) == 0 && len(plan.Wide) == 0) {
		return r
	}
	if err := s.write(ctx, plan); err != nil {
		r.Error = refuse(CodeInternal, err.Error()+"; nothing was kept")
		r.Restored, r.Written = nil, nil
		return r
	}
	wait := req.GetAdoptWait().AsDuration()
	if wait <= 0 {
		wait = DefaultAdoptWait
	}
	deadline := now.Add(wait)
	restoreID := strconv.FormatInt(now.UnixNano(), 36)
	for _, c := range plan.Clusters {
		for _, a := range c.Adopt {
			if err := s.sendAdopt(ctx, restoreID, a); err != nil {
				r.Error = refuse(CodeInternal, fmt.Sprintf("ask provider %s to adopt %s: %v; the machines stay held until it is asked again (restore the same file with merge)", a.Provider, a.Key, err))
				return r
			}
		}
	}
	waiting := s.waitAdopted(ctx, plan, deadline)
	r.Adopted = r.Adoptions - uint64(len(waiting))
	r.Waiting = first(waiting, maxReportLines)
	return r
}

// write creates every key of the plan: the deployment-wide records, then
// cluster by cluster: secrets,
// observed (statuses held for adoption), desired machines, and the
// cluster's record last. No machine takes a step yet: every restored
// status is held until its provider adopts it. If one write fails,
// every key written is deleted again (compare-and-set on the revision
// written) and the error returned: a restore that cannot be done leaves
// nothing behind. Nothing has been handed to a provider yet, so nothing
// can be left adopted without its records.
func (s *Service) write(ctx context.Context, plan Plan) error {
	type written struct {
		bucket, key string
		rev         uint64
	}
	var done []written
	batches := [][]Write{plan.Wide}
	for _, c := range plan.Clusters {
		batches = append(batches, append(c.Writes, c.Cluster))
	}
	for _, batch := range batches {
		for _, w := range batch {
			rev, err := s.kv[w.Bucket].Create(ctx, w.Key, w.Value)
			if err == nil {
				done = append(done, written{w.Bucket, w.Key, rev})
				continue
			}
			err = fmt.Errorf("write %s/%s: %w", w.Bucket, w.Key, err)
			for i := len(done) - 1; i >= 0; i-- {
				d := done[i]
				if derr := s.kv[d.bucket].Delete(ctx, d.key, jetstream.LastRevision(d.rev)); derr != nil {
					err = fmt.Errorf("%w; and undoing %s/%s: %v", err, d.bucket, d.key, derr)
				}
			}
			return err
		}
	}
	zerolog.Ctx(ctx).Info().Int("keys", len(done)).Int("clusters", len(plan.Clusters)).Msg("restored records written; handing the infrastructure to its providers")
	return nil
}

// sendAdopt asks a provider to adopt a machine's or a cluster's
// infrastructure. The id is unique to this restore: a second restore of
// the same file asks again.
func (s *Service) sendAdopt(ctx context.Context, restoreID string, a Adopt) error {
	id := fmt.Sprintf("adopt.%s.%s.%s.%s", restoreID, a.Provider, a.Cluster, a.Machine)
	if a.ClusterRecord != nil {
		_, err := s.pub.Publish(ctx, events.ProviderSubject(a.Provider, "cluster", "adopt", a.Cluster, events.ClusterObject),
			events.TypeProviderCommand+".cluster.adopt", id, &capnv1.AdoptClusterInfra{Cluster: a.Cluster, Record: a.ClusterRecord})
		return err
	}
	_, err := s.pub.Publish(ctx, events.ProviderSubject(a.Provider, "machine", "adopt", a.Cluster, a.Machine),
		events.TypeProviderCommand+".machine.adopt", id, &capnv1.AdoptMachine{Cluster: a.Cluster, Machine: a.Machine, Record: a.Record})
	return err
}

// adoptPoll is how often a restore looks for adopted infrastructure.
const adoptPoll = 100 * time.Millisecond

// waitAdopted waits until the providers answered every adoption — wrote
// back the record of what they adopted, or recorded it Deleted because
// they have no such machine — or until deadline. It returns what is not
// adopted (provider/cluster/machine, with why when the provider said).
// One read of observed per look.
func (s *Service) waitAdopted(ctx context.Context, plan Plan, deadline time.Time) []string {
	var missing []string
	for {
		snaps, err := store.ReadSnapshots(ctx, s.nc, store.SnapshotOptions{MaxBytes: s.cfg.MaxBytes}, backupfile.BucketObserved)
		present := map[string][]byte{}
		if err == nil {
			for _, e := range snaps[0].Entries {
				if k, perr := keys.Parse(e.Key); perr == nil && k.Kind == keys.KindInfra {
					present[e.Key] = e.Value
				}
			}
		}
		missing = missing[:0]
		answered := true
		for _, c := range plan.Clusters {
			for _, a := range c.Adopt {
				what := a.Provider + "/" + a.Cluster + "/" + a.Machine
				v, ok := present[a.Key]
				if !ok {
					answered = false
					missing = append(missing, what)
					continue
				}
				if a.Record == nil {
					continue
				}
				im := &capnv1.InfraMachine{}
				if proto.Unmarshal(v, im) == nil && im.GetStateValue() == capnv1.InfraDeleted {
					missing = append(missing, what+" ("+im.GetMessage()+")")
				}
			}
		}
		if err == nil && answered {
			return missing
		}
		if !s.cfg.Now().Add(adoptPoll).Before(deadline) {
			return missing
		}
		select {
		case <-ctx.Done():
			return missing
		case <-time.After(adoptPoll):
		}
	}
}
