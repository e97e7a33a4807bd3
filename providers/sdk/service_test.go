package sdk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func create(c, m string) *capnv1.CreateMachine {
	return &capnv1.CreateMachine{Cluster: c, Machine: m, Role: "worker", Version: "v1.33.1"}
}

func TestCreateIsIdempotent(t *testing.T) {
	tests := []struct {
		name string
		ids  []string
	}{
		{"same event id twice", []string{"create-1", "create-1"}},
		{"different event ids", []string{"create-1", "create-2", "create-3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := sdktest.New(t)
			f := newFake()
			env.Run(sdk.NewService(f, fastOptions()))
			for _, id := range tt.ids {
				env.Send("fake", sdk.KindMachine, "create", id, create("c1", "m1"))
			}
			env.WaitDrained()
			m := env.WaitState("fake", "c1", "m1", sdk.StateRunning)
			if m.GetProvider() != "fake" || m.GetProviderId() != "fake://c1/m1" || m.GetUpdated() == nil {
				t.Errorf("record = %v", m)
			}
			if n := f.createCalls("c1", "m1"); n != 1 {
				t.Errorf("provider CreateMachine called %d times, want 1", n)
			}
			if keys := env.Keys("infra.fake."); len(keys) != 1 {
				t.Errorf("keys = %v, want one", keys)
			}
		})
	}
}

func TestCreateErrors(t *testing.T) {
	flaky := errors.New("flaky API")
	tests := []struct {
		name      string
		createErr func(n int) error
		state     capnv1.InfraState
		message   string
		calls     int
	}{
		{"transient error is retried", func(n int) error {
			if n == 1 {
				return flaky
			}
			return nil
		}, sdk.StateRunning, "", 2},
		{"permanent error fails the machine", func(int) error { return sdk.Permanent(errors.New("no capacity")) }, sdk.StateFailed, "create failed: no capacity", 1},
		{"last delivery fails the machine", func(int) error { return flaky }, sdk.StateFailed, "create failed: flaky API", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := sdktest.New(t)
			f := newFake()
			f.createErr = tt.createErr
			env.Run(sdk.NewService(f, fastOptions()))
			env.Send("fake", sdk.KindMachine, "create", "create-1", create("c1", "m1"))
			m := env.WaitState("fake", "c1", "m1", tt.state)
			if m.GetMessage() != tt.message {
				t.Errorf("message = %q, want %q", m.GetMessage(), tt.message)
			}
			env.WaitDrained()
			if n := f.createCalls("c1", "m1"); n != tt.calls {
				t.Errorf("CreateMachine called %d times, want %d", n, tt.calls)
			}
		})
	}
}

func TestDeleteMachine(t *testing.T) {
	env := sdktest.New(t)
	f := newFake()
	env.Run(sdk.NewService(f, fastOptions()))

	// A machine that never existed: acked, nothing written.
	env.Send("fake", sdk.KindMachine, "delete", "delete-missing", &capnv1.DeleteMachine{Cluster: "c1", Machine: "nope"})
	env.WaitDrained()
	if keys := env.Keys("infra.fake."); len(keys) != 0 {
		t.Fatalf("keys after deleting a missing machine = %v", keys)
	}

	env.Send("fake", sdk.KindMachine, "create", "create-1", create("c1", "m1"))
	env.WaitState("fake", "c1", "m1", sdk.StateRunning)
	env.Send("fake", sdk.KindMachine, "delete", "delete-1", &capnv1.DeleteMachine{Cluster: "c1", Machine: "m1"})
	env.WaitNoMachine("fake", "c1", "m1")
	if _, err := f.Describe(context.Background(), "c1", "m1"); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("provider still has the machine: %v", err)
	}
	// Deleting again is fine too.
	env.Send("fake", sdk.KindMachine, "delete", "delete-2", &capnv1.DeleteMachine{Cluster: "c1", Machine: "m1"})
	env.WaitDrained()
	if _, ok := env.Machine("fake", "c1", "m1"); ok {
		t.Error("a second delete brought the record back")
	}
}

