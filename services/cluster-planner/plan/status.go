package plan

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
)

// status computes the cluster status from what was observed before this
// plan's actions. The phase says what capn is doing; the conditions say
// whether the cluster is healthy, each with a reason and a message with
// numbers.
func (p *planner) status() *capnv1.ClusterStatus {
	st := &capnv1.ClusterStatus{
		ObservedGeneration:      p.c.GetMetadata().GetGeneration(),
		ControlPlaneInitialized: p.initialized,
		ControlPlaneEndpoint:    p.in.Infra.Endpoint,
		ControlPlane:            poolStatus(p.cp),
		Updated:                 timestamp(p.in.Now),
		Maintenance:             proto.CloneOf(p.in.Maintenance.GetMaintenance()),
		Hibernation:             proto.CloneOf(p.in.Maintenance.GetHibernation()),
	}
	if p.byImplementation() {
		// All the planner knows of it is the implementation's record.
		st.ControlPlaneEndpoint = proto.CloneOf(p.in.ControlPlane.GetEndpoint())
		st.ControlPlane = p.implementationPoolStatus()
	}
	if st.ControlPlaneEndpoint == nil {
		st.ControlPlaneEndpoint = p.in.Status.GetControlPlaneEndpoint()
	}
	addonsOK, addonsBlockOK, addonsReason, addonsMsg, addonsBlockMsg := addonsStatus(p.in.Addons)
	for _, pl := range p.pools {
		ps := poolStatus(pl)
		if !addonsBlockOK {
			// Workers are not counted ready while a blocking add-on set
			// (the CNI) is not applied: their nodes cannot run pods yet.
			// WorkersReady says how many are up.
			ps.Ready, ps.Available = 0, 0
		}
		if pl.autoscaling != nil {
			ps.Autoscaling = proto.CloneOf(pl.autoscaling)
			ps.LastAutoscalerAction = proto.CloneOf(p.in.Autoscaler[pl.name])
		}
		st.WorkerPools = append(st.WorkerPools, ps)
	}

	var conds []*capnv1.Condition
	add := func(typ string, ok bool, reason, msg string) {
		conds = append(conds, p.condition(typ, ok, reason, msg))
	}
	switch {
	case p.byImplementation() && p.initialized:
		add(ConditionControlPlaneInitialized, true, ReasonInitialized, "the "+p.implementation()+" control plane has served the API")
	case p.byImplementation():
		_, reason, msg := p.implementationReady()
		add(ConditionControlPlaneInitialized, false, ReasonWaitingForImplementation,
			"waiting for the "+p.implementation()+" control plane to initialize ("+reason+": "+msg+")")
	case p.initialized:
		add(ConditionControlPlaneInitialized, true, ReasonInitialized, "the first control-plane machine has run")
	default:
		add(ConditionControlPlaneInitialized, false, ReasonWaitingForFirstMachine, p.firstMachineMessage())
	}
	cpOK, cpReason, cpMsg := p.poolReady(p.cp)
	if p.byImplementation() {
		cpOK, cpReason, cpMsg = p.implementationReady()
	}
	add(ConditionControlPlaneReady, cpOK, cpReason, cpMsg)
	wOK, wReason, wMsg := p.workersReady()
	// wCounted: the workers as counted, which waits for the blocking
	// add-on sets too.
	wCounted, wcReason, wcMsg := wOK, wReason, wMsg
	if wOK && !addonsBlockOK && len(p.pools) > 0 {
		wCounted, wcReason, wcMsg = false, ReasonAddonsNotApplied, p.uncountedWorkers(addonsBlockMsg)
	}
	add(ConditionWorkersReady, wCounted, wcReason, wcMsg)

	paused := p.c.GetSpec().GetPaused()
	deleting := p.c.GetMetadata().GetDeletionTimestamp() != nil
	hibernated := p.c.GetSpec().GetHibernated()
	provOK, provReason, provMsg := p.providersCondition()
	switch {
	case p.invalid != nil:
		add(ConditionReady, false, ReasonInvalidSpec, "the spec does not validate: "+strings.ReplaceAll(p.invalid.Error(), "\n", "; "))
	case deleting:
		add(ConditionReady, false, ReasonDeleting, "the cluster is being deleted")
	case p.refused && !paused:
		add(ConditionReady, false, provReason, provMsg)
	case !cpOK && cpReason == ReasonWaitingForMaintenanceWindow && (wOK || p.onlyHeld()):
		add(ConditionReady, false, ReasonWaitingForMaintenanceWindow, readyMessage(cpMsg, wOK, wMsg))
	case !cpOK:
		add(ConditionReady, false, ReasonControlPlaneNotReady, readyMessage(cpMsg, wOK, wMsg))
	case !wOK && wReason == ReasonWaitingForMaintenanceWindow && p.onlyHeld():
		add(ConditionReady, false, ReasonWaitingForMaintenanceWindow, readyMessage(cpMsg, wOK, wMsg))
	case !wOK:
		add(ConditionReady, false, ReasonWorkersNotReady, readyMessage(cpMsg, wOK, wMsg))
	case !addonsBlockOK:
		add(ConditionReady, false, ReasonAddonsNotApplied, addonsBlockMsg)
	default:
		add(ConditionReady, true, ReasonReady, "the control plane and every worker pool are ready")
	}
	if p.in.Providers != nil {
		add(ConditionProvidersReady, provOK, provReason, provMsg)
	}
	if len(p.in.Addons) > 0 {
		add(ConditionAddonsApplied, addonsOK, addonsReason, addonsMsg)
	}
	if paused {
		add(ConditionPaused, true, ReasonPaused, "spec.paused is true: capn takes no action on this cluster until it is unpaused")
	} else {
		add(ConditionPaused, false, ReasonNotPaused, "")
	}
	if deleting {
		reason, msg := p.deletionStep()
		if paused && !p.c.GetMetadata().Orphaning() {
			reason, msg = ReasonDeletionPaused, "the cluster is paused: its deletion waits until it is unpaused (next: "+msg+")"
		}
		add(ConditionDeleting, true, reason, msg)
	}
	if hibernated {
		stopped, total := p.stoppedCount()
		var cannot []string
		for _, pl := range append([]*pool{p.cp}, p.pools...) {
			if pl.cannotStop {
				cannot = append(cannot, pl.name)
			}
		}
		switch {
		case len(cannot) > 0:
			add(ConditionHibernated, false, ReasonProviderLacksCapability, fmt.Sprintf("%d of %d machines that can stop are stopped; the machines of %s keep running: their provider cannot stop (see ProvidersReady)",
				stopped, total, strings.Join(cannot, ", ")))
		case stopped == total:
			add(ConditionHibernated, true, ReasonHibernated, fmt.Sprintf("all %d machines stopped", total))
		default:
			add(ConditionHibernated, false, ReasonHibernating, fmt.Sprintf("%d of %d machines stopped", stopped, total))
		}
	}
	st.Conditions = conds
	if w := p.waiting(); w != nil && !paused && !deleting && !hibernated && p.invalid == nil {
		if st.Maintenance == nil {
			// No record of the maintenance service yet: the window as
			// the planner read it.
			st.Maintenance = &capnv1.MaintenanceStatus{}
			if !p.windowOpens.IsZero() {
				st.Maintenance.NextWindowOpen = timestamp(p.windowOpens)
			}
		}
		st.Maintenance.Waiting = append(st.Maintenance.Waiting, w)
	}
	// A cluster never Ready stays Provisioning until its blocking add-on
	// sets are applied (the CNI case); one that was Ready is not set back
	// by a new blocking set (its Ready condition says so).
	st.SetPhaseValue(p.phase(cpOK && wOK && addonsBlockOK, paused, deleting, hibernated))
	// Updated is when the status last changed, not when it was last
	// computed: a plan that changes nothing keeps the previous time, so
	// the planner has nothing to write (it rewrote every cluster's status
	// on every plan, a KV write per plan).
	if prev := p.in.Status; prev.GetUpdated() != nil {
		now := st.Updated
		st.Updated = prev.GetUpdated()
		if !proto.Equal(st, prev) {
			st.Updated = now
		}
	}
	return st
}

