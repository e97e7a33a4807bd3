package sdk_test

import (
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func TestDrift(t *testing.T) {
	tests := []struct {
		name       string
		opts       func() sdk.Options
		outOfBand  func(map[string]*capnv1.InfraMachine)
		recheck    bool
		kind       string
		wantState  string
		wantPID    string
		wantInfMsg string
	}{
		{
			name:      "gone, found by the periodic reconcile",
			opts:      fastOptions,
			outOfBand: func(ms map[string]*capnv1.InfraMachine) { delete(ms, "c1/m1") },
			kind:      sdk.DriftGone, wantState: sdk.StateDeleted.Wire(), wantPID: "fake://c1/m1", wantInfMsg: sdk.MessageGone,
		},
		{
			name: "gone, found by Recheck",
			opts: func() sdk.Options {
				o := fastOptions()
				o.ReconcileEvery = sdk.NoReconcile
				return o
			},
			outOfBand: func(ms map[string]*capnv1.InfraMachine) { delete(ms, "c1/m1") },
			recheck:   true,
			kind:      sdk.DriftGone, wantState: sdk.StateDeleted.Wire(), wantPID: "fake://c1/m1", wantInfMsg: sdk.MessageGone,
		},
		{
			name: "stopped out of band",
			opts: fastOptions,
			outOfBand: func(ms map[string]*capnv1.InfraMachine) {
				ms["c1/m1"].State, ms["c1/m1"].Updated = sdk.StateStopped.Wire(), timestampOf(time.Now())
			},
			kind: sdk.DriftStopped, wantState: sdk.StateStopped.Wire(), wantPID: "fake://c1/m1",
		},
		{
			name: "replaced out of band",
			opts: fastOptions,
			outOfBand: func(ms map[string]*capnv1.InfraMachine) {
				ms["c1/m1"].ProviderId, ms["c1/m1"].Updated = "fake://c1/m1-2", timestampOf(time.Now())
			},
			kind: sdk.DriftChanged, wantState: sdk.StateRunning.Wire(), wantPID: "fake://c1/m1-2",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := sdktest.New(t)
			f := newFake()
			env.Run(sdk.NewService(f, tt.opts()))
			senv := <-f.env
			env.Send("fake", sdk.KindMachine, "create", "create-1", create("c1", "m1"))
			env.WaitState("fake", "c1", "m1", sdk.StateRunning)

			f.outOfBand(tt.outOfBand)
			if tt.recheck {
				senv.Reporter.Recheck("c1", "m1")
			}
			d := env.WaitDrift("c1", "m1", tt.kind)
			if d.GetProvider() != "fake" || d.GetCluster() != "c1" || d.GetMachine() != "m1" || d.GetTime() == nil || d.GetMessage() == "" {
				t.Errorf("drift report = %v", d)
			}
			m := env.WaitMachine("fake", "c1", "m1", "state "+tt.wantState+" as "+tt.wantPID, func(m *capnv1.InfraMachine) bool {
				return m.GetState() == tt.wantState && m.GetProviderId() == tt.wantPID
			})
			if tt.wantInfMsg != "" && m.GetMessage() != tt.wantInfMsg {
				t.Errorf("message = %q, want %q", m.GetMessage(), tt.wantInfMsg)
			}
			if n := env.Count(events.StreamEvents, sdk.DriftSubject("fake", "c1", "m1")); n != 1 {
				t.Errorf("%d drift reports, want 1", n)
			}
		})
	}
}

// TestOrphanIsReportedOnceAndKept: a machine that exists without a record
// is reported, once, and neither deleted nor recorded.
func TestOrphanIsReportedOnceAndKept(t *testing.T) {
	env := sdktest.New(t)
	f := newFake()
	env.Run(sdk.NewService(f, fastOptions()))
	f.outOfBand(func(ms map[string]*capnv1.InfraMachine) {
		ms["c1/stray"] = &capnv1.InfraMachine{Cluster: "c1", Machine: "stray", State: sdk.StateRunning.Wire(), ProviderId: "fake://c1/stray"}
	})
	d := env.WaitDrift("c1", "stray", sdk.DriftOrphan)
	if !strings.Contains(d.GetMessage(), "fake://c1/stray") {
		t.Errorf("orphan message = %q", d.GetMessage())
	}
	// Let later reconcile rounds pass: a machine vanishing now is only
	// reported by one of them.
	env.Send("fake", sdk.KindMachine, "create", "create-1", create("c1", "m1"))
	env.WaitState("fake", "c1", "m1", sdk.StateRunning)
	f.outOfBand(func(ms map[string]*capnv1.InfraMachine) { delete(ms, "c1/m1") })
	env.WaitDrift("c1", "m1", sdk.DriftGone)

	if n := env.Count(events.StreamEvents, sdk.DriftSubject("fake", "c1", "stray")); n != 1 {
		t.Errorf("orphan reported %d times, want once", n)
	}
	if _, ok := env.Machine("fake", "c1", "stray"); ok {
		t.Error("an orphan was recorded")
	}
	if _, err := f.Describe(t.Context(), "c1", "stray"); err != nil {
		t.Errorf("the orphan was deleted: %v", err)
	}
}

// TestCorruptRecordDoesNotStopDrift: a record that does not decode is
// skipped; the others are still checked.
func TestCorruptRecordDoesNotStopDrift(t *testing.T) {
	env := sdktest.New(t)
	kv, err := env.JS.KeyValue(t.Context(), events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), sdk.InfraKey("fake", "c1", "junk"), []byte{0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	f := newFake()
	env.Run(sdk.NewService(f, fastOptions()))
	env.Send("fake", sdk.KindMachine, "create", "create-1", create("c1", "m1"))
	env.WaitState("fake", "c1", "m1", sdk.StateRunning)
	f.outOfBand(func(ms map[string]*capnv1.InfraMachine) { delete(ms, "c1/m1") })
	env.WaitDrift("c1", "m1", sdk.DriftGone)
}
