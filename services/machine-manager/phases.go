package machinemanager

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
)

// Condition types of a machine.
const (
	CondBootstrapReady      = "BootstrapReady"
	CondInfrastructureReady = "InfrastructureReady"
	CondNodeReady           = "NodeReady"
	CondReady               = "Ready"
	CondDeleting            = "Deleting"
	// CondBootstrapCommands mirrors what the machine's agent reports of
	// its bootstrap commands (annotations.CondBootstrapCommands).
	CondBootstrapCommands = annotations.CondBootstrapCommands
)

// Failure reasons a user reads in status.failureReason.
const (
	ReasonBootstrapFailed = "BootstrapFailed"
	// ReasonBootstrapCommandFailed: a file, preCommand or postCommand
	// failed or timed out on the machine (a failed bootstrap, on the
	// node's side).
	ReasonBootstrapCommandFailed = "BootstrapCommandFailed"
	ReasonBootstrapTimeout       = "BootstrapTimeout"
	ReasonInfrastructureFailed   = "InfrastructureFailed"
	ReasonProvisioningTimeout    = "ProvisioningTimeout"
	ReasonNodeStartupTimeout     = "NodeStartupTimeout"
	ReasonInfrastructureGone     = "InfrastructureGone"
)

// Timeouts bounds how long a machine may stay in a phase before it is
// Failed (and the planner replaces it). Zero fields take the defaults.
type Timeouts struct {
	Bootstrap    time.Duration // Bootstrapping: default 5m
	Provisioning time.Duration // Provisioning: default 15m
	NodeStartup  time.Duration // Provisioned → Running: default 20m
}

func (t Timeouts) withDefaults() Timeouts {
	if t.Bootstrap == 0 {
		t.Bootstrap = 5 * time.Minute
	}
	if t.Provisioning == 0 {
		t.Provisioning = 15 * time.Minute
	}
	if t.NodeStartup == 0 {
		t.NodeStartup = 20 * time.Minute
	}
	return t
}

func (t Timeouts) of(phase capnv1.MachinePhase) time.Duration {
	switch phase {
	case capnv1.MachineBootstrapping:
		return t.Bootstrap
	case capnv1.MachineProvisioning:
		return t.Provisioning
	case capnv1.MachineProvisioned:
		return t.NodeStartup
	}
	return 0
}

// setCondition sets (or replaces) a condition by the one rule
// (conditions.Set).
func setCondition(st *capnv1.MachineStatus, typ string, status capnv1.ConditionStatus, reason, msg string, now time.Time) {
	conditions.Set(&st.Conditions, conditions.New(typ, status, reason, msg), now)
}

// setPhase moves the machine to phase, stamping when.
func setPhase(st *capnv1.MachineStatus, phase capnv1.MachinePhase, now time.Time) {
	if st.GetPhaseValue() != phase {
		st.SetPhaseValue(phase)
		st.PhaseSince = timestamppb.New(now)
	}
}

// transition is the timeline event of machine name's move from phase from
// to st's phase. The reason is the new phase, except that a machine woken
// from hibernation is Started and a failed one carries its failure reason.
func transition(name string, from capnv1.MachinePhase, st *capnv1.MachineStatus) Event {
	ev := Event{Phase: st.GetPhase(), Reason: st.GetPhase()}
	provider := st.GetProvider()
	if provider == "" {
		provider = "the provider"
	} else {
		provider = "provider " + provider
	}
	node := st.GetNodeName()
	if node == "" {
		node = name
	}
	switch st.GetPhaseValue() {
	case capnv1.MachineBootstrapping:
		ev.Message = fmt.Sprintf("machine %s created: waiting for its bootstrap data", name)
	case capnv1.MachineProvisioning:
		ev.Message = fmt.Sprintf("machine %s bootstrapped: its bootstrap data is ready, %s is creating it", name, provider)
	case capnv1.MachineProvisioned:
		ev.Message = fmt.Sprintf("machine %s provisioned: its infrastructure runs, waiting for its node to report ready", name)
	case capnv1.MachineRunning:
		ev.Message = fmt.Sprintf("machine %s running: node %s is ready", name, node)
		if from == capnv1.MachineStopped {
			ev.Reason, ev.Message = "Started", fmt.Sprintf("machine %s started again after hibernation: node %s is ready", name, node)
		}
	case capnv1.MachineStopped:
		ev.Message = fmt.Sprintf("machine %s stopped for hibernation, its disk kept", name)
	case capnv1.MachineDeleting:
		ev.Message = fmt.Sprintf("machine %s deleting: waiting for %s to delete its infrastructure", name, provider)
		if c := conditions.Get(st.GetConditions(), CondDeleting); c != nil && c.GetReason() != ReasonWaitingForInfrastructureDeletion && c.GetMessage() != "" {
			ev.Message = fmt.Sprintf("machine %s deleting: %s", name, c.GetMessage())
		}
	case capnv1.MachineDeleted:
		ev.Message = fmt.Sprintf("machine %s deleted: no infrastructure left", name)
	case capnv1.MachineFailed:
		if r := st.GetFailureReason(); r != "" {
			ev.Reason = r
		}
		ev.Message = fmt.Sprintf("machine %s failed", name)
		if m := st.GetFailureMessage(); m != "" {
			ev.Message += ": " + m
		}
	default:
		ev.Message = fmt.Sprintf("machine %s is %s", name, st.GetPhase())
	}
	return ev
}

func fail(st *capnv1.MachineStatus, reason, msg string, now time.Time) {
	setPhase(st, capnv1.MachineFailed, now)
	st.FailureReason, st.FailureMessage = reason, msg
	setCondition(st, CondReady, capnv1.ConditionFalse, reason, msg, now)
}
