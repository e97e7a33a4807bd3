package machinemanager

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func machine(deleting bool) *capnv1.Machine {
	m := &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: "m1", Uid: "u1", Generation: 1},
		Spec: &capnv1.MachineSpec{Cluster: "c1", Provider: "sim", Role: "worker", Version: "v1.34.2"}}
	if deleting {
		m.Metadata.DeletionTimestamp = timestamppb.New(t0)
	}
	return m
}

// stopped is a machine whose spec asks for it stopped (hibernation) or not,
// at generation 2: the planner's in-place update bumped it.
func stopped(stop bool) *capnv1.Machine {
	m := machine(false)
	m.Spec.Stopped = stop
	m.Metadata.Generation = 2
	return m
}

func status(phase string, mut ...func(*capnv1.MachineStatus)) *capnv1.MachineStatus {
	st := &capnv1.MachineStatus{Phase: phase, PhaseSince: timestamppb.New(t0), Provider: "sim"}
	for _, f := range mut {
		f(st)
	}
	return st
}

func withBootstrap(st *capnv1.MachineStatus) {
	st.BootstrapDataChecksum = "sha256:x"
	setCondition(st, CondBootstrapReady, capnv1.ConditionTrue, "Ready", "", t0)
}

func infra(state string) *capnv1.InfraMachine {
	return &capnv1.InfraMachine{Provider: "sim", Cluster: "c1", Machine: "m1", State: state, ProviderId: "sim://c1/m1"}
}

// started is a Running infra record the provider stamped at (it started
// the machine then).
func started(at time.Time) *capnv1.InfraMachine {
	im := infra("Running")
	im.Updated = timestamppb.New(at)
	return im
}

// nodeAt is a node record whose last heartbeat, at, said ready or not.
func nodeAt(ready bool, at time.Time) *capnv1.NodeHealth {
	return &capnv1.NodeHealth{Cluster: "c1", Machine: "m1", Ready: ready, LastHeartbeat: timestamppb.New(at), Updated: timestamppb.New(at)}
}