func (p *planner) phase(ready, paused, deleting, hibernated bool) capnv1.ClusterPhase {
	prev := p.in.Status.GetPhaseValue()
	neverReady := p.in.Status.GetPhase() == "" || prev == capnv1.ClusterPending || prev == capnv1.ClusterProvisioning
	all := append([]*pool{p.cp}, p.pools...)
	if p.byImplementation() {
		all = p.pools // the control plane has no machines to count
	}
	has := func(f func(pl *pool) bool) bool {
		for _, pl := range all {
			if f(pl) {
				return true
			}
		}
		return false
	}
	switch {
	case paused && !p.c.GetMetadata().Orphaning():
		return capnv1.ClusterPaused
	case deleting:
		return capnv1.ClusterDeleting
	case p.invalid != nil:
		return capnv1.ClusterFailed
	case p.refused:
		return capnv1.ClusterPending
	case p.initialized && p.cp.obs.available == 0 && p.cp.obs.failed > 0:
		return capnv1.ClusterFailed // the control plane is down and failing
	case hibernated && p.allStopped():
		return capnv1.ClusterHibernated
	case hibernated:
		return capnv1.ClusterHibernating
	case ready:
		return capnv1.ClusterReady
	case !p.initialized || neverReady:
		return capnv1.ClusterProvisioning
	case has(func(pl *pool) bool { return pl.obs.stopped > 0 }):
		return capnv1.ClusterWaking // stopped machines while not hibernated: starting again
	case has(func(pl *pool) bool { return pl.obs.outdated > 0 }):
		return capnv1.ClusterUpgrading
	case has(func(pl *pool) bool { return pl.obs.replicas < pl.replicas || pl.obs.ready < pl.obs.replicas }):
		return capnv1.ClusterScalingUp
	case has(func(pl *pool) bool { return pl.obs.replicas > pl.replicas || pl.obs.deleting > 0 }):
		return capnv1.ClusterScalingDown
	}
	// Every machine is there and up to date but some are unhealthy: nothing
	// to do for the planner (remediation's job); the Ready condition says so.
	return capnv1.ClusterReady
}

