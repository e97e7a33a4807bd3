// Package plan is the cluster-planner's pure planning function: from a
// cluster's desired spec, its desired machines and what is observed of them,
// it computes the next idempotent step toward convergence — the machines to
// create, delete or update, the teardown steps, and the cluster status to
// write. It does no I/O and reads no clock: the caller passes Now and applies
// the Result with CAS writes. See README.md for the rules.
package plan

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/manifest"
)

// Annotations and labels the planner reads or writes on machines.
const (
	// AnnotationDeleteMachine marks a machine to be picked first when its pool
	// scales down (annotations.DeleteMachine).
	AnnotationDeleteMachine = annotations.DeleteMachine
	// AnnotationFailureStreak is set on a machine made while its pool had
	// machines fail soon after they were made (within QuickFailure): how
	// many such failures in a row. Its own failure is replaced only after
	// FailureBackoff of it, so a machine that cannot be made (a version
	// with no binaries, a quota) is retried at a slowing pace instead of
	// many times a second.
	AnnotationFailureStreak = "capn.dev/failure-streak"
	// AnnotationUnhealthy marks a machine unhealthy (set by health checks);
	// an unhealthy machine is not available.
	AnnotationUnhealthy = "capn.dev/unhealthy"
	// LabelCluster and LabelPool are set on every machine the planner creates.
	LabelCluster = "capn.dev/cluster"
	LabelPool    = "capn.dev/pool"
)

// Machine roles.
const (
	RoleControlPlane = "control-plane"
	RoleWorker       = "worker"
)

// Condition types: the ones the planner writes on the cluster, and
// NodeHealthy, which it reads on machines.
const (
	ConditionControlPlaneInitialized = "ControlPlaneInitialized"
	ConditionControlPlaneReady       = "ControlPlaneReady"
	ConditionWorkersReady            = "WorkersReady"
	ConditionReady                   = "Ready"
	ConditionPaused                  = "Paused"
	ConditionDeleting                = "Deleting"
	ConditionHibernated              = "Hibernated"
	ConditionProvidersReady          = "ProvidersReady"
	ConditionNodeHealthy             = "NodeHealthy"
)

// Reasons of the planner's conditions, by condition (ProvidersReady's are
// in providers.go). ReasonReady is also a ready pool's, on
// ControlPlaneReady and WorkersReady.
const (
	// ControlPlaneInitialized.
	ReasonInitialized            = "Initialized"
	ReasonWaitingForFirstMachine = "WaitingForFirstMachine"
	// Ready.
	ReasonReady                = "Ready"
	ReasonInvalidSpec          = "InvalidSpec"
	ReasonDeleting             = "Deleting"
	ReasonControlPlaneNotReady = "ControlPlaneNotReady"
	ReasonWorkersNotReady      = "WorkersNotReady"
	// ControlPlaneReady and WorkersReady: a pool's.
	ReasonNotInitialized         = "NotInitialized"
	ReasonWaitingForControlPlane = "WaitingForControlPlane"
	ReasonRollingOut             = "RollingOut"
	ReasonScalingUp              = "ScalingUp"
	ReasonScalingDown            = "ScalingDown"
	ReasonMachinesNotAvailable   = "MachinesNotAvailable"
	ReasonMachinesDeleting       = "MachinesDeleting"
	ReasonNoWorkerPools          = "NoWorkerPools"
	// Paused.
	ReasonPaused    = "Paused"
	ReasonNotPaused = "NotPaused"
	// Hibernated.
	ReasonHibernated  = "Hibernated"
	ReasonHibernating = "Hibernating"
	// Deleting: what the deletion waits for.
	ReasonDeletingWorkers        = "DeletingWorkers"
	ReasonDeletingControlPlane   = "DeletingControlPlane"
	ReasonRemovingMachineRecords = "RemovingMachineRecords"
	ReasonDeletingInfrastructure = "DeletingInfrastructure"
	ReasonDeletingPKI            = "DeletingPKI"
	ReasonDeletingCluster        = "DeletingCluster"
	ReasonDeletionPaused         = "DeletionPaused"
	// ReasonOrphaningMachines: a deletion with the Orphan policy is
	// letting go of the machines (capn move).
	ReasonOrphaningMachines = "OrphaningMachines"
)

