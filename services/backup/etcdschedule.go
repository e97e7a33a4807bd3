package backup

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/keys"
)

// The scheduled etcd snapshots' condition (EtcdSnapshotStatus.conditions).
const (
	ConditionEtcdSnapshotSucceeded = "EtcdSnapshotSucceeded"
	ReasonEtcdSnapshotSucceeded    = "EtcdSnapshotSucceeded"
	ReasonEtcdSnapshotFailed       = "EtcdSnapshotFailed"
)

// DefaultEtcdScheduleTick is how often the clusters' snapshot policies
// are looked at.
const DefaultEtcdScheduleTick = 10 * time.Second

// EtcdDue is when cluster's next scheduled snapshot is due, from its
// policy and its recorded state: the recorded next, else now + every (a
// cluster never snapshotted waits one interval, as the management-plane
// schedule does). ok is false without a policy.
func EtcdDue(p *capnv1.EtcdSnapshotPolicy, st *capnv1.EtcdSnapshotStatus, now time.Time) (due time.Time, ok bool) {
	every := p.GetEvery().AsDuration()
	if p == nil || every <= 0 {
		return time.Time{}, false
	}
	if st.GetNext() != nil && st.GetEvery().AsDuration() == every {
		return st.GetNext().AsTime(), true
	}
	if st.GetLastAttempt() != nil {
		return st.GetLastAttempt().AsTime().Add(every), true
	}
	return now.Add(every), true
}

// runEtcdSchedule looks at every cluster's policy each tick and takes the
// snapshots that are due, one cluster at a time.
func (s *Service) runEtcdSchedule(ctx context.Context) {
	if s.cfg.Keyring == nil {
		return
	}
	t := time.NewTicker(s.cfg.EtcdScheduleTick)
	defer t.Stop()
	for {
		s.etcdScheduleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Service) etcdScheduleOnce(ctx context.Context) {
	clusters, err := s.clusters.List(ctx, keys.Cluster(""))
	if err != nil {
		s.log.Warn().Err(err).Msg("etcd snapshot schedule: cannot list the clusters")
		return
	}
	for _, e := range clusters {
		c := e.Value
		p := c.GetSpec().GetEtcdSnapshots()
		if p == nil || c.GetSpec().GetBootstrap().GetProvider() != KubeLocal || c.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		k, err := keys.Parse(e.Key)
		if err != nil {
			continue
		}
		name := k.Cluster
		st, _, _ := s.etcdStatus.Get(ctx, keys.EtcdSnapshotStatus(name))
		now := s.cfg.Now()
		due, ok := EtcdDue(p, st, now)
		if !ok {
			continue
		}
		if st.GetNext() == nil || st.GetEvery().AsDuration() != p.GetEvery().AsDuration() || now.Before(due) {
			if st.GetNext() == nil || !st.GetNext().AsTime().Equal(due) {
				s.recordEtcd(ctx, name, p, func(st *capnv1.EtcdSnapshotStatus) { st.Next = timestamppb.New(due) })
			}
			if now.Before(due) {
				continue
			}
		}
		log := s.log.With().Str("cluster", name).Str("trigger", TriggerSchedule).Logger()
		info, berr := s.etcdSnapshot(log.WithContext(ctx), name, TriggerSchedule, "")
		next := s.cfg.Now().Add(p.GetEvery().AsDuration())
		s.recordEtcd(ctx, name, p, func(st *capnv1.EtcdSnapshotStatus) {
			st.LastAttempt, st.Next = timestamppb.New(now), timestamppb.New(next)
			if berr != nil {
				st.LastError = berr.GetMessage()
				st.ConsecutiveFailures++
				conditions.Set(&st.Conditions, conditions.New(ConditionEtcdSnapshotSucceeded, capnv1.ConditionFalse, ReasonEtcdSnapshotFailed,
					fmt.Sprintf("the scheduled etcd snapshot at %s failed (%d in a row): %s", now.UTC().Format(time.RFC3339), st.ConsecutiveFailures, berr.GetMessage())), now)
				return
			}
			st.LastSuccess, st.LastSnapshot, st.LastError, st.ConsecutiveFailures = timestamppb.New(now), info.GetName(), "", 0
			conditions.Set(&st.Conditions, conditions.New(ConditionEtcdSnapshotSucceeded, capnv1.ConditionTrue, ReasonEtcdSnapshotSucceeded,
				fmt.Sprintf("etcd snapshot %s: %d bytes at revision %d from %s", info.GetName(), info.GetSize(), info.GetRevision(), info.GetMachine())), now)
		})
		if berr != nil {
			log.Error().Str("code", berr.GetCode()).Str("error", berr.GetMessage()).Msg("scheduled etcd snapshot failed")
		}
	}
}

// recordEtcd changes observed backup.etcd-<cluster> with compare-and-set.
func (s *Service) recordEtcd(ctx context.Context, cluster string, p *capnv1.EtcdSnapshotPolicy, fn func(*capnv1.EtcdSnapshotStatus)) {
	_, _, err := s.etcdStatus.Mutate(ctx, keys.EtcdSnapshotStatus(cluster), func(cur *capnv1.EtcdSnapshotStatus, _ bool) (*capnv1.EtcdSnapshotStatus, error) {
		cur.Cluster, cur.Every, cur.Keep = cluster, p.GetEvery(), int32(keepOf(p))
		fn(cur)
		return cur, nil
	})
	if err != nil {
		s.log.Warn().Err(err).Str("cluster", cluster).Msg("cannot record the scheduled etcd snapshots' state")
	}
}