func TestStep(t *testing.T) {
	tests := []struct {
		name      string
		in        Input
		wantPhase string // "" means the status is forgotten
		wantCmds  []string
		wantFail  string
	}{
		{"new machine asks for bootstrap data", Input{Desired: machine(false)}, capnv1.MachineBootstrapping.Wire(), []string{CmdBootstrap}, ""},
		{"waits for bootstrap data", Input{Desired: machine(false), Status: status(capnv1.MachineBootstrapping.Wire())}, capnv1.MachineBootstrapping.Wire(), nil, ""},
		{"no answer for a while: asks again", Input{Desired: machine(false), Status: status(capnv1.MachineBootstrapping.Wire()), Now: t0.Add(65 * time.Second)}, capnv1.MachineBootstrapping.Wire(), []string{CmdBootstrap}, ""},
		{"bootstrap ready: create", Input{Desired: machine(false), Status: status(capnv1.MachineBootstrapping.Wire(), func(s *capnv1.MachineStatus) { s.BootstrapDataChecksum = "sha256:x" })}, capnv1.MachineProvisioning.Wire(), []string{CmdCreate}, ""},
		{"bootstrap timeout", Input{Desired: machine(false), Status: status(capnv1.MachineBootstrapping.Wire()), Now: t0.Add(6 * time.Minute)}, capnv1.MachineFailed.Wire(), nil, ReasonBootstrapTimeout},
		{"infra running: provisioned", Input{Desired: machine(false), Status: status(capnv1.MachineProvisioning.Wire(), withBootstrap), Infra: infra("Running")}, capnv1.MachineProvisioned.Wire(), nil, ""},
		{"infra failed", Input{Desired: machine(false), Status: status(capnv1.MachineProvisioning.Wire(), withBootstrap), Infra: infra("Failed")}, capnv1.MachineFailed.Wire(), nil, ReasonInfrastructureFailed},
		{"node ready: running", Input{Desired: machine(false), Status: status(capnv1.MachineProvisioned.Wire(), withBootstrap, func(s *capnv1.MachineStatus) { s.NodeReadyTime = timestamppb.New(t0) }), Infra: infra("Running")}, capnv1.MachineRunning.Wire(), nil, ""},
		{"infra vanished while running", Input{Desired: machine(false), Status: status(capnv1.MachineRunning.Wire(), withBootstrap)}, capnv1.MachineFailed.Wire(), nil, ReasonInfrastructureGone},
		{"delete before create: done at once", Input{Desired: machine(true), Status: status(capnv1.MachineBootstrapping.Wire())}, capnv1.MachineDeleted.Wire(), nil, ""},
		{"delete with infra: ask provider, wait", Input{Desired: machine(true), Status: status(capnv1.MachineRunning.Wire(), withBootstrap), Infra: infra("Running")}, capnv1.MachineDeleting.Wire(), []string{CmdDelete}, ""},
		{"infra gone: deleted", Input{Desired: machine(true), Status: status(capnv1.MachineDeleting.Wire(), withBootstrap)}, capnv1.MachineDeleted.Wire(), []string{CmdDelete}, ""},
		{"spec removed after deleted: forget", Input{Status: status(capnv1.MachineDeleted.Wire(), withBootstrap)}, "", nil, ""},
		{"spec removed while running: delete infra", Input{Status: status(capnv1.MachineRunning.Wire(), withBootstrap), Infra: infra("Running")}, capnv1.MachineDeleting.Wire(), []string{CmdDelete}, ""},
		{"hibernate: ask the provider to stop", Input{Desired: stopped(true), Status: status(capnv1.MachineRunning.Wire(), withBootstrap), Infra: infra("Running")}, capnv1.MachineRunning.Wire(), []string{CmdStop}, ""},
		{"hibernated: infra stopped", Input{Desired: stopped(true), Status: status(capnv1.MachineRunning.Wire(), withBootstrap), Infra: infra("Stopped")}, capnv1.MachineStopped.Wire(), nil, ""},
		{"stays stopped", Input{Desired: stopped(true), Status: status(capnv1.MachineStopped.Wire(), withBootstrap), Infra: infra("Stopped")}, capnv1.MachineStopped.Wire(), nil, ""},
		{"started out of band while hibernated: stop again", Input{Desired: stopped(true), Status: status(capnv1.MachineStopped.Wire(), withBootstrap), Infra: infra("Running")}, capnv1.MachineStopped.Wire(), []string{CmdStop}, ""},
		{"wake: ask the provider to start", Input{Desired: stopped(false), Status: status(capnv1.MachineStopped.Wire(), withBootstrap), Infra: infra("Stopped")}, capnv1.MachineStopped.Wire(), []string{CmdStart}, ""},
		{"woken: infra running, the node ready since the start", Input{Desired: stopped(false), Status: status(capnv1.MachineStopped.Wire(), withBootstrap), Infra: started(t0.Add(time.Minute)), Node: nodeAt(true, t0.Add(time.Minute+time.Second))}, capnv1.MachineRunning.Wire(), nil, ""},
		{"woken: infra running, the node's last ready heartbeat from before the hibernation", Input{Desired: stopped(false), Status: status(capnv1.MachineStopped.Wire(), withBootstrap), Infra: started(t0.Add(time.Minute)), Node: nodeAt(true, t0)}, capnv1.MachineStopped.Wire(), nil, ""},
		{"woken: infra running, the node not ready yet", Input{Desired: stopped(false), Status: status(capnv1.MachineStopped.Wire(), withBootstrap), Infra: started(t0.Add(time.Minute)), Node: nodeAt(false, t0.Add(2*time.Minute))}, capnv1.MachineStopped.Wire(), nil, ""},
		{"woken: infra running, no node record", Input{Desired: stopped(false), Status: status(capnv1.MachineStopped.Wire(), withBootstrap), Infra: started(t0.Add(time.Minute))}, capnv1.MachineStopped.Wire(), nil, ""},
		{"stopped machine vanished", Input{Desired: stopped(true), Status: status(capnv1.MachineStopped.Wire(), withBootstrap)}, capnv1.MachineFailed.Wire(), nil, ReasonInfrastructureGone},
		{"stopped out of band while running: start", Input{Desired: machine(false), Status: status(capnv1.MachineRunning.Wire(), withBootstrap), Infra: infra("Stopped")}, capnv1.MachineRunning.Wire(), []string{CmdStart}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Cluster, tt.in.Name = "c1", "m1"
			if tt.in.Now.IsZero() {
				tt.in.Now = t0.Add(time.Second)
			}
			out := Step(tt.in, Timeouts{})
			if got := out.Status.GetPhase(); got != tt.wantPhase {
				t.Fatalf("phase %q, want %q", got, tt.wantPhase)
			}
			if tt.wantPhase == "" && out.Status != nil {
				t.Fatal("status kept, want forgotten")
			}
			var kinds []string
			for _, c := range out.Commands {
				kinds = append(kinds, c.Kind)
				want := c.Kind + ".c1.m1.u1"
				switch {
				case c.Kind == CmdStop || c.Kind == CmdStart:
					want += fmt.Sprintf(".%d", tt.in.Desired.GetMetadata().GetGeneration()) // each hibernate or wake is a new request
				case c.Kind == CmdBootstrap && tt.in.Status != nil:
					want += ".ask2" // asked again, 65s after the first ask: the second re-ask
				}
				if c.ID != want && c.ID != c.Kind+".c1.m1.orphan" {
					t.Errorf("command id %q is not deterministic per machine incarnation", c.ID)
				}
			}
			if len(kinds) != len(tt.wantCmds) || (len(kinds) > 0 && kinds[0] != tt.wantCmds[0]) {
				t.Fatalf("commands %v, want %v", kinds, tt.wantCmds)
			}
			if out.Status.GetFailureReason() != tt.wantFail {
				t.Fatalf("failure reason %q, want %q", out.Status.GetFailureReason(), tt.wantFail)
			}
			// A phase change is a timeline event.
			if changed := tt.in.Status.GetPhase() != out.Status.GetPhase() && out.Status != nil; changed != (len(out.Events) == 1) {
				t.Fatalf("phase %q → %q but events %v", tt.in.Status.GetPhase(), out.Status.GetPhase(), out.Events)
			}
			// Each with a CamelCase reason and a message about the machine.
			for _, ev := range out.Events {
				if ev.Phase != out.Status.GetPhase() || !camelCase.MatchString(ev.Reason) || !strings.HasPrefix(ev.Message, "machine m1 ") {
					t.Errorf("event %+v: want phase %s, a CamelCase reason and a message about machine m1", ev, out.Status.GetPhase())
				}
			}
			// Idempotent: the same input gives the same output.
			again := Step(tt.in, Timeouts{})
			if len(again.Commands) != len(out.Commands) || again.Status.GetPhase() != out.Status.GetPhase() {
				t.Fatal("Step is not deterministic")
			}
		})
	}
}