// Severities of a False condition.
const (
	SeverityError   = "Error"
	SeverityWarning = "Warning"
	SeverityInfo    = "Info"
)

// QuickFailure: a machine that failed within this of its creation failed
// to come up at all; its replacement continues the pool's failure streak.
const QuickFailure = 10 * time.Minute

// FailureBackoff is how long a failed machine of failure streak n waits
// before it is deleted and replaced: none for the first failure, then
// 5s, 10s, 20s … up to 5 minutes (the kubelet's CrashLoopBackOff pace).
func FailureBackoff(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	d := 5 * time.Second
	for i := 1; i < n && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

// ProgressResync is the RequeueAfter of a plan that is waiting on other
// services (machines booting, infrastructure going away). Their events
// should wake the planner first; this bounds the wait if one is lost.
const ProgressResync = 30 * time.Second

// MoreAfter is the RequeueAfter of a plan that Input.MaxActions cut short:
// at once, but behind every cluster already waiting for the planner, so
// that one huge cluster takes turns with the others.
const MoreAfter = time.Millisecond

// Input is everything the planner knows about one cluster.
type Input struct {
	// Spec is Cluster defaulted and validated once, by the caller
	// (Validator.Check of a copy: the check the gateway makes at apply,
	// with the planner's replica bounds), and trusted here: Plan plans
	// Spec.Cluster() and neither defaults nor validates it again. A spec
	// that fails (Spec.Err) is not planned; its status says why. A stored
	// record may never have passed the gateway (written by hand, by an
	// older version, under higher bounds), so the caller checks every one.
	Spec manifest.Checked
	// Validator is used only when Spec holds no cluster: Plan then checks
	// a copy of Cluster itself. The zero value is manifest's defaults.
	Validator manifest.Validator
	// MaxActions bounds the actions of one plan (0: no bound). A plan that
	// has more to do stops there and asks to be planned again after
	// MoreAfter: what it would have done next is planned then, from the
	// state its actions made.
	MaxActions int
	// Unreadable are the names of the cluster's machine records that do
	// not decode: their names are taken (no machine is created over one)
	// and nothing is planned for them.
	Unreadable []string
	// Cluster is the desired cluster. Its metadata.deletion_timestamp is set
	// when deletion was requested; metadata.generation becomes the status's
	// observed_generation. It is not modified.
	Cluster *capnv1.Cluster
	// Machines are the cluster's desired machines by name, as the planner
	// wrote them: spec, annotations, and a deletion_timestamp once the
	// planner (or a user) asked for the machine to go. Not modified.
	Machines map[string]*capnv1.Machine
	// Observed are the machines' statuses by name (machine-manager's). A
	// missing status is a machine nothing has happened to yet.
	Observed map[string]*capnv1.MachineStatus
	// Infra is what the control-plane provider has for the cluster.
	Infra Infra
	// PKIExists says whether the bootstrapper still holds the cluster's PKI.
	PKIExists bool
	// Providers are the announcements (observed provider.<name>) of the
	// providers the cluster names, by name; a provider without one is
	// absent. A pool whose provider is not running (no announcement, or one
	// older than ProviderStale at Now) creates and deletes nothing, and a
	// cluster nothing was made for yet is not started at all (phase
	// Pending); the ProvidersReady condition says why. nil: providers are
	// not checked and no ProvidersReady condition is written (tests of the
	// other rules); the service always passes a map.
	Providers map[string]*capnv1.ProviderAnnouncement
	// Autoscaler is the cluster autoscaler's last action on each pool, by
	// pool (observed autoscaler.<c>.<pool>, the autoscaler-provider's): the
	// status shows it beside the pool's autoscaling bounds. It changes
	// nothing the planner does.
	Autoscaler map[string]*capnv1.AutoscalerAction
	// Maintenance is the maintenance service's record of the cluster
	// (observed maintenance.<c>): the status shows its window and
	// hibernation parts. It changes nothing the planner does.
	Maintenance *capnv1.MaintenanceRecord
	// Addons are the add-on sets that select the cluster with the
	// addon-manager's records of them: the AddonsApplied condition, and
	// Ready held False while a blocking set is not applied. None: no
	// AddonsApplied condition.
	Addons []Addon
	// Status is the status last written (may be nil): it keeps conditions'
	// transition times and control_plane_initialized across plans.
	Status *capnv1.ClusterStatus
	// ControlPlane is the cluster's control-plane record (observed
	// controlplane.<c>; nil: none). For a control plane of type hosted or
	// external it is all the planner knows of it: initialized, the version
	// ceiling of the workers, the endpoint, the Ready condition, and
	// whether the implementation answered the desired revision. For type
	// machines it is the planner's own last record, compared with the one
	// it computes (Result.ControlPlaneRecord).
	ControlPlane *capnv1.ControlPlaneRecord
	// ClusterRevision is the desired cluster record's KV revision: the
	// generation of control-plane commands and the revision a record's
	// observed_generation answers (0: metadata.generation, in tests).
	ClusterRevision uint64
	// Now stamps new machines' creation_timestamp and condition transitions.
	Now time.Time
}

// Infra is the observed cluster infrastructure.
type Infra struct {
	Exists, Ready bool
	// Endpoint is the control-plane endpoint, copied into the status.
	Endpoint *capnv1.Endpoint
	// Provider holds it when that is not the control plane's provider (a
	// cluster whose spec was lost: a corrupt record replaced on delete);
	// "" for the control plane's.
	Provider string
}

// Result is one plan: actions to apply in order, the status to write, and
// when to plan again if nothing else wakes the planner.
type Result struct {
	Actions      []Action
	Status       *capnv1.ClusterStatus
	RequeueAfter time.Duration
	// PhaseMessage says what Status.Phase means now, in words with
	// numbers: the message of the timeline event the caller records when
	// the phase changes (its reason is the phase).
	PhaseMessage string
	// ControlPlaneRecord is the machines implementation's record to write
	// (Applier.WriteControlPlaneRecord), computed from the control-plane
	// machines; nil when the stored one says the same (SameControlPlaneRecord)
	// — a worker's change writes none — or the control plane is another
	// implementation's. It is not an action: it is not bounded by
	// MaxActions and changes nothing the plan does.
	ControlPlaneRecord *capnv1.ControlPlaneRecord
}

// Fields counts the plan's actions for one log line (nomad's
// ReconcileResults.Fields): zerolog's Fields accepts the map as it is.
func (r Result) Fields() map[string]any {
	f := map[string]any{
		"create": 0, "delete": 0, "update": 0, "remove": 0,
		"infra_ensure": 0, "infra_delete": 0, "pki_delete": 0, "cluster_delete": 0,
		"cp_ensure": 0, "cp_delete": 0,
	}
	for _, a := range r.Actions {
		f[a.kind()] = f[a.kind()].(int) + 1
	}
	if r.Status != nil {
		f["phase"] = r.Status.Phase
	}
	if r.RequeueAfter > 0 {
		f["requeue_after"] = r.RequeueAfter.String()
	}
	return f
}

// Action is one step for the planner's caller to apply. The concrete types
// are CreateMachine, DeleteMachine, UpdateMachine, RemoveMachine,
// EnsureClusterInfra, DeleteClusterInfra, DeletePKI, DeleteCluster,
// EnsureControlPlane and DeleteControlPlane (implementation.go); an
// Applier applies each (Apply).
type Action interface {
	kind() string
	applyTo(ctx context.Context, ap Applier) error
}

// CreateMachine writes a new desired machine with a CAS create: the name is
// deterministic per slot, so a second planner racing for the same slot
// fails the create instead of making a second machine.
type CreateMachine struct {
	Machine *capnv1.Machine
	Reason  string
}

// DeleteMachine asks for a machine to go: the caller sets its
// metadata.deletion_timestamp (the machine-manager then tears it down).
// Orphan sets its deletion_policy to Orphan too: the machine-manager lets
// go of it without touching it (its cluster is deleted with the Orphan
// policy: capn move).
type DeleteMachine struct {
	Name   string
	Reason string
	Orphan bool
}

// UpdateMachine rewrites a machine's in-place fields (labels, taints,
// stopped) without replacing it. Machine is the whole new desired machine;
// the applier takes its spec, labels and annotations
// (UpdatedMachineRecord).
type UpdateMachine struct {
	Machine *capnv1.Machine
	Reason  string
}

// RemoveMachine deletes the desired record of a machine whose deletion is
// complete (observed phase Deleted); its name becomes free again.
type RemoveMachine struct {
	Name string
}

// EnsureClusterInfra asks the control plane's provider for the cluster's
// network and endpoint (idempotent); it is planned while none is observed.
type EnsureClusterInfra struct {
	Provider string
}

// DeleteClusterInfra asks the control plane's provider to remove the
// cluster's infrastructure; planned once every machine record is gone.
// Orphan asks it to let go of it instead, leaving it in place.
type DeleteClusterInfra struct {
	Provider string
	Orphan   bool
}

// DeletePKI asks the bootstrapper to drop the cluster's PKI and
// kubeconfig; planned once the infrastructure is gone.
type DeletePKI struct{}

// DeleteCluster removes the cluster's desired record, the last step of a
// deletion.
type DeleteCluster struct{}

func (CreateMachine) kind() string      { return "create" }
func (DeleteMachine) kind() string      { return "delete" }
func (UpdateMachine) kind() string      { return "update" }
func (RemoveMachine) kind() string      { return "remove" }
func (EnsureClusterInfra) kind() string { return "infra_ensure" }
func (DeleteClusterInfra) kind() string { return "infra_delete" }
func (DeletePKI) kind() string          { return "pki_delete" }
func (DeleteCluster) kind() string      { return "cluster_delete" }

// Plan computes the next step for one cluster. It is a pure function of in.
func Plan(in Input) Result {
	spec := in.Spec
	if spec.Cluster() == nil {
		spec = in.Validator.Check(proto.CloneOf(in.Cluster))
	}
	c := spec.Cluster()
	p := newPlanner(in, c, spec.Err())
	switch {
	case c.GetSpec().GetPaused() && !c.GetMetadata().Orphaning():
		// Nothing at all, not even a deletion's next step (as Cluster API).
		// An orphaning deletion goes on: it touches nothing in the world,
		// and capn move pauses a cluster before it lets go of it.
	case c.GetMetadata().GetDeletionTimestamp() != nil:
		p.removeGone()
		p.planDelete()
	case p.invalid != nil:
		// A spec that fails validation never got past the gateway; if one is
		// here anyway, do nothing with it and say why in the status.
	case p.refused:
		// A provider the cluster names cannot serve it and nothing was made
		// yet: make nothing (the status says why). The provider's
		// announcement wakes the planner.
	default:
		p.removeGone()
		switch {
		case p.byImplementation():
			p.ensureControlPlane()
		case p.cp.blocked == "":
			p.ensureInfra()
		}
		p.deleteOrphans()
		if !c.Spec.Hibernated {
			if !p.byImplementation() {
				p.planControlPlane()
			}
			for _, pl := range p.pools {
				if pl.blocked == "" {
					p.planPool(pl)
				}
			}
		}
		p.propagate()
	}
	st := p.status()
	r := Result{Actions: p.actions, Status: st, PhaseMessage: p.phaseMessage(st)}
	if p.writesRecord() {
		ready := conditions.Get(st.GetConditions(), ConditionControlPlaneReady)
		r.ControlPlaneRecord = p.machinesRecord(st.GetControlPlaneEndpoint(), ready.GetStatusValue() == capnv1.ConditionTrue, ready.GetReason(), ready.GetMessage())
	}
	switch st.GetPhaseValue() {
	case capnv1.ClusterReady, capnv1.ClusterPaused, capnv1.ClusterHibernated:
	default:
		if p.invalid == nil {
			r.RequeueAfter = ProgressResync
		}
	}
	if p.windowOpens.After(p.in.Now) && p.waiting() != nil {
		// A safety net: the maintenance service's record changes when the
		// window opens, which wakes the planner first.
		if d := p.windowOpens.Sub(p.in.Now); p.wait == 0 || d < p.wait {
			p.wait = d
		}
	}
	if p.wait > 0 && (r.RequeueAfter == 0 || p.wait < r.RequeueAfter) {
		r.RequeueAfter = p.wait
	}
	if p.truncated {
		r.RequeueAfter = MoreAfter
	}
	return r
}