// phaseMessage says what the status's phase means now, for the timeline
// event of a phase change: what happened or what capn is doing, with
// numbers. Phases whose meaning the Ready condition carries take its
// message.
func (p *planner) phaseMessage(st *capnv1.ClusterStatus) string {
	stopped, total := p.stoppedCount()
	conds := st.GetConditions()
	message := func(typ string) string { return conditions.Get(conds, typ).GetMessage() }
	switch st.GetPhaseValue() {
	case capnv1.ClusterHibernated:
		msg := fmt.Sprintf("hibernated: %s stopped, their disks kept", plural(stopped, "machine"))
		them := "them"
		if stopped == 1 {
			msg, them = "hibernated: 1 machine stopped, its disk kept", "it"
		}
		if running := p.runningUnstoppable(); running != "" {
			msg += "; " + running
		}
		return msg + "; capn wake " + p.name + " starts " + them
	case capnv1.ClusterHibernating:
		return fmt.Sprintf("hibernating: stopping %s, keeping their disks", plural(total-stopped, "machine"))
	case capnv1.ClusterWaking:
		n := 0
		for _, pl := range append([]*pool{p.cp}, p.pools...) {
			n += pl.obs.stopped
		}
		return fmt.Sprintf("waking: starting %s", plural(n, "stopped machine"))
	case capnv1.ClusterDeleting:
		return message(ConditionDeleting)
	case capnv1.ClusterPaused:
		if p.c.GetMetadata().GetDeletionTimestamp() != nil {
			return message(ConditionDeleting) // the deletion waits: it says so
		}
		return message(ConditionPaused)
	}
	return message(ConditionReady)
}