var camelCase = regexp.MustCompile(`^[A-Z][a-z]+([A-Z][a-z]+)*$`)

// TestStepEvents: every phase change says what happened to the machine,
// with a CamelCase reason (they were the lower-case phase in the subject
// and an empty reason and message but for failures).
func TestStepEvents(t *testing.T) {
	running := func(s *capnv1.MachineStatus) { s.NodeName = "node-1" }
	tests := []struct {
		name   string
		in     Input
		reason string
		msg    string
	}{
		{"created", Input{Desired: machine(false)}, "Bootstrapping", "machine m1 created: waiting for its bootstrap data"},
		{"bootstrap ready", Input{Desired: machine(false), Status: status(capnv1.MachineBootstrapping.Wire(), func(s *capnv1.MachineStatus) { s.BootstrapDataChecksum = "sha256:x" })},
			"Provisioning", "machine m1 bootstrapped: its bootstrap data is ready, provider sim is creating it"},
		{"provisioned", Input{Desired: machine(false), Status: status(capnv1.MachineProvisioning.Wire(), withBootstrap), Infra: infra("Running")},
			"Provisioned", "machine m1 provisioned: its infrastructure runs, waiting for its node to report ready"},
		{"running", Input{Desired: machine(false), Status: status(capnv1.MachineProvisioned.Wire(), withBootstrap, running, func(s *capnv1.MachineStatus) { s.NodeReadyTime = timestamppb.New(t0) }), Infra: infra("Running")},
			"Running", "machine m1 running: node node-1 is ready"},
		{"stopped", Input{Desired: stopped(true), Status: status(capnv1.MachineRunning.Wire(), withBootstrap), Infra: infra("Stopped")},
			"Stopped", "machine m1 stopped for hibernation, its disk kept"},
		{"started", Input{Desired: stopped(false), Status: status(capnv1.MachineStopped.Wire(), withBootstrap, running), Infra: started(t0.Add(time.Minute)), Node: nodeAt(true, t0.Add(time.Minute+time.Second))},
			"Started", "machine m1 started again after hibernation: node node-1 is ready"},
		{"deleting", Input{Desired: machine(true), Status: status(capnv1.MachineRunning.Wire(), withBootstrap), Infra: infra("Running")},
			"Deleting", "machine m1 deleting: waiting for provider sim to delete its infrastructure"},
		{"deleted", Input{Desired: machine(true), Status: status(capnv1.MachineDeleting.Wire(), withBootstrap)}, "Deleted", "machine m1 deleted: no infrastructure left"},
		{"failed", Input{Desired: machine(false), Status: status(capnv1.MachineBootstrapping.Wire()), Now: t0.Add(6 * time.Minute)},
			ReasonBootstrapTimeout, "machine m1 failed: still Bootstrapping after 5m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Cluster, tt.in.Name = "c1", "m1"
			if tt.in.Now.IsZero() {
				tt.in.Now = t0.Add(time.Second)
			}
			out := Step(tt.in, Timeouts{})
			if len(out.Events) != 1 {
				t.Fatalf("events %v, want one", out.Events)
			}
			if ev := out.Events[0]; ev.Reason != tt.reason || ev.Message != tt.msg {
				t.Errorf("event %s: %q, want %s: %q", ev.Reason, ev.Message, tt.reason, tt.msg)
			}
		})
	}
}