func TestPower(t *testing.T) {
	env := sdktest.New(t)
	f := newFake()
	env.Run(sdk.NewService(f, fastOptions()))
	env.Send("fake", sdk.KindMachine, "create", "create-1", create("c1", "m1"))
	before := env.WaitState("fake", "c1", "m1", sdk.StateRunning)

	env.Send("fake", sdk.KindMachine, "stop", "stop-1", &capnv1.MachinePower{Cluster: "c1", Machine: "m1", Action: "stop"})
	stopped := env.WaitState("fake", "c1", "m1", sdk.StateStopped)
	env.Send("fake", sdk.KindMachine, "start", "start-1", &capnv1.MachinePower{Cluster: "c1", Machine: "m1"})
	started := env.WaitState("fake", "c1", "m1", sdk.StateRunning)
	for _, m := range []*capnv1.InfraMachine{stopped, started} {
		if m.GetProviderId() != before.GetProviderId() {
			t.Errorf("provider id changed: %s -> %s", before.GetProviderId(), m.GetProviderId())
		}
	}
	// Power on a machine that does not exist is terminated, nothing written.
	env.Send("fake", sdk.KindMachine, "stop", "stop-2", &capnv1.MachinePower{Cluster: "c1", Machine: "ghost", Action: "stop"})
	env.WaitDrained()
	if _, ok := env.Machine("fake", "c1", "ghost"); ok {
		t.Error("power on a missing machine wrote a record")
	}
}

func TestPowerUnsupported(t *testing.T) {
	env := sdktest.New(t)
	f := newFake()
	env.Run(sdk.NewService(noPower{f}, fastOptions()))
	env.Send("fake", sdk.KindMachine, "create", "create-1", create("c1", "m1"))
	env.WaitState("fake", "c1", "m1", sdk.StateRunning)
	env.Send("fake", sdk.KindMachine, "stop", "stop-1", &capnv1.MachinePower{Cluster: "c1", Machine: "m1", Action: "stop"})
	env.WaitDrained()
	if m, _ := env.Machine("fake", "c1", "m1"); m.GetStateValue() != sdk.StateRunning {
		t.Errorf("state = %s after an unsupported stop", m.GetState())
	}
}

func TestClusterInfra(t *testing.T) {
	env := sdktest.New(t)
	env.Run(sdk.NewService(newFake(), fastOptions()))
	env.Send("fake", sdk.KindCluster, "ensure", "ensure-1", &capnv1.EnsureClusterInfra{Cluster: "c1"})
	var ic *capnv1.InfraCluster
	natstest.WaitFor(t, sdktest.Timeout, "cluster infra recorded", func() bool {
		var ok bool
		ic, ok = env.Cluster("fake", "c1")
		return ok
	})
	if !ic.GetReady() || ic.GetProvider() != "fake" || ic.GetCluster() != "c1" || ic.GetControlPlaneEndpoint().GetPort() != 6443 {
		t.Errorf("cluster infra = %v", ic)
	}
	env.Send("fake", sdk.KindCluster, "delete", "delete-1", &capnv1.DeleteClusterInfra{Cluster: "c1"})
	natstest.WaitFor(t, sdktest.Timeout, "cluster infra deleted", func() bool {
		_, ok := env.Cluster("fake", "c1")
		return !ok
	})
}

// TestBadCommandsAreTerminated: malformed commands are refused at the edge
// (terminated, not retried) and nothing reaches KV.
func TestBadCommandsAreTerminated(t *testing.T) {
	env := sdktest.New(t)
	f := newFake()
	env.Run(sdk.NewService(f, fastOptions()))
	ctx := context.Background()
	tests := []struct {
		name, subject, typ string
		data               *capnv1.CreateMachine
	}{
		{"subject and data disagree", events.ProviderSubject("fake", "machine", "create", "c1", "m2"), sdk.TypeCreateMachine, create("c1", "m1")},
		{"type and subject disagree", events.ProviderSubject("fake", "machine", "delete", "c1", "m1"), sdk.TypeCreateMachine, create("c1", "m1")},
		{"unknown verb", events.ProviderSubject("fake", "machine", "explode", "c1", "m1"), sdk.CommandType("machine", "explode"), create("c1", "m1")},
		{"invalid machine name", events.ProviderSubject("fake", "machine", "create", "c1", "a=b"), sdk.TypeCreateMachine, create("c1", "a=b")},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := env.Pub.Publish(ctx, tt.subject, tt.typ, "bad-"+string(rune('a'+i)), tt.data); err != nil {
				t.Fatal(err)
			}
			env.WaitDrained()
		})
	}
	if keys := env.Keys("infra.fake."); len(keys) != 0 {
		t.Errorf("bad commands wrote %v", keys)
	}
	if n := f.createCalls("c1", "m1") + f.createCalls("c1", "a=b"); n != 0 {
		t.Errorf("bad commands reached the provider %d times", n)
	}
}