// runningUnstoppable says which machines keep running through a
// hibernation because their pool's provider cannot stop ("" if none).
func (p *planner) runningUnstoppable() string {
	n := 0
	var pools []string
	for _, pl := range append([]*pool{p.cp}, p.pools...) {
		if pl.cannotStop && pl.obs.replicas > 0 {
			n += pl.obs.replicas
			pools = append(pools, pl.name)
		}
	}
	if n == 0 {
		return ""
	}
	verb := "keep"
	if n == 1 {
		verb = "keeps"
	}
	return fmt.Sprintf("%s of %s %s running (the provider cannot stop)", plural(n, "machine"), strings.Join(pools, ", "), verb)
}

func poolStatus(pl *pool) *capnv1.PoolStatus {
	return &capnv1.PoolStatus{
		Name:      pl.name,
		Desired:   int32(pl.replicas),
		Replicas:  int32(pl.obs.replicas),
		Ready:     int32(pl.obs.ready),
		Updated:   int32(pl.obs.updated),
		Available: int32(pl.obs.available),
		Version:   pl.obs.minVersion,
	}
}

// poolReadiness: exactly replicas machines, all up to date and available,
// none deleting.
func (p *planner) poolReadiness(pl *pool) (bool, string, string) {
	o := pl.obs
	counts := pl.progress()
	switch {
	case pl.controlPlane && !p.initialized:
		return false, ReasonNotInitialized, p.firstMachineMessage()
	case pl.hold != "" && o.replicas < pl.replicas:
		return false, ReasonWaitingForControlPlane, counts + " (" + pl.hold + ")"
	case pl.hold != "" && o.updated < o.replicas && p.byImplementation():
		// Its rollout waits for the implementation's API servers.
		return false, ReasonWaitingForControlPlane, counts + " (" + pl.hold + ")"
	case o.updated < o.replicas && pl.held():
		return false, ReasonWaitingForMaintenanceWindow, counts + " (" + p.heldMessage() + ")"
	case o.updated < o.replicas:
		return false, ReasonRollingOut, counts
	case o.replicas < pl.replicas:
		return false, ReasonScalingUp, counts
	case o.replicas > pl.replicas:
		return false, ReasonScalingDown, counts
	case o.available < pl.replicas:
		return false, ReasonMachinesNotAvailable, counts
	case o.deleting > 0:
		return false, ReasonMachinesDeleting, counts
	}
	return true, ReasonReady, counts
}

// progress says where a pool stands the way kubectl rollout status does:
// how many of the desired machines are updated and available, each count
// at most the desired one; the machines beyond it are named as what they
// are — surge machines of a rollout, or machines a scale-down removes —
// then the machines booting, stopped and deleting, and a few of those not
// available with why. For example "3 of 5 updated, 1 surge machine
// booting, 4 available; not available: demo-md-0-3f9a1-5 (Provisioning)".
func (pl *pool) progress() string {
	o, desired := pl.obs, pl.replicas
	parts := []string{fmt.Sprintf("%d of %d updated", min(o.updated, desired), desired)}
	booting := o.booting
	if extra := o.replicas - desired; extra > 0 {
		if o.updated < o.replicas { // a rollout: the extra machines are its surge
			surgeBooting := min(extra, booting)
			if surgeBooting > 0 {
				parts = append(parts, plural(surgeBooting, "surge machine")+" booting")
			}
			if n := extra - surgeBooting; n > 0 {
				parts = append(parts, plural(n, "surge machine"))
			}
			booting -= surgeBooting
		} else {
			parts = append(parts, fmt.Sprintf("%d to remove", extra))
		}
	}
	if booting > 0 {
		parts = append(parts, fmt.Sprintf("%d booting", booting))
	}
	if o.stopped > 0 {
		parts = append(parts, fmt.Sprintf("%d stopped", o.stopped))
	}
	parts = append(parts, fmt.Sprintf("%d available", min(o.available, desired)))
	if o.deleting > 0 {
		parts = append(parts, fmt.Sprintf("%d deleting", o.deleting))
	}
	msg := strings.Join(parts, ", ")
	if len(o.notAvailable) > 0 {
		msg += "; not available: " + strings.Join(o.notAvailable, ", ")
	}
	return msg
}