// commandsNode is a node record whose agent reported its bootstrap
// commands with status and reason, at at.
func commandsNode(ready bool, status, reason, msg string, at time.Time) *capnv1.NodeHealth {
	n := nodeAt(ready, at)
	n.Conditions = []*capnv1.NodeCondition{{Type: CondBootstrapCommands, Status: status, Reason: reason, Message: msg, Source: "capn-node",
		LastTransitionTime: timestamppb.New(at)}}
	return n
}

// TestBootstrapCommands: the agent's report of the bootstrap commands is
// shown on the machine; a failed or timed-out command fails it (the
// planner replaces it) with the command, exit code and stderr in the
// failure message, at any phase the node reports in; a report of an
// earlier machine of the same name, or of a gateway token, does not.
func TestBootstrapCommands(t *testing.T) {
	const failed = "preCommands[1] `exit 3` exited with code 3 after 12ms; stderr (last 2 lines): no disk\nreally"
	provisioned := func() *capnv1.MachineStatus { return status(capnv1.MachineProvisioned.Wire(), withBootstrap) }
	running := func() *capnv1.MachineStatus {
		return status(capnv1.MachineRunning.Wire(), withBootstrap, func(s *capnv1.MachineStatus) { s.NodeReadyTime = timestamppb.New(t0) })
	}
	created := machine(false)
	created.Metadata.CreationTimestamp = timestamppb.New(t0)
	tests := []struct {
		name       string
		st         *capnv1.MachineStatus
		node       *capnv1.NodeHealth
		wantPhase  capnv1.MachinePhase
		wantReason string // the BootstrapCommands condition's, "" none
	}{
		{"running commands", provisioned(), commandsNode(false, "Unknown", "Running", "running preCommands[0]: sysctl --system", t0.Add(time.Second)),
			capnv1.MachineProvisioned, "Running"},
		{"succeeded", provisioned(), commandsNode(true, "True", "Succeeded", "ran 2 commands", t0.Add(time.Second)), capnv1.MachineRunning, "Succeeded"},
		{"pre-command failed", provisioned(), commandsNode(false, "False", "CommandFailed", failed, t0.Add(time.Second)), capnv1.MachineFailed, "CommandFailed"},
		{"post-command timed out after the node was ready", running(), commandsNode(true, "False", "CommandTimedOut", "postCommands[0] `sleep 60` timed out after 1s", t0.Add(time.Second)),
			capnv1.MachineFailed, "CommandTimedOut"},
		{"an earlier machine's report", provisioned(), commandsNode(false, "False", "CommandFailed", failed, t0.Add(-time.Second)), capnv1.MachineProvisioned, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := Step(Input{Cluster: "c1", Name: "m1", Desired: created, Status: tt.st, Infra: infra("Running"), Node: tt.node, Now: t0.Add(2 * time.Second)}, Timeouts{})
			if got := out.Status.GetPhaseValue(); got != tt.wantPhase {
				t.Fatalf("phase %s, want %s", got, tt.wantPhase)
			}
			c := conditionOf(out.Status, CondBootstrapCommands)
			if (c == nil) != (tt.wantReason == "") || (c != nil && c.GetReason() != tt.wantReason) {
				t.Fatalf("BootstrapCommands condition %v, want reason %q", c, tt.wantReason)
			}
			if tt.wantPhase == capnv1.MachineFailed {
				if out.Status.GetFailureReason() != ReasonBootstrapCommandFailed || out.Status.GetFailureMessage() != c.GetMessage() {
					t.Errorf("failure %s: %q", out.Status.GetFailureReason(), out.Status.GetFailureMessage())
				}
				if len(out.Events) != 1 || out.Events[0].Reason != ReasonBootstrapCommandFailed || !strings.Contains(out.Events[0].Message, c.GetMessage()) {
					t.Errorf("events %+v", out.Events)
				}
			}
		})
	}
	// A gateway token's report never fails a machine.
	n := commandsNode(false, "False", "CommandFailed", failed, t0.Add(time.Second))
	n.Conditions[0].Source = "ingest:ci"
	out := Step(Input{Cluster: "c1", Name: "m1", Desired: created, Status: provisioned(), Infra: infra("Running"), Node: n, Now: t0.Add(2 * time.Second)}, Timeouts{})
	if out.Status.GetPhaseValue() == capnv1.MachineFailed {
		t.Fatal("a report through the gateway failed the machine")
	}
}

