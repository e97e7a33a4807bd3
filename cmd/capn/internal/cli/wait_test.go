package cli

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// testWaiter is a waiter fed by hand, on a clock that moves 5s per read.
func testWaiter(goal waitGoal, gen int64) (*waiter, *testkit.Buffer) {
	out := &testkit.Buffer{}
	now := fixedNow
	w := &waiter{cluster: "demo", goal: goal, gen: gen, timeout: time.Minute, out: out,
		now: func() time.Time { now = now.Add(5 * time.Second); return now }, machines: map[string]*capnv1.Machine{}}
	w.start = fixedNow
	return w, out
}

func TestWaitProgressAndTimeout(t *testing.T) {
	c, ms := fixture(fixedNow)
	w, out := testWaiter(untilReady, 2)
	for _, ev := range []client.WatchEvent{
		{Type: api.WatchAdded, Cluster: c},
		{Type: api.WatchAdded, Machine: ms[0]},
		{Type: api.WatchAdded, Machine: ms[4]},
		{Type: api.WatchSynced},
		{Type: api.WatchModified, Cluster: c}, // nothing new: no line
	} {
		if err := w.handle(ev); err != nil {
			t.Fatal(err)
		}
	}
	want := "[5s] demo: Upgrading, 5 of 6 machines available, 3 updated: 2 of 3 control-plane machines available, 2 up to date; not available: demo-control-plane-b2-1 (Provisioning) [failed: demo-md-0-a1-1: BootstrapFailed: cloud-init exited with 1]\n"
	if out.String() != want {
		t.Errorf("progress:\n%s\nwant:\n%s", out, want)
	}
	err := w.timedOut()
	wantErr := `timed out after 1m0s waiting for cluster demo to be ready
  state:    Upgrading, 5 of 6 machines available, 3 updated
  blocking: Ready=False ControlPlaneNotReady: 2 of 3 control-plane machines available, 2 up to date; not available: demo-control-plane-b2-1 (Provisioning)
  failed:   demo-md-0-a1-1: BootstrapFailed: cloud-init exited with 1`
	if err.Error() != wantErr {
		t.Errorf("timeout error:\n%s\nwant:\n%s", err, wantErr)
	}

	// The cluster becomes ready: done.
	ready := proto.Clone(c).(*capnv1.Cluster)
	ready.Status.Conditions = []*capnv1.Condition{{Type: "Ready", Status: "True", Reason: "Ready"}}
	if err := w.handle(client.WatchEvent{Type: api.WatchModified, Cluster: ready}); err != errWaitDone {
		t.Errorf("a ready cluster: %v, want errWaitDone", err)
	}
}

