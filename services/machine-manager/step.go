package machinemanager

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
)

// Command kinds a step asks for.
const (
	CmdBootstrap = "bootstrap"
	CmdCreate    = "create"
	CmdDelete    = "delete"
	// CmdStop and CmdStart power a machine off and on for hibernation
	// (the provider's stop-start capability); their ids carry the spec's
	// generation, since each hibernate or wake is a new request.
	CmdStop  = "stop"
	CmdStart = "start"
)

// Command is one request a step wants sent. ID is deterministic per
// machine incarnation, so sending it again is harmless.
type Command struct {
	Kind string
	ID   string
}

// Input is everything one reconcile of one machine looks at.
type Input struct {
	Cluster, Name string
	// Desired is the machine spec; nil when its key is gone.
	Desired *capnv1.Machine
	// Status is the observed status; nil when none was written yet.
	Status *capnv1.MachineStatus
	// Infra is what the provider reports; nil when its key is absent.
	Infra *capnv1.InfraMachine
	// Node is the health-watcher's record of the machine's node; nil when
	// there is none.
	Node *capnv1.NodeHealth
	Now  time.Time
	// HoldProvisioned, when positive, is how much longer a Provisioning
	// machine whose infrastructure runs waits for its node before it is
	// written Provisioned: a node ready by then takes it to Running in the
	// same write (one write and one event fewer). The reconcile loop
	// counts it from when it first saw the infrastructure running.
	HoldProvisioned time.Duration
	// PendingSince, when set, is when the wait for a new machine's
	// bootstrap data began (the service's: the later of the machine's
	// creation and when this process first saw it). A machine with no
	// status then stays unwritten — Pending, as Cluster API's Machine is
	// until its bootstrap data is ready — while it waits: its first write
	// is the answer's step to Provisioning (or a failure, or the
	// bootstrapper's word that the data waits for a secret), one write and
	// one event fewer than a Bootstrapping write first. Zero: the status
	// is written Bootstrapping at once.
	PendingSince time.Time
}

// Output is the next status (nil: none — the status key is deleted, or,
// for a machine that waits for its data unwritten, stays absent), the
// commands to send before writing it, and when to look again if nothing
// changes.
type Output struct {
	Status       *capnv1.MachineStatus
	Commands     []Command
	RequeueAfter time.Duration
	// Events are facts worth a timeline entry (phase changes).
	Events []Event
}

// Event is one fact of a machine for its cluster's timeline: a phase
// change (the new phase, a CamelCase reason and a message that says what
// happened), or a step within a phase (At set: a deletion's drain started
// or ended, a hook holds it).
type Event struct {
	Phase, Reason, Message string
	// At is when a step within the phase happened (zero for a phase
	// change); it makes the event's id.
	At time.Time
}