// plural is "1 machine", "2 machines".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// poolReady is poolReadiness, except that a pool that is not ready while
// its provider does not run says so: nothing will move until it does.
func (p *planner) poolReady(pl *pool) (bool, string, string) {
	ok, reason, msg := p.poolReadiness(pl)
	if !ok && pl.blocked != "" {
		return false, pl.blocked, msg + " (" + pl.blockedMsg + ")"
	}
	return ok, reason, msg
}

// uncountedWorkers is WorkersReady's message while the worker pools are
// ready but not counted because a blocking add-on set is not applied:
// "2 machines up, not counted ready: blocking add-on sets not applied:
// cni (…)".
func (p *planner) uncountedWorkers(blockMsg string) string {
	up := 0
	for _, pl := range p.pools {
		up += pl.obs.ready
	}
	return fmt.Sprintf("%s up, not counted ready: %s", plural(up, "machine"), blockMsg)
}

func (p *planner) workersReady() (bool, string, string) {
	if len(p.pools) == 0 {
		return true, ReasonNoWorkerPools, "the cluster has no worker pools"
	}
	reason := ""
	var msgs []string
	for _, pl := range p.pools {
		ok, r, msg := p.poolReady(pl)
		if ok {
			continue
		}
		if reason == "" {
			reason = r
		}
		msgs = append(msgs, "pool "+pl.name+": "+msg)
	}
	if reason == "" {
		return true, ReasonReady, fmt.Sprintf("all %d worker pools ready", len(p.pools))
	}
	return false, reason, strings.Join(msgs, "; ")
}

// readyMessage is the Ready condition's message while the control plane or
// a pool is not ready: the whole progress, "control plane: …; pool md-0:
// …" (a ready pool left out), so one line says what every part is doing.
func readyMessage(cpMsg string, workersOK bool, workersMsg string) string {
	msg := "control plane: " + cpMsg
	if !workersOK {
		msg += "; " + workersMsg
	}
	return msg
}

func (p *planner) firstMachineMessage() string {
	for _, m := range p.cp.machines {
		if m.m.GetSpec().GetFirstControlPlane() && !m.deleting {
			return fmt.Sprintf("waiting for the first control-plane machine %s (%s)", m.name, m.why())
		}
	}
	if len(p.cp.machines) > 0 {
		return fmt.Sprintf("waiting for %d control-plane machines to be deleted before creating the first one", len(p.cp.machines))
	}
	return "no control-plane machine yet"
}

// stoppedCount counts the machines hibernation stops (not deleting, in a
// pool whose provider can stop) and those of them that are stopped.
func (p *planner) stoppedCount() (stopped, total int) {
	for _, m := range p.list {
		if m.deleting || !p.canStop(m) {
			continue
		}
		total++
		if m.phase() == capnv1.MachineStopped {
			stopped++
		}
	}
	return stopped, total
}

// condition builds a condition, keeping the previous transition time when
// its status did not change.
func (p *planner) condition(typ string, ok bool, reason, msg string) *capnv1.Condition {
	c := conditions.New(typ, capnv1.ConditionTrue, reason, msg)
	if !ok {
		c.Status = capnv1.ConditionFalse.Wire()
		switch reason {
		case ReasonInvalidSpec, ReasonProviderLacksCapability, ReasonProviderLacksOS:
			c.Severity = SeverityError
		case ReasonMachinesNotAvailable, ReasonProviderNotRunning, ReasonAddonsFailed:
			c.Severity = SeverityWarning
		default:
			c.Severity = SeverityInfo
		}
	}
	if typ == ConditionPaused && !ok {
		c.Severity = "" // not being paused is not a problem
	}
	return conditions.Stamp(c, p.in.Status.GetConditions(), p.in.Now)
}