func conditionOf(st *capnv1.MachineStatus, typ string) *capnv1.Condition {
	for _, c := range st.GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

// A machine whose bootstrap data waits for a bootstrap secret (the
// bootstrapper said bootstrap.waiting) is not failed by the bootstrap
// timeout: it keeps asking every bootstrapReask, and goes on once the data
// is there. The same machine without the reason times out.
func TestWaitingForBootstrapSecretHasNoTimeout(t *testing.T) {
	waiting := func(st *capnv1.MachineStatus) {
		setCondition(st, CondBootstrapReady, capnv1.ConditionFalse, annotations.ReasonBootstrapSecretNotFound,
			`file /etc/x: bootstrap secret "registry" not found`, t0)
	}
	for _, after := range []time.Duration{6 * time.Minute, 3 * time.Hour} {
		out := Step(Input{Cluster: "c1", Name: "m1", Desired: machine(false), Status: status(capnv1.MachineBootstrapping.Wire(), waiting), Now: t0.Add(after + time.Second)}, Timeouts{})
		if got := out.Status.GetPhaseValue(); got != capnv1.MachineBootstrapping {
			t.Fatalf("after %s waiting for a secret: phase %s (%s), want Bootstrapping", after, got, out.Status.GetFailureReason())
		}
		if len(out.Commands) != 1 || out.Commands[0].Kind != CmdBootstrap || out.RequeueAfter <= 0 || out.RequeueAfter > bootstrapReask {
			t.Fatalf("after %s: commands %v, requeue %s: want a new ask and a requeue within %s", after, out.Commands, out.RequeueAfter, bootstrapReask)
		}
		if c := conditions.Get(out.Status.GetConditions(), CondBootstrapReady); c.GetReason() != annotations.ReasonBootstrapSecretNotFound || !strings.Contains(c.GetMessage(), "registry") {
			t.Fatalf("condition %v: want it kept, naming the secret", c)
		}
	}
	ready := Step(Input{Cluster: "c1", Name: "m1", Desired: machine(false), Now: t0.Add(3 * time.Hour),
		Status: status(capnv1.MachineBootstrapping.Wire(), waiting, func(s *capnv1.MachineStatus) { s.BootstrapDataChecksum = "sha256:x" })}, Timeouts{})
	if ready.Status.GetPhaseValue() != capnv1.MachineProvisioning {
		t.Fatalf("secret written, data ready: phase %s, want Provisioning", ready.Status.GetPhase())
	}
	plain := Step(Input{Cluster: "c1", Name: "m1", Desired: machine(false), Status: status(capnv1.MachineBootstrapping.Wire()), Now: t0.Add(6 * time.Minute)}, Timeouts{})
	if plain.Status.GetFailureReason() != ReasonBootstrapTimeout {
		t.Fatalf("without the reason: failure %q, want %s", plain.Status.GetFailureReason(), ReasonBootstrapTimeout)
	}
}

// A Provisioning machine whose infrastructure runs waits HoldProvisioned
// for its node: nothing is written meanwhile; a node ready within it
// takes the machine to Running in one step (one event), and once the
// hold is over without one it is Provisioned.
func TestStepHoldsProvisionedForTheNode(t *testing.T) {
	in := Input{Cluster: "c1", Name: "m1", Desired: machine(false), Status: status(capnv1.MachineProvisioning.Wire(), withBootstrap),
		Infra: started(t0), Now: t0.Add(time.Second), HoldProvisioned: 400 * time.Millisecond}
	in.Status.ObservedGeneration, in.Status.Provider = 1, "sim" // as Step keeps them
	out := Step(in, Timeouts{})
	if out.Status.GetPhaseValue() != capnv1.MachineProvisioning || len(out.Events) != 0 || out.RequeueAfter != 400*time.Millisecond {
		t.Fatalf("held: phase %s, events %v, requeue %s; want Provisioning, none, 400ms", out.Status.GetPhase(), out.Events, out.RequeueAfter)
	}
	if !proto.Equal(out.Status, in.Status) {
		t.Fatalf("held: status changed to %v; want no write", out.Status)
	}
	if out.Status.GetInfrastructureReadyTime() != nil {
		t.Fatal("held: infrastructure ready time stamped")
	}

	in.Node = nodeAt(true, t0.Add(time.Second))
	out = Step(in, Timeouts{})
	if out.Status.GetPhaseValue() != capnv1.MachineRunning || len(out.Events) != 1 || out.Events[0].Reason != "Running" {
		t.Fatalf("node ready within the hold: phase %s, events %v; want Running and one Running event", out.Status.GetPhase(), out.Events)
	}
	if out.Status.GetInfrastructureReadyTime() == nil || conditionOf(out.Status, CondInfrastructureReady).GetStatus() != "True" {
		t.Fatalf("node ready within the hold: infrastructure ready time %v, condition %v", out.Status.GetInfrastructureReadyTime(), conditionOf(out.Status, CondInfrastructureReady))
	}

	in.Node, in.HoldProvisioned = nil, 0 // the hold is over
	out = Step(in, Timeouts{})
	if out.Status.GetPhaseValue() != capnv1.MachineProvisioned || len(out.Events) != 1 {
		t.Fatalf("after the hold: phase %s, events %v; want Provisioned", out.Status.GetPhase(), out.Events)
	}
}

// The provider's record of a machine still being created is not copied
// into the status in a write of its own: the status takes its provider id
// and addresses with the phase change the infrastructure brings (or with
// the deletion, so that the machine's Node can be found by it).
func TestStepTakesTheProviderIDWithAPhaseChange(t *testing.T) {
	creating := infra("Creating")
	creating.Addresses = []*capnv1.Address{{Type: "InternalIP", Address: "10.0.0.9"}}
	for _, phase := range []capnv1.MachinePhase{capnv1.MachineBootstrapping, capnv1.MachineProvisioning} {
		st := status(phase.Wire())
		if phase == capnv1.MachineProvisioning {
			st = status(phase.Wire(), withBootstrap)
		}
		st.ObservedGeneration, st.Provider = 1, "sim" // as Step keeps them
		in := Input{Cluster: "c1", Name: "m1", Desired: machine(false), Status: st, Infra: creating, Now: t0.Add(time.Second)}
		out := Step(in, Timeouts{})
		if !proto.Equal(out.Status, st) {
			t.Errorf("%s with the infrastructure being created: status changed to %v; want no write", phase.Wire(), out.Status)
		}
	}
	running := infra("Running")
	running.Addresses = creating.Addresses
	out := Step(Input{Cluster: "c1", Name: "m1", Desired: machine(false), Status: status(capnv1.MachineProvisioning.Wire(), withBootstrap), Infra: running, Now: t0.Add(time.Second)}, Timeouts{})
	if out.Status.GetPhaseValue() != capnv1.MachineProvisioned || out.Status.GetProviderId() != "sim://c1/m1" || len(out.Status.GetAddresses()) != 1 {
		t.Errorf("infrastructure running: phase %s, provider id %q, addresses %v; want Provisioned with both", out.Status.GetPhase(), out.Status.GetProviderId(), out.Status.GetAddresses())
	}
	out = Step(Input{Cluster: "c1", Name: "m1", Desired: machine(true), Status: status(capnv1.MachineProvisioning.Wire(), withBootstrap), Infra: creating, Now: t0.Add(time.Second)}, Timeouts{})
	if out.Status.GetPhaseValue() != capnv1.MachineDeleting || out.Status.GetProviderId() != "sim://c1/m1" {
		t.Errorf("deleted while being created: phase %s, provider id %q; want Deleting with it", out.Status.GetPhase(), out.Status.GetProviderId())
	}
}

// A new machine with Input.PendingSince (the service sets it) is not
// written while it waits for its bootstrap data: it sends nothing at first
// (the bootstrapper generates from the desired machine), asks under a new
// id every bootstrapReask without an answer, fails at the bootstrap
// timeout, and the answer takes it from Pending to Provisioning in its
// first write.
func TestPendingMachineIsNotWritten(t *testing.T) {
	in := func(after time.Duration) Input {
		return Input{Cluster: "c1", Name: "m1", Desired: machine(false), PendingSince: t0, Now: t0.Add(after)}
	}
	out := Step(in(time.Second), Timeouts{})
	if out.Status != nil || len(out.Events) != 0 {
		t.Fatalf("waiting: status %v, events %v; want nothing written", out.Status, out.Events)
	}
	if len(out.Commands) != 0 || out.RequeueAfter != bootstrapReask-time.Second {
		t.Fatalf("waiting: commands %v, requeue %s; want none, and a look again at the first ask", out.Commands, out.RequeueAfter)
	}
	out = Step(in(31*time.Second), Timeouts{})
	if out.Status != nil || len(out.Commands) != 1 || out.Commands[0] != (Command{CmdBootstrap, "bootstrap.c1.m1.u1.ask1"}) {
		t.Fatalf("no answer for 31s: status %v, commands %v; want nothing written and ask1", out.Status, out.Commands)
	}
	out = Step(in(65*time.Second), Timeouts{})
	if out.Status != nil || len(out.Commands) != 1 || out.Commands[0].ID != "bootstrap.c1.m1.u1.ask2" {
		t.Fatalf("no answer for 65s: status %v, commands %v; want nothing written and ask2", out.Status, out.Commands)
	}
	out = Step(in(4*time.Minute+50*time.Second), Timeouts{})
	if out.RequeueAfter != 10*time.Second {
		t.Fatalf("10s before the timeout: requeue %s, want 10s", out.RequeueAfter)
	}
	out = Step(in(5*time.Minute), Timeouts{})
	if out.Status.GetPhaseValue() != capnv1.MachineFailed || out.Status.GetFailureReason() != ReasonBootstrapTimeout || len(out.Commands) != 0 {
		t.Fatalf("at the timeout: %s/%s, commands %v; want Failed/%s and no ask", out.Status.GetPhase(), out.Status.GetFailureReason(), out.Commands, ReasonBootstrapTimeout)
	}
	if len(out.Events) != 1 || out.Events[0].Reason != ReasonBootstrapTimeout || out.Events[0].Message != "machine m1 failed: no bootstrap data after 5m0s" {
		t.Fatalf("at the timeout: events %v", out.Events)
	}
	// The answer (onBootstrap) sets the checksum on a fresh Pending status.
	answered := &capnv1.MachineStatus{}
	setPhase(answered, capnv1.MachinePending, t0.Add(2*time.Second))
	answered.BootstrapDataChecksum = "sha256:x"
	out = Step(Input{Cluster: "c1", Name: "m1", Desired: machine(false), Status: answered, PendingSince: t0, Now: t0.Add(2 * time.Second)}, Timeouts{})
	if out.Status.GetPhaseValue() != capnv1.MachineProvisioning || len(out.Commands) != 1 || out.Commands[0].Kind != CmdCreate {
		t.Fatalf("answered: %s, commands %v; want Provisioning and the create", out.Status.GetPhase(), out.Commands)
	}
	if c := conditions.Get(out.Status.GetConditions(), CondBootstrapReady); c.GetStatus() != capnv1.ConditionTrue.Wire() {
		t.Fatalf("answered: BootstrapReady %v, want True", c)
	}
	if len(out.Events) != 1 || out.Events[0].Reason != "Provisioning" {
		t.Fatalf("answered: events %v, want the one Provisioning event", out.Events)
	}
	// Being deleted while it waits: nothing was created, Deleted at once.
	gone := Step(Input{Cluster: "c1", Name: "m1", Desired: machine(true), PendingSince: t0, Now: t0.Add(time.Second)}, Timeouts{})
	if gone.Status.GetPhaseValue() != capnv1.MachineDeleted || len(gone.Commands) != 0 {
		t.Fatalf("deleted while waiting: %s, commands %v; want Deleted, nothing sent", gone.Status.GetPhase(), gone.Commands)
	}
}