// Step makes one idempotent step of a machine's life. It is a pure function
// of its input: the service reads state, calls Step, sends the commands and
// compare-and-sets the status.
//
//	Pending → Bootstrapping → Provisioning → Provisioned → Running
//	(with Input.PendingSince a new machine is Pending unwritten until its
//	bootstrap data is ready; Bootstrapping only while it waits for a
//	bootstrap secret; a node ready within HoldProvisioned skips Provisioned)
//	Running ──(spec.stopped; infrastructure Stopped)──► Stopped ──(not stopped; infrastructure Running)──► Running
//	   any ──(deletion requested)──► Deleting ──(hooks, drain, Node, etcd: deletion.go; infrastructure gone)──► Deleted
//	   any ──(failure or timeout)──► Failed (the planner replaces it)
func Step(in Input, t Timeouts) (out Output) {
	t = t.withDefaults()
	var st *capnv1.MachineStatus
	if in.Status != nil {
		st = proto.Clone(in.Status).(*capnv1.MachineStatus)
	}
	uid := in.Desired.GetMetadata().GetUid()
	if st == nil {
		if in.Desired == nil {
			return Output{} // nothing wanted, nothing known
		}
		st = &capnv1.MachineStatus{}
		setPhase(st, capnv1.MachinePending, in.Now)
	}
	if uid == "" {
		uid = "orphan"
	}
	id := func(kind string) string { return fmt.Sprintf("%s.%s.%s.%s", kind, in.Cluster, in.Name, uid) }
	powerID := func(kind string) string {
		return fmt.Sprintf("%s.%d", id(kind), in.Desired.GetMetadata().GetGeneration())
	}
	out = Output{Status: st}
	before := st.GetPhaseValue()
	defer func() {
		if out.Status != nil && out.Status.GetPhaseValue() != before {
			out.Events = append([]Event{transition(in.Name, before, out.Status)}, out.Events...)
		}
	}()
	// A restored machine waits for what it needs (handover.go).
	if adoption(&out, st, in, id) {
		return out
	}
	if in.Desired != nil {
		st.ObservedGeneration = in.Desired.GetMetadata().GetGeneration()
		st.Provider = in.Desired.GetSpec().GetProvider()
	}
	infraUp := in.Infra != nil && in.Infra.GetStateValue() == capnv1.InfraRunning

	// Deletion wins over everything.
	if in.Desired == nil || in.Desired.GetMetadata().GetDeletionTimestamp() != nil {
		if st.GetPhaseValue() == capnv1.MachineDeleted {
			if in.Desired == nil {
				out.Status = nil // the planner let go of it: forget it
			}
			return out
		}
		if in.Desired.GetMetadata().Orphaning() {
			orphanStep(&out, st, in, id(CmdOrphan))
			return out
		}
		if in.Infra != nil && st.GetProviderId() == "" {
			// Deleted before its infrastructure ran: the status names it
			// (the health-watcher finds the machine's Node by it).
			st.ProviderId, st.Addresses = in.Infra.GetProviderId(), in.Infra.GetAddresses()
		}
		deleteStep(&out, st, in, id(CmdDelete))
		return out
	}

	if in.Infra != nil && (infraUp || in.Infra.GetStateValue() == capnv1.InfraFailed || !beforeInfra(st.GetPhaseValue())) {
		// What the provider reports of a machine still being created is
		// its own record's (infra.<p>.<c>.<m>): the status takes it with
		// the phase change the infrastructure's state brings, not in a
		// write of its own.
		st.ProviderId = in.Infra.GetProviderId()
		st.Addresses = in.Infra.GetAddresses()
	}
	if st.GetPhaseValue() != capnv1.MachineFailed {
		created := in.Desired.GetMetadata().GetCreationTimestamp().AsTime()
		takeNode(st, in.Node, created)
		takeCommands(st, in.Node, created, in.Now)
	}
	switch st.GetPhaseValue() {
	case capnv1.MachinePending:
		if st.GetBootstrapDataChecksum() != "" {
			// The answer to a machine that waited unwritten: its first
			// write is the step it allows.
			bootstrapped(&out, st, in.Now, id(CmdCreate))
			break
		}
		if in.Status == nil && !in.PendingSince.IsZero() {
			pending(&out, st, in, t, id(CmdBootstrap))
			return out
		}
		out.Commands = append(out.Commands, Command{CmdBootstrap, id(CmdBootstrap)})
		setPhase(st, capnv1.MachineBootstrapping, in.Now)
		setCondition(st, CondBootstrapReady, capnv1.ConditionFalse, "Generating", "waiting for the bootstrapper", in.Now)
		setCondition(st, CondReady, capnv1.ConditionFalse, "Bootstrapping", "waiting for bootstrap data", in.Now)
	case capnv1.MachineBootstrapping:
		if waited := in.Now.Sub(st.GetPhaseSince().AsTime()); st.GetBootstrapDataChecksum() == "" && (waited < t.Bootstrap || waitingForSecret(st)) {
			// Ask again every bootstrapReask while no answer came: an
			// answer the consumer gave up on (its deliveries exhausted
			// while NATS lost a node) would otherwise leave the machine
			// waiting for its timeout. Each ask has its own id, so the
			// bootstrapper answers it anew (with the same data).
			if n := int(waited / bootstrapReask); n > 0 {
				out.Commands = append(out.Commands, Command{CmdBootstrap, fmt.Sprintf("%s.ask%d", id(CmdBootstrap), n)})
			}
			out.RequeueAfter = bootstrapReask - waited%bootstrapReask
		}
		if st.GetBootstrapDataChecksum() != "" {
			bootstrapped(&out, st, in.Now, id(CmdCreate))
		}
	case capnv1.MachineProvisioning:
		switch {
		case in.Infra != nil && in.Infra.GetStateValue() == capnv1.InfraFailed:
			fail(st, ReasonInfrastructureFailed, in.Infra.GetMessage(), in.Now)
			setCondition(st, CondInfrastructureReady, capnv1.ConditionFalse, ReasonInfrastructureFailed, in.Infra.GetMessage(), in.Now)
		case infraUp && in.HoldProvisioned > 0 && st.GetNodeReadyTime() == nil:
			// Provisioned, or Running with the node, then: nothing is
			// written meanwhile, not even the provider id.
			st.ProviderId, st.Addresses = in.Status.GetProviderId(), in.Status.GetAddresses()
			out.RequeueAfter = in.HoldProvisioned
		case infraUp:
			setPhase(st, capnv1.MachineProvisioned, in.Now)
			st.InfrastructureReadyTime = timestamppb.New(in.Now)
			setCondition(st, CondInfrastructureReady, capnv1.ConditionTrue, "Ready", "", in.Now)
			setCondition(st, CondReady, capnv1.ConditionFalse, "WaitingForNode", "waiting for the node to report ready", in.Now)
		}
	case capnv1.MachineRunning, capnv1.MachineStopped:
		if in.Infra == nil || in.Infra.GetStateValue() == capnv1.InfraDeleted {
			fail(st, ReasonInfrastructureGone, "the provider no longer has this machine's infrastructure", in.Now)
			setCondition(st, CondInfrastructureReady, capnv1.ConditionFalse, ReasonInfrastructureGone, "", in.Now)
			break
		}
		power(&out, st, in, powerID)
	}
	if st.GetPhaseValue() == capnv1.MachineProvisioned && st.GetNodeReadyTime() != nil {
		setPhase(st, capnv1.MachineRunning, in.Now)
		setCondition(st, CondNodeReady, capnv1.ConditionTrue, "NodeReady", "", in.Now)
		setCondition(st, CondReady, capnv1.ConditionTrue, "Running", "", in.Now)
	}
	if st.GetPhaseValue() == capnv1.MachineRunning {
		reflectNode(st, in.Node, in.Desired.GetMetadata().GetCreationTimestamp().AsTime(), in.Now)
	}
	if limit := t.of(st.GetPhaseValue()); limit > 0 && !waitingForSecret(st) {
		left := st.GetPhaseSince().AsTime().Add(limit).Sub(in.Now)
		if left <= 0 {
			reason := map[capnv1.MachinePhase]string{capnv1.MachineBootstrapping: ReasonBootstrapTimeout, capnv1.MachineProvisioning: ReasonProvisioningTimeout, capnv1.MachineProvisioned: ReasonNodeStartupTimeout}[st.GetPhaseValue()]
			fail(st, reason, fmt.Sprintf("still %s after %s", st.GetPhase(), limit), in.Now)
		} else if out.RequeueAfter == 0 || left < out.RequeueAfter {
			out.RequeueAfter = left
		}
	}
	return out
}

