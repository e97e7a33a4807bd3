package plan

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

// machine is the planner's view of one desired machine and its status.
type machine struct {
	name   string
	m      *capnv1.Machine
	status *capnv1.MachineStatus // nil until the machine-manager wrote one
	// deleting: deletion was requested (by this plan, an earlier one or a user).
	deleting bool
	// outdated: made from another template than its pool's current one.
	outdated bool
}

func (m *machine) phase() capnv1.MachinePhase {
	if m.status.GetPhase() == "" {
		return capnv1.MachinePending
	}
	return m.status.GetPhaseValue()
}

// gone: deletion is complete; only the desired record is left to remove.
func (m *machine) gone() bool { return m.deleting && m.phase() == capnv1.MachineDeleted }

func (m *machine) running() bool { return m.phase() == capnv1.MachineRunning }

func (m *machine) failed() bool { return m.phase() == capnv1.MachineFailed }

// streak is the failure streak the machine was made with
// (AnnotationFailureStreak; 0 when none or unreadable).
func (m *machine) streak() int {
	n, err := strconv.Atoi(m.m.GetMetadata().GetAnnotations()[AnnotationFailureStreak])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// nextStreak is the failure streak a replacement of m continues: m's own
// plus one when m failed quickly (quickFailure), otherwise 0.
func (m *machine) nextStreak(now time.Time) int {
	if !m.quickFailure(now) {
		return 0
	}
	return m.streak() + 1
}

// quickFailure: m failed (a failure reason is recorded) within
// QuickFailure of its creation — failed at its status's phase time while
// Failed, at its deletion once deleting.
func (m *machine) quickFailure(now time.Time) bool {
	created := m.m.GetMetadata().GetCreationTimestamp()
	if m.status.GetFailureReason() == "" || created == nil {
		return false
	}
	failed := now
	switch {
	case m.failed() && m.status.GetPhaseSince() != nil:
		failed = m.status.GetPhaseSince().AsTime()
	case m.m.GetMetadata().GetDeletionTimestamp() != nil:
		failed = m.m.GetMetadata().GetDeletionTimestamp().AsTime()
	}
	return failed.Sub(created.AsTime()) <= QuickFailure
}

// unhealthy: failed, its node reported NodeHealthy=False, or a health check
// annotated it.
func (m *machine) unhealthy() bool {
	if m.failed() {
		return true
	}
	if _, ok := m.m.GetMetadata().GetAnnotations()[AnnotationUnhealthy]; ok {
		return true
	}
	return nodeHealthyFalse(m.status)
}

func nodeHealthyFalse(st *capnv1.MachineStatus) bool {
	for _, c := range st.GetConditions() {
		if c.GetType() == ConditionNodeHealthy && c.GetStatusValue() == capnv1.ConditionFalse {
			return true
		}
	}
	return false
}

// available: Running, healthy and not on its way out.
func (m *machine) available() bool { return !m.deleting && m.running() && !m.unhealthy() }

// marked: a user asked for this machine to go first on scale-down.
func (m *machine) marked() bool {
	_, ok := m.m.GetMetadata().GetAnnotations()[AnnotationDeleteMachine]
	return ok
}

// why says in a few words why a machine is not available, for messages.
func (m *machine) why() string {
	switch {
	case m.deleting:
		return "deleting"
	case m.failed():
		if r := m.status.GetFailureReason(); r != "" {
			return capnv1.MachineFailed.Wire() + ": " + r
		}
		return capnv1.MachineFailed.Wire()
	case nodeHealthyFalse(m.status):
		return "NodeHealthy=False"
	case m.unhealthy():
		return "marked unhealthy"
	}
	return cmp.Or(m.status.GetPhase(), capnv1.MachinePending.Wire())
}

// pool is the control plane or one worker pool with the machines it has.
type pool struct {
	name         string
	controlPlane bool
	replicas     int
	version      string
	provider     string
	template     *capnv1.MachineTemplate
	bootstrap    *capnv1.BootstrapSpec // effective: cluster's, then the pool's
	os           string                // linux or windows (never empty)
	labels       map[string]string
	taints       []*capnv1.Taint
	hash         string
	strategy     string // RollingUpdate or OnDelete; the control plane has its own rules
	maxSurge     int
	maxUnav      int
	order        string // deletion order
	// drainTimeout and deletionTimeout are the pool's nodeDrainTimeout and
	// nodeDeletionTimeout, copied to its machines in place.
	drainTimeout, deletionTimeout *durationpb.Duration
	// autoscaling is the pool's spec.autoscaling (nil: not autoscaled).
	autoscaling *capnv1.Autoscaling
	machines    []*machine // not gone, sorted by name
	// next is the lowest ordinal freeName may find free: every one below
	// it is taken (names are only added during a plan).
	next int
	// hold says why this pool may not create machines now ("" if it may).
	hold string
	// confined: rollouts wait for the maintenance window (setConfinement):
	// no new replacement of an outdated machine starts; one in progress
	// completes. Scaling goes on.
	confined bool
	// streak: machines made now carry this failure streak
	// (AnnotationFailureStreak): the longest a quickly failed machine of
	// the pool passes on (nextStreak).
	streak int
	// blocked is the reason (ReasonProviderNotRunning, or
	// ReasonProviderLacksOS) this pool may not change at all now, and
	// blockedMsg says it in words; "" if it may.
	blocked, blockedMsg string
	// cannotStop: the cluster hibernates but the pool's provider does not
	// announce stop-start, so its machines are not marked stopped.
	cannotStop bool
	// obs are the counts observed before this plan's actions, for status.
	obs poolCounts
}

// active are the machines not being deleted.
func (pl *pool) active() []*machine {
	var out []*machine
	for _, m := range pl.machines {
		if !m.deleting {
			out = append(out, m)
		}
	}
	return out
}

func (pl *pool) anyDeleting() bool {
	return slices.ContainsFunc(pl.machines, func(m *machine) bool { return m.deleting })
}

func (pl *pool) anyOutdated() bool {
	return slices.ContainsFunc(pl.machines, func(m *machine) bool { return m.outdated })
}

// poolCounts are a pool's observed numbers. replicas, ready, updated,
// available, booting and stopped count machines not being deleted.
type poolCounts struct {
	replicas, ready, updated, available, deleting, failed int
	// booting: on their way to Running (Pending to Provisioned).
	booting int
	// stopped: hibernated, or not yet started again while waking.
	stopped int
	// outdated counts machines of an old template, deleting ones included.
	outdated int
	// notAvailable names up to a few machines that are not available, and why.
	notAvailable []string
	minVersion   string
}

func (pl *pool) count() poolCounts {
	var c poolCounts
	var minV *manifest.Version
	for _, m := range pl.machines {
		if m.outdated {
			c.outdated++
		}
		if m.deleting {
			c.deleting++
			continue
		}
		c.replicas++
		if m.running() {
			c.ready++
		}
		if !m.outdated {
			c.updated++
		}
		switch m.phase() {
		case capnv1.MachineFailed:
			c.failed++
		case capnv1.MachineStopped:
			c.stopped++
		case capnv1.MachinePending, capnv1.MachineBootstrapping, capnv1.MachineProvisioning, capnv1.MachineProvisioned:
			c.booting++
		}
		if m.available() {
			c.available++
		} else if len(c.notAvailable) < 3 {
			c.notAvailable = append(c.notAvailable, m.name+" ("+m.why()+")")
		}
		if v, err := manifest.ParseVersion(m.m.GetSpec().GetVersion()); err == nil && (minV == nil || v.Compare(*minV) < 0) {
			minV = &v
		}
	}
	c.minVersion = pl.version
	if minV != nil {
		c.minVersion = minV.String()
	}
	return c
}
