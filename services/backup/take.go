package backup

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/schemas/backupfile"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// Triggers of a backup (BackupManifest.trigger).
const (
	TriggerAPI      = "api"
	TriggerSchedule = "schedule"
	TriggerMove     = "move"
)

// metaManifest is the object metadata key holding a backup's manifest
// (protojson), so that listing needs no download.
const metaManifest = "capn-manifest"

// UploadPrefix starts the names of files uploaded to be restored (the
// gateway's); they are not backups: listings and retention skip them.
const UploadPrefix = "upload-"

// backup takes one backup and stores it in the object store, then prunes
// the store to Keep backups.
func (s *Service) backup(ctx context.Context, clusters []string, trigger string) (*capnv1.BackupManifest, *capnv1.BackupError) {
	start := s.cfg.Now()
	m, data, berr := s.take(ctx, clusters, trigger)
	if berr != nil {
		s.metrics.taken(trigger, false, s.cfg.Now().Sub(start), 0)
		return nil, berr
	}
	line, err := protojson.Marshal(m)
	if err == nil {
		_, err = s.objects.Put(ctx, jetstream.ObjectMeta{Name: m.GetName(), Description: "capn backup (" + trigger + ")",
			Metadata: map[string]string{metaManifest: string(line)}}, bytes.NewReader(data))
	}
	if err != nil {
		s.metrics.taken(trigger, false, s.cfg.Now().Sub(start), 0)
		return nil, refuse(CodeInternal, fmt.Sprintf("store backup %s: %v", m.GetName(), err))
	}
	took := s.cfg.Now().Sub(start)
	s.metrics.taken(trigger, true, took, len(data))
	zerolog.Ctx(ctx).Info().Str("backup", m.GetName()).Int("clusters", len(m.GetClusters())).Uint64("entries", m.GetEntries()).
		Int("bytes", len(data)).Dur("spread", m.GetSpread().AsDuration()).Dur("took", took).Msg("backup stored")
	if err := s.prune(ctx); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("cannot prune old backups")
	}
	return m, nil
}

// take reads desired, secrets and observed each at one point (in the
// reverse of the order writes flow between them: observed, secrets,
// desired, asked for together) and makes the file. With clusters, only
// their keys are kept; each must exist.
func (s *Service) take(ctx context.Context, clusters []string, trigger string) (*capnv1.BackupManifest, []byte, *capnv1.BackupError) {
	snaps, err := store.ReadSnapshots(ctx, s.nc, store.SnapshotOptions{MaxBytes: s.cfg.MaxBytes}, backupfile.Buckets...)
	if err != nil {
		return nil, nil, refuse(CodeInternal, err.Error())
	}
	now := s.cfg.Now().UTC()
	m := &capnv1.BackupManifest{
		Name: now.Format("20060102T150405.000Z") + "-" + trigger, CapnVersion: capnVersion(),
		Created: timestamppb.New(now), Trigger: trigger, Partial: len(clusters) > 0,
	}
	keep := func(key string) bool {
		return len(clusters) == 0 || slices.Contains(clusters, keys.ClusterOf(key))
	}
	var entries []*capnv1.BackupEntry
	var from, to time.Time
	for _, sn := range snaps {
		m.Buckets = append(m.Buckets, &capnv1.BackupBucket{Name: sn.Bucket, Stream: sn.Stream, Sequence: sn.Sequence,
			ReadAt: timestamppb.New(sn.ReadAt), ReadTook: durationpb.New(sn.Took)})
		if from.IsZero() || sn.ReadAt.Before(from) {
			from = sn.ReadAt
		}
		if end := sn.ReadAt.Add(sn.Took); end.After(to) {
			to = end
		}
		for _, e := range sn.Entries {
			if !keep(e.Key) {
				continue
			}
			entries = append(entries, &capnv1.BackupEntry{Bucket: sn.Bucket, Key: e.Key, Value: e.Value, Revision: e.Revision,
				Created: timestamppb.New(e.Created)})
			if k, err := keys.Parse(e.Key); err == nil && sn.Bucket == backupfile.BucketDesired && k.Kind == keys.KindCluster {
				m.Clusters = append(m.Clusters, k.Cluster)
			}
		}
	}
	m.Spread = durationpb.New(to.Sub(from))
	sort.Strings(m.Clusters)
	var missing []string
	for _, c := range clusters {
		if !slices.Contains(m.Clusters, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return nil, nil, refuse(CodeNotFound, "no cluster "+strings.Join(missing, ", "))
	}
	data, err := backupfile.Encode(m, entries)
	if err != nil {
		return nil, nil, refuse(CodeInternal, err.Error())
	}
	return m, data, nil
}

// prune deletes the oldest backups beyond Keep. Names start with their
// time, so their order is their age.
func (s *Service) prune(ctx context.Context) error {
	infos, err := s.list(ctx)
	if err != nil || len(infos) <= s.cfg.Keep {
		return err
	}
	for _, info := range infos[:len(infos)-s.cfg.Keep] {
		if err := s.objects.Delete(ctx, info.Name); err != nil {
			return fmt.Errorf("delete backup %s: %w", info.Name, err)
		}
		zerolog.Ctx(ctx).Info().Str("backup", info.Name).Int("keep", s.cfg.Keep).Msg("old backup deleted")
	}
	return nil
}

// list is every backup in the store (uploads aside), oldest first.
func (s *Service) list(ctx context.Context) ([]*jetstream.ObjectInfo, error) {
	infos, err := s.objects.List(ctx)
	if err == jetstream.ErrNoObjectsFound {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list backups: %w", err)
	}
	infos = slices.DeleteFunc(infos, func(i *jetstream.ObjectInfo) bool { return strings.HasPrefix(i.Name, UploadPrefix) })
	slices.SortFunc(infos, func(a, b *jetstream.ObjectInfo) int { return strings.Compare(a.Name, b.Name) })
	return infos, nil
}