// bootstrapped takes a machine whose bootstrap data is ready to
// Provisioning and asks its provider to create it.
func bootstrapped(out *Output, st *capnv1.MachineStatus, now time.Time, createID string) {
	out.Commands = append(out.Commands, Command{CmdCreate, createID})
	setPhase(st, capnv1.MachineProvisioning, now)
	setCondition(st, CondBootstrapReady, capnv1.ConditionTrue, "Ready", "", now)
	setCondition(st, CondInfrastructureReady, capnv1.ConditionFalse, "Provisioning", "waiting for the provider", now)
	setCondition(st, CondReady, capnv1.ConditionFalse, "Provisioning", "waiting for the infrastructure", now)
}

// pending is the step of a new machine that has no status yet and waits
// for its bootstrap data (Input.PendingSince). It writes nothing and sends
// nothing at first: the bootstrapper generates a new desired machine's
// data by itself and answers bootstrap.ready. With no answer after
// bootstrapReask it asks (capn.cmd.bootstrap.generate, a new id every
// bootstrapReask, as a Bootstrapping machine does): an answer lost, or a
// bootstrapper that does not generate by itself. The answer (onBootstrap)
// takes it to Provisioning in its first write; the bootstrap timeout
// fails it.
func pending(out *Output, st *capnv1.MachineStatus, in Input, t Timeouts, bootstrapID string) {
	waited := max(0, in.Now.Sub(in.PendingSince))
	if waited >= t.Bootstrap {
		fail(st, ReasonBootstrapTimeout, fmt.Sprintf("no bootstrap data after %s", t.Bootstrap), in.Now)
		setCondition(st, CondBootstrapReady, capnv1.ConditionFalse, ReasonBootstrapTimeout, "the bootstrapper did not answer", in.Now)
		return
	}
	if n := int(waited / bootstrapReask); n > 0 {
		out.Commands = append(out.Commands, Command{CmdBootstrap, fmt.Sprintf("%s.ask%d", bootstrapID, n)})
	}
	out.Status = nil // nothing to write: the status is absent, and stays so
	out.RequeueAfter = min(bootstrapReask-waited%bootstrapReask, t.Bootstrap-waited)
}

