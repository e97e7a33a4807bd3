package machinemanager

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Machine phases, as Cluster API's, with Bootstrapping made explicit.
const (
	PhasePending       = "Pending"
	PhaseBootstrapping = "Bootstrapping"
	PhaseProvisioning  = "Provisioning"
	PhaseProvisioned   = "Provisioned"
	PhaseRunning       = "Running"
	// PhaseStopped: hibernated (spec.stopped) and the provider reports the
	// machine stopped; it keeps its identity and disk.
	PhaseStopped  = "Stopped"
	PhaseDeleting = "Deleting"
	PhaseDeleted  = "Deleted"
	PhaseFailed   = "Failed"
)

// Condition types of a machine.
const (
	CondBootstrapReady      = "BootstrapReady"
	CondInfrastructureReady = "InfrastructureReady"
	CondNodeReady           = "NodeReady"
	CondReady               = "Ready"
	CondDeleting            = "Deleting"
)

// Failure reasons a user reads in status.failureReason.
const (
	ReasonBootstrapFailed      = "BootstrapFailed"
	ReasonBootstrapTimeout     = "BootstrapTimeout"
	ReasonInfrastructureFailed = "InfrastructureFailed"
	ReasonProvisioningTimeout  = "ProvisioningTimeout"
	ReasonNodeStartupTimeout   = "NodeStartupTimeout"
	ReasonInfrastructureGone   = "InfrastructureGone"
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

func (t Timeouts) of(phase string) time.Duration {
	switch phase {
	case PhaseBootstrapping:
		return t.Bootstrap
	case PhaseProvisioning:
		return t.Provisioning
	case PhaseProvisioned:
		return t.NodeStartup
	}
	return 0
}

// setCondition sets (or replaces) a condition, keeping its transition time
// when the status does not change.
func setCondition(st *capnv1.MachineStatus, typ, status, reason, msg string, now time.Time) {
	for _, c := range st.Conditions {
		if c.GetType() == typ {
			if c.GetStatus() != status {
				c.LastTransitionTime = timestamppb.New(now)
			}
			c.Status, c.Reason, c.Message = status, reason, msg
			return
		}
	}
	st.Conditions = append(st.Conditions, &capnv1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: timestamppb.New(now)})
}

func conditionTrue(st *capnv1.MachineStatus, typ string) bool {
	for _, c := range st.GetConditions() {
		if c.GetType() == typ {
			return c.GetStatus() == "True"
		}
	}
	return false
}

// setPhase moves the machine to phase, stamping when.
func setPhase(st *capnv1.MachineStatus, phase string, now time.Time) {
	if st.Phase != phase {
		st.Phase = phase
		st.PhaseSince = timestamppb.New(now)
	}
}

// transition is the timeline event of machine name's move from phase from
// to st's phase. The reason is the new phase, except that a machine woken
// from hibernation is Started and a failed one carries its failure reason.
func transition(name, from string, st *capnv1.MachineStatus) Event {
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
	switch st.GetPhase() {
	case PhaseBootstrapping:
		ev.Message = fmt.Sprintf("machine %s created: waiting for its bootstrap data", name)
	case PhaseProvisioning:
		ev.Message = fmt.Sprintf("machine %s bootstrapped: its bootstrap data is ready, %s is creating it", name, provider)
	case PhaseProvisioned:
		ev.Message = fmt.Sprintf("machine %s provisioned: its infrastructure runs, waiting for its node to report ready", name)
	case PhaseRunning:
		ev.Message = fmt.Sprintf("machine %s running: node %s is ready", name, node)
		if from == PhaseStopped {
			ev.Reason, ev.Message = "Started", fmt.Sprintf("machine %s started again after hibernation: node %s is ready", name, node)
		}
	case PhaseStopped:
		ev.Message = fmt.Sprintf("machine %s stopped for hibernation, its disk kept", name)
	case PhaseDeleting:
		ev.Message = fmt.Sprintf("machine %s deleting: waiting for %s to delete its infrastructure", name, provider)
	case PhaseDeleted:
		ev.Message = fmt.Sprintf("machine %s deleted: no infrastructure left", name)
	case PhaseFailed:
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
	setPhase(st, PhaseFailed, now)
	st.FailureReason, st.FailureMessage = reason, msg
	setCondition(st, CondReady, "False", reason, msg, now)
}