func TestReportOrdersByUpdated(t *testing.T) {
	env := sdktest.New(t)
	f := newFake()
	env.Run(sdk.NewService(f, fastOptions()))
	senv := <-f.env
	ctx := context.Background()
	t0 := time.Now()
	// The machine exists, as a provider reporting it would have it: the
	// drift reconcile (every 200ms here) agrees with the reports instead
	// of finding the record's machine gone and marking it Deleted.
	const pid = "fake://c1/m1"
	f.outOfBand(func(ms map[string]*capnv1.InfraMachine) {
		ms["c1/m1"] = &capnv1.InfraMachine{Cluster: "c1", Machine: "m1", State: sdk.StateRunning.Wire(), ProviderId: pid, Updated: timestampOf(t0.Add(-time.Hour))}
	})
	report := func(state capnv1.InfraState, at time.Time) {
		t.Helper()
		m := &capnv1.InfraMachine{Cluster: "c1", Machine: "m1", State: state.Wire(), ProviderId: pid, Updated: timestampOf(at)}
		if err := senv.Reporter.Report(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// Reports stamped in the past, so that the one made just before the
	// delete below is newer than both, however fast the delete is.
	report(sdk.StateRunning, t0.Add(-time.Millisecond))
	report(sdk.StateCreating, t0.Add(-2*time.Millisecond)) // late: dropped
	if m, _ := env.Machine("fake", "c1", "m1"); m.GetStateValue() != sdk.StateRunning || m.GetProvider() != "fake" {
		t.Fatalf("after a late report: %v", m)
	}

	beforeDelete := time.Now()
	env.Send("fake", sdk.KindMachine, "delete", "delete-1", &capnv1.DeleteMachine{Cluster: "c1", Machine: "m1"})
	env.WaitNoMachine("fake", "c1", "m1")
	report(sdk.StateRunning, beforeDelete) // newer than the record, made before the delete: dropped
	if m, ok := env.Machine("fake", "c1", "m1"); ok {
		t.Fatalf("a report older than the delete resurrected the machine: %v", m)
	}
	if err := senv.Reporter.Report(ctx, &capnv1.InfraMachine{Cluster: "c1", Machine: "a.b"}); err == nil || !strings.Contains(err.Error(), "invalid machine name") {
		t.Errorf("report with an invalid name: %v", err)
	}
}

// windowsFake runs linux and windows machines.
type windowsFake struct{ *fake }

func (windowsFake) OperatingSystems() []string { return []string{sdk.OSLinux, sdk.OSWindows} }

// TestCreateRefusesAnOSNotRun: a provider runs linux unless it says more
// (sdk.OperatingSystemer), and announces what it runs; a machine of an
// os it does not run is recorded Failed without reaching CreateMachine.
func TestCreateRefusesAnOSNotRun(t *testing.T) {
	env := sdktest.New(t)
	f := newFake()
	stop := env.Run(sdk.NewService(f, fastOptions()))
	win := create("c1", "w1")
	win.Os = sdk.OSWindows
	env.Send("fake", sdk.KindMachine, "create", "create-w1", win)
	m := env.WaitState("fake", "c1", "w1", sdk.StateFailed)
	if want := "create refused: provider fake does not run windows machines (it announces linux)"; m.GetMessage() != want {
		t.Errorf("message %q, want %q", m.GetMessage(), want)
	}
	env.Send("fake", sdk.KindMachine, "create", "create-l1", create("c1", "l1"))
	env.WaitState("fake", "c1", "l1", sdk.StateRunning)
	env.WaitDrained()
	if n := f.createCalls("c1", "w1"); n != 0 {
		t.Errorf("CreateMachine called %d times for a windows machine", n)
	}
	var a *capnv1.ProviderAnnouncement
	natstest.WaitFor(t, sdktest.Timeout, "announcement", func() bool {
		var ok bool
		a, ok = env.Announcement("fake")
		return ok
	})
	if len(a.GetOperatingSystems()) != 0 {
		t.Errorf("a linux-only provider announces %v", a.GetOperatingSystems())
	}
	stop()

	env2 := sdktest.New(t)
	f2 := newFake()
	env2.Run(sdk.NewService(windowsFake{f2}, fastOptions()))
	env2.Send("fake", sdk.KindMachine, "create", "create-w1", win)
	env2.WaitState("fake", "c1", "w1", sdk.StateRunning)
	natstest.WaitFor(t, sdktest.Timeout, "announcement with operating systems", func() bool {
		a, ok := env2.Announcement("fake")
		return ok && strings.Join(a.GetOperatingSystems(), ",") == "linux,windows"
	})
}