// beforeInfra: phases before the infrastructure runs.
func beforeInfra(p capnv1.MachinePhase) bool {
	return p == capnv1.MachinePending || p == capnv1.MachineBootstrapping || p == capnv1.MachineProvisioning
}

// power hibernates and wakes a Running or Stopped machine: it asks the
// provider to stop or start it until the infrastructure reports the state
// the spec wants, then sets the phase. The ask is repeated (a new id once
// JetStream's duplicate window has passed) while the infrastructure
// disagrees, so a lost command or a machine started out of band is
// corrected.
func power(out *Output, st *capnv1.MachineStatus, in Input, id func(string) string) {
	want := in.Desired.GetSpec().GetStopped()
	state := in.Infra.GetStateValue()
	switch {
	case want && state == capnv1.InfraStopped:
		if st.GetPhaseValue() != capnv1.MachineStopped {
			setPhase(st, capnv1.MachineStopped, in.Now)
		}
		setCondition(st, CondReady, capnv1.ConditionFalse, "Stopped", "hibernated: the machine is stopped and keeps its disk", in.Now)
		setCondition(st, CondNodeReady, capnv1.ConditionFalse, "Stopped", "the machine is stopped", in.Now)
	case want:
		out.Commands = append(out.Commands, Command{CmdStop, id(CmdStop)})
		setCondition(st, CondReady, capnv1.ConditionFalse, "Stopping", "asked the provider to stop the machine", in.Now)
		out.RequeueAfter = powerRetry
	case state == capnv1.InfraStopped:
		out.Commands = append(out.Commands, Command{CmdStart, id(CmdStart)})
		setCondition(st, CondReady, capnv1.ConditionFalse, "Starting", "asked the provider to start the machine", in.Now)
		out.RequeueAfter = powerRetry
	case st.GetPhaseValue() == capnv1.MachineStopped && state == capnv1.InfraRunning:
		// Woken: Running once the node reports ready again. What it said
		// before the hibernation says nothing about now, so only a ready
		// heartbeat from the start on counts (the provider stamps the
		// infrastructure's Updated when it starts the machine); a control
		// plane is not serving the moment its process is back.
		if !nodeReadySince(in.Node, in.Infra.GetUpdated().AsTime()) {
			setCondition(st, CondReady, capnv1.ConditionFalse, "WaitingForNode", "started: waiting for the node to report ready", in.Now)
			setCondition(st, CondNodeReady, capnv1.ConditionFalse, "WaitingForNode", "started: no ready heartbeat since the start yet", in.Now)
			return
		}
		setPhase(st, capnv1.MachineRunning, in.Now)
		setCondition(st, CondReady, capnv1.ConditionTrue, "Running", "", in.Now)
		setCondition(st, CondNodeReady, capnv1.ConditionTrue, "Ready", "", in.Now)
	}
}

// nodeReadySince is true when the node's last heartbeat, at since or
// later, said ready.
func nodeReadySince(n *capnv1.NodeHealth, since time.Time) bool {
	hb := n.GetLastHeartbeat()
	return n.GetReady() && hb != nil && !hb.AsTime().Before(since)
}

// waitingForSecret is true while a Bootstrapping machine's data waits for
// a bootstrap secret a user has not written yet: it is not a failure of
// the machine, so the bootstrap timeout does not run (remediation would
// only replace it with a machine that waits the same way); it is asked
// for again every bootstrapReask.
func waitingForSecret(st *capnv1.MachineStatus) bool {
	return st.GetPhaseValue() == capnv1.MachineBootstrapping && st.GetBootstrapDataChecksum() == "" &&
		conditions.Get(st.GetConditions(), CondBootstrapReady).GetReason() == annotations.ReasonBootstrapSecretNotFound
}

// bootstrapReask is how long a machine waits for its bootstrap answer
// before asking again.
const bootstrapReask = 30 * time.Second

// powerRetry is when a stop or start not yet seen in the infrastructure is
// looked at again.
const powerRetry = 30 * time.Second
