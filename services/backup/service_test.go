package backup

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/daemon"
)

// run starts the backup service with cfg on a fresh server and returns
// JetStream and the service's metrics registry.
func run(t *testing.T, cfg Config) (jetstream.JetStream, *prometheus.Registry) {
	t.Helper()
	ns := natstest.Start(t)
	nc, js := ns.Connect(t)
	if err := events.Provision(context.Background(), js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	go func() {
		done <- daemon.Run(ctx, daemon.Config{Name: Name, HTTPAddr: daemon.HTTPOff, ShutdownTimeout: 5 * time.Second},
			New(cfg), daemon.WithConn(nc), daemon.WithoutHTTP(), daemon.WithLogger(log), daemon.WithRegistry(reg))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("backup service: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the backup service did not stop")
		}
	})
	return js, reg
}

func schedule(t *testing.T, js jetstream.JetStream) *capnv1.BackupScheduleStatus {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := store.NewBucket(kv, store.New[capnv1.BackupScheduleStatus]()).Get(context.Background(), keys.BackupSchedule)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func backups(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	o, err := js.ObjectStore(context.Background(), events.ObjectBackups)
	if err != nil {
		return nil
	}
	infos, err := o.List(context.Background())
	if err != nil {
		return nil
	}
	var names []string
	for _, i := range infos {
		names = append(names, i.Name)
	}
	slices.Sort(names) // by time
	return names
}

// Scheduled backups: every interval, the newest Keep kept; a failure
// turns the BackupSucceeded condition False (with the error, counted) and
// capn_backup_schedule_failing to 1 until a backup succeeds again.
func TestScheduledBackups(t *testing.T) {
	if testing.Short() {
		t.Skip("scheduled every second: skipped with -short")
	}
	js, reg := run(t, Config{Every: time.Second, Keep: 2})
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := proto.Marshal(&capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "c1"}})
	if _, err := kv.Put(ctx, "cluster.c1", c); err != nil {
		t.Fatal(err)
	}
	succeeded := func() float64 {
		return metricValue(t, reg, MetricBackups, map[string]string{"trigger": "schedule", "outcome": "succeeded"})
	}
	var names []string
	var st *capnv1.BackupScheduleStatus
	natstest.WaitFor(t, 20*time.Second, "three scheduled backups, the newest 2 kept and recorded", func() bool {
		names, st = backups(t, js), schedule(t, js)
		return succeeded() >= 3 && len(names) == 2 && st.GetLastBackup() == names[1]
	})
	if c := conditions.Get(st.GetConditions(), ConditionBackupSucceeded); c.GetStatusValue() != capnv1.ConditionTrue ||
		st.GetLastBackup() == "" || st.GetKeep() != 2 || st.GetEvery().AsDuration() != time.Second || st.GetNext() == nil {
		t.Errorf("schedule %v", st)
	}

	// The object store goes: the next backups fail.
	if err := js.DeleteObjectStore(ctx, events.ObjectBackups); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, "a failed scheduled backup recorded", func() bool {
		st = schedule(t, js)
		c := conditions.Get(st.GetConditions(), ConditionBackupSucceeded)
		return c.GetStatusValue() == capnv1.ConditionFalse && st.GetConsecutiveFailures() >= 1
	})
	c2 := conditions.Get(st.GetConditions(), ConditionBackupSucceeded)
	if c2.GetReason() != ReasonBackupFailed || c2.GetMessage() == "" || st.GetLastError() == "" {
		t.Errorf("the failure's condition %v, error %q", c2, st.GetLastError())
	}
	if v := metricValue(t, reg, MetricScheduleFailing, nil); v != 1 {
		t.Errorf("%s = %v while failing", MetricScheduleFailing, v)
	}
	t.Logf("failing: %s", c2.GetMessage())

	// It comes back: so do the backups, the condition and the metric.
	if _, err := js.CreateObjectStore(ctx, events.DefaultTopology(1).ObjectStores[0]); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, "a scheduled backup after the store is back", func() bool {
		st = schedule(t, js)
		return conditions.IsTrue(st.GetConditions(), ConditionBackupSucceeded) && st.GetConsecutiveFailures() == 0
	})
	if v := metricValue(t, reg, MetricScheduleFailing, nil); v != 0 {
		t.Errorf("%s = %v after a success", MetricScheduleFailing, v)
	}
	if v := metricValue(t, reg, MetricLastSuccess, map[string]string{"trigger": "schedule"}); v < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("%s = %v", MetricLastSuccess, v)
	}
}

// metricValue is the value of the metric name with labels in reg (0 when
// there is none).
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := true
			for _, lp := range m.GetLabel() {
				if want, set := labels[lp.GetName()]; set && want != lp.GetValue() {
					ok = false
				}
			}
			if !ok {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