func TestWaitChecks(t *testing.T) {
	c, _ := fixture(fixedNow)
	with := func(f func(c *capnv1.Cluster)) *capnv1.Cluster {
		c := proto.Clone(c).(*capnv1.Cluster)
		f(c)
		return c
	}
	readyOld := with(func(c *capnv1.Cluster) {
		c.Status.ObservedGeneration = 1
		c.Status.Conditions = []*capnv1.Condition{{Type: "Ready", Status: "True"}}
	})
	tests := []struct {
		name     string
		goal     waitGoal
		events   []client.WatchEvent
		wantDone bool
		wantErr  string
		wantLine string
	}{
		{name: "ready, but of the generation before", events: []client.WatchEvent{{Type: api.WatchAdded, Cluster: readyOld}, {Type: api.WatchSynced}},
			wantLine: "waiting for capn to act on generation 2"},
		{name: "an invalid spec fails at once", events: []client.WatchEvent{{Type: api.WatchAdded, Cluster: with(func(c *capnv1.Cluster) {
			c.Status.Conditions = []*capnv1.Condition{{Type: "Ready", Status: "False", Reason: "InvalidSpec", Message: "the spec does not validate: x"}}
		})}, {Type: api.WatchSynced}}, wantErr: "cluster demo will not become ready: the spec does not validate: x"},
		// The apply this wait follows may reach the gateway's watch after it
		// synced: keep waiting (the timeout says what blocks).
		{name: "not in the gateway's view yet", events: []client.WatchEvent{{Type: api.WatchSynced}}},
		{name: "deleted while waiting", events: []client.WatchEvent{{Type: api.WatchAdded, Cluster: c}, {Type: api.WatchSynced}, {Type: api.WatchDeleted, Cluster: c}},
			wantErr: "cluster demo was deleted while waiting for it to be ready"},
		{name: "being deleted", events: []client.WatchEvent{{Type: api.WatchAdded, Cluster: with(func(c *capnv1.Cluster) { c.Metadata.DeletionTimestamp = timestamppb.New(fixedNow) })}, {Type: api.WatchSynced}},
			wantErr: "cluster demo is being deleted: it will not become ready"},
		{name: "gone: already", goal: untilGone, events: []client.WatchEvent{{Type: api.WatchSynced}}, wantDone: true},
		{name: "gone: when deleted", goal: untilGone, events: []client.WatchEvent{
			{Type: api.WatchAdded, Cluster: with(func(c *capnv1.Cluster) {
				c.Metadata.DeletionTimestamp = timestamppb.New(fixedNow)
				c.Status.Phase = "Deleting"
				c.Status.Conditions = []*capnv1.Condition{{Type: "Deleting", Status: "True", Message: "deleting 2 worker machines"}}
			})},
			{Type: api.WatchAdded, Machine: &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: "m"}}},
			{Type: api.WatchSynced},
			{Type: api.WatchDeleted, Cluster: c},
		}, wantDone: true, wantLine: "[5s] demo: Deleting, 1 machine left: deleting 2 worker machines\n"},
		// The planner removes the status just before the cluster record:
		// the last line says so, not "waiting for capn to start deleting".
		{name: "gone: the status removed first", goal: untilGone, events: []client.WatchEvent{
			{Type: api.WatchAdded, Cluster: with(func(c *capnv1.Cluster) {
				c.Metadata.DeletionTimestamp = timestamppb.New(fixedNow)
				c.Status.Phase = "Deleting"
				c.Status.Conditions = []*capnv1.Condition{{Type: "Deleting", Status: "True", Reason: "DeletingCluster", Message: "removing the cluster record"}}
			})},
			{Type: api.WatchSynced},
			{Type: api.WatchModified, Cluster: with(func(c *capnv1.Cluster) {
				c.Metadata.DeletionTimestamp = timestamppb.New(fixedNow)
				c.Status = nil
			})},
		}, wantLine: "demo: Deleting, 0 machines left: removing the cluster's last records\n"},
		{name: "gone: paused", goal: untilGone, events: []client.WatchEvent{
			{Type: api.WatchAdded, Cluster: with(func(c *capnv1.Cluster) {
				c.Metadata.DeletionTimestamp = timestamppb.New(fixedNow)
				c.Spec.Paused = true
				c.Status.Phase = "Paused"
				c.Status.Conditions = []*capnv1.Condition{{Type: "Deleting", Status: "True", Reason: "DeletionPaused", Message: "the cluster is paused: …"}}
			})},
			{Type: api.WatchSynced},
		}, wantLine: "[5s] demo: Paused, 0 machines left: the cluster is paused: its deletion waits for capn resume demo\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, out := testWaiter(tt.goal, 2)
			var err error
			for _, ev := range tt.events {
				if err = w.handle(ev); err != nil {
					break
				}
			}
			switch {
			case tt.wantDone && err != errWaitDone:
				t.Errorf("got %v, want done", err)
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Errorf("got %v, want %q", err, tt.wantErr)
			case !tt.wantDone && tt.wantErr == "" && err != nil:
				t.Errorf("got %v, want to go on waiting", err)
			}
			if !strings.Contains(out.String(), tt.wantLine) {
				t.Errorf("progress %q lacks %q", out, tt.wantLine)
			}
		})
	}
}

