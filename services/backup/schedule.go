package backup

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/keys"
)

// The scheduled backups' condition (BackupScheduleStatus.conditions).
const (
	ConditionBackupSucceeded = "BackupSucceeded"
	ReasonBackupSucceeded    = "BackupSucceeded"
	ReasonBackupFailed       = "BackupFailed"
)

// runSchedule takes a backup every Every until ctx ends, and records how
// each went in observed backup.schedule (a condition that turns False
// when one fails) and the metrics. A failed backup is tried again at the
// next tick, not sooner: the condition and capn_backup_schedule_failing
// say it failed.
func (s *Service) runSchedule(ctx context.Context) {
	if s.cfg.Every <= 0 {
		return
	}
	log := s.log.With().Str("trigger", TriggerSchedule).Logger()
	ctx = log.WithContext(ctx)
	next := s.cfg.Now().Add(s.cfg.Every)
	s.recordSchedule(ctx, func(st *capnv1.BackupScheduleStatus) { st.Next = timestamppb.New(next) })
	t := time.NewTimer(s.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		at := s.cfg.Now()
		m, berr := s.backup(ctx, nil, TriggerSchedule)
		next = s.cfg.Now().Add(s.cfg.Every)
		t.Reset(s.cfg.Every)
		s.metrics.scheduleFailing(berr != nil)
		s.recordSchedule(ctx, func(st *capnv1.BackupScheduleStatus) {
			st.LastAttempt, st.Next = timestamppb.New(at), timestamppb.New(next)
			if berr != nil {
				st.LastError = berr.GetMessage()
				st.ConsecutiveFailures++
				conditions.Set(&st.Conditions, conditions.New(ConditionBackupSucceeded, capnv1.ConditionFalse, ReasonBackupFailed,
					fmt.Sprintf("the scheduled backup at %s failed (%d in a row): %s", at.UTC().Format(time.RFC3339), st.ConsecutiveFailures, berr.GetMessage())), at)
				return
			}
			st.LastSuccess, st.LastBackup, st.LastError, st.ConsecutiveFailures = timestamppb.New(at), m.GetName(), "", 0
			conditions.Set(&st.Conditions, conditions.New(ConditionBackupSucceeded, capnv1.ConditionTrue, ReasonBackupSucceeded,
				fmt.Sprintf("backup %s: %d clusters, %d entries", m.GetName(), len(m.GetClusters()), m.GetEntries())), at)
		})
		if berr != nil {
			log.Error().Str("code", berr.GetCode()).Str("error", berr.GetMessage()).Msg("scheduled backup failed")
		}
	}
}

// recordSchedule changes observed backup.schedule with compare-and-set.
// A failure to record is logged: the metrics still say how it went.
func (s *Service) recordSchedule(ctx context.Context, fn func(*capnv1.BackupScheduleStatus)) {
	_, _, err := s.schedule.Mutate(ctx, keys.BackupSchedule, func(cur *capnv1.BackupScheduleStatus, _ bool) (*capnv1.BackupScheduleStatus, error) {
		cur.Every, cur.Keep = durationpb.New(s.cfg.Every), int32(s.cfg.Keep)
		fn(cur)
		return cur, nil
	})
	if err != nil {
		s.log.Warn().Err(err).Msg("cannot record the scheduled backups' state")
	}
}