// TestCountsDuringSurge: a pool of 7 with a surge machine running before
// its old one goes. The counts were "11/10 machines ready" (get: 8/7);
// now no count is above desired but the surge.
func TestCountsDuringSurge(t *testing.T) {
	c, _ := fixture(fixedNow)
	c.Spec.WorkerPools = c.Spec.WorkerPools[:1]
	c.Spec.WorkerPools[0].Replicas = 7
	c.Status.ControlPlane = &capnv1.PoolStatus{Name: "control-plane", Desired: 3, Replicas: 3, Ready: 3, Updated: 3, Available: 3, Version: "v1.34.2"}
	c.Status.WorkerPools = []*capnv1.PoolStatus{{Name: "md-0", Desired: 7, Replicas: 8, Ready: 8, Updated: 4, Available: 8, Version: "v1.33.4"}}
	c.Status.Conditions = []*capnv1.Condition{{Type: "Ready", Status: "False", Reason: "WorkersNotReady",
		Message: "control plane: 3 of 3 updated, 3 available; pool md-0: 4 of 7 updated, 1 surge machine, 7 available"}}
	w, out := testWaiter(untilReady, 2)
	for _, ev := range []client.WatchEvent{{Type: api.WatchAdded, Cluster: c}, {Type: api.WatchSynced}} {
		if err := w.handle(ev); err != nil {
			t.Fatal(err)
		}
	}
	want := "[5s] demo: Upgrading, 10 of 10 machines available, 7 updated, 1 surge: control plane: 3 of 3 updated, 3 available; pool md-0: 4 of 7 updated, 1 surge machine, 7 available\n"
	if out.String() != want {
		t.Errorf("progress:\n%s\nwant:\n%s", out, want)
	}
	row := clusterRow(c, fixedNow, false, false)
	if row[3] != "3/3" || row[4] != "7/7" {
		t.Errorf("get row %v: CONTROL PLANE %s, WORKERS %s, want 3/3 and 7/7", row, row[3], row[4])
	}
}

// A hibernate --wait that times out says what it waited for.
func TestWaitHibernateTimeout(t *testing.T) {
	c, _ := fixture(fixedNow)
	c.Spec.Hibernated = true
	c.Status.Phase = "Hibernating"
	c.Status.Conditions = append(c.Status.Conditions, &capnv1.Condition{Type: "Hibernated", Status: "False", Reason: "Hibernating", Message: "3 of 6 machines stopped"})
	w, out := testWaiter(untilHibernated, 2)
	for _, ev := range []client.WatchEvent{{Type: api.WatchAdded, Cluster: c}, {Type: api.WatchSynced}} {
		if err := w.handle(ev); err != nil {
			t.Fatal(err)
		}
	}
	if want := "[5s] demo: Hibernating, 5 of 6 machines available, 3 updated: 3 of 6 machines stopped\n"; out.String() != want {
		t.Errorf("progress %q, want %q", out, want)
	}
	if err := w.timedOut(); !strings.HasPrefix(err.Error(), "timed out after 1m0s waiting for cluster demo to be hibernated\n  state:    Hibernating, ") {
		t.Errorf("timeout error:\n%s", err)
	}
}

// TestWaitCountsNoHostedAPIServersAsMachines: a hosted control plane's
// replicas are API servers on the management side; the wait's progress
// and its closing line count the cluster's machines, the workers.
func TestWaitCountsNoHostedAPIServersAsMachines(t *testing.T) {
	c := &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "demo", Generation: 2},
		Spec: &capnv1.ClusterSpec{ControlPlane: &capnv1.ControlPlaneSpec{Type: capnv1.ControlPlaneHosted, Replicas: 3},
			WorkerPools: []*capnv1.WorkerPool{{Name: "md-0", Replicas: 2}}},
		Status: &capnv1.ClusterStatus{Phase: "Ready", ObservedGeneration: 2,
			ControlPlane: &capnv1.PoolStatus{Name: "control-plane", Desired: 3, Replicas: 3, Ready: 3, Updated: 3, Available: 3},
			WorkerPools:  []*capnv1.PoolStatus{{Name: "md-0", Desired: 2, Replicas: 2, Ready: 2, Updated: 2, Available: 1}}}}
	w, _ := testWaiter(untilReady, 2)
	w.c, w.synced = c, true
	if summary, _ := w.state(); summary != "Ready, 1 of 2 machines available" {
		t.Errorf("hosted: summary %q, want the workers only", summary)
	}
	if n := machineCounts(c).desired; n != 2 {
		t.Errorf("hosted: %d machines, want 2", n)
	}
	if row := clusterRow(c, fixedNow, true, false); row[3] != "3/3" || row[4] != "2/2" || row[6] != capnv1.ControlPlaneHosted {
		t.Errorf("hosted: get -o wide row %v: CONTROL PLANE 3/3 (API servers), WORKERS 2/2, PROVIDER hosted wanted", row)
	}
	c.Spec.ControlPlane.Type = ""
	if summary, _ := w.state(); summary != "Ready, 4 of 5 machines available" {
		t.Errorf("machines: summary %q, want the control-plane machines counted", summary)
	}
}
