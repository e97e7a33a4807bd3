package plan

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

// planner holds one plan's working state.
type planner struct {
	in      Input
	c       *capnv1.Cluster // defaulted and checked (Input.Spec); not modified
	name    string
	cp      *pool
	pools   []*pool             // worker pools, in spec order
	orphans []*machine          // machines of pools no longer in the spec
	gone    []*machine          // deletion complete, record to remove
	taken   map[string]bool     // machine names in use, including this plan's creates
	all     map[string]*machine // every machine by name
	list    []*machine          // every machine of the input, by name
	// initialized: the first control-plane machine has run (now or before).
	initialized bool
	invalid     error
	actions     []Action
	// truncated: Input.MaxActions cut the plan short.
	truncated bool
	// wait: the soonest a failed machine's replacement backoff ends.
	wait time.Duration
	// usedProviders are the pools (by name) each checked provider serves.
	usedProviders map[string][]string
	// providerProblems: providers that cannot serve the pools naming them.
	providerProblems []*providerProblem
	// refused: nothing was made for the cluster yet and a provider it
	// names cannot serve it, so nothing is made.
	refused bool
	// windowOpens: rollouts are confined (spec.maintenance.
	// confineSpecRollouts, every window closed) until then
	// (setConfinement); zero when they are not, or no window opens.
	windowOpens time.Time
}

// newPlanner starts a plan of c, defaulted and checked by the caller;
// invalid is the check's verdict, heeded unless c is paused or deleting.
func newPlanner(in Input, c *capnv1.Cluster, invalid error) *planner {
	p := &planner{
		in:    in,
		c:     c,
		name:  c.GetMetadata().GetName(),
		taken: map[string]bool{},
		all:   map[string]*machine{},

		usedProviders: map[string][]string{},
	}
	if c.GetMetadata().GetDeletionTimestamp() == nil && !c.GetSpec().GetPaused() {
		p.invalid = invalid
	}
	p.cp = p.controlPlanePool()
	byName := map[string]*pool{manifest.ControlPlanePool: p.cp}
	for _, wp := range c.GetSpec().GetWorkerPools() {
		pl := p.workerPool(wp)
		p.pools = append(p.pools, pl)
		byName[pl.name] = pl
	}
	names := make([]string, 0, len(in.Machines))
	for name := range in.Machines {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range in.Unreadable {
		p.taken[name] = true // never created over, never planned
	}
	for _, name := range names {
		dm := in.Machines[name]
		if cl := dm.GetSpec().GetCluster(); cl != "" && cl != p.name {
			continue // not this cluster's
		}
		p.taken[name] = true
		m := &machine{name: name, m: dm, status: in.Observed[name], deleting: dm.GetMetadata().GetDeletionTimestamp() != nil}
		p.all[name] = m
		p.list = append(p.list, m)
		pl := byName[dm.GetSpec().GetPool()]
		if pl != nil {
			pl.streak = max(pl.streak, m.nextStreak(in.Now))
		}
		if m.gone() {
			p.gone = append(p.gone, m)
			continue
		}
		if pl == nil {
			p.orphans = append(p.orphans, m)
			continue
		}
		m.outdated = dm.GetSpec().GetTemplateHash() != pl.hash
		pl.machines = append(pl.machines, m)
	}
	p.initialized = in.Status.GetControlPlaneInitialized() || slices.ContainsFunc(p.cp.machines, (*machine).running)
	if p.byImplementation() {
		p.initialized = in.Status.GetControlPlaneInitialized() || in.ControlPlane.GetInitialized()
	}
	for _, pl := range append([]*pool{p.cp}, p.pools...) {
		pl.obs = pl.count()
	}
	p.setConfinement()
	p.setHolds()
	p.checkProviders()
	return p
}

func (p *planner) controlPlanePool() *pool {
	s := p.c.GetSpec()
	cp := s.GetControlPlane()
	pl := &pool{
		name:         manifest.ControlPlanePool,
		controlPlane: true,
		replicas:     int(cp.GetReplicas()),
		version:      s.GetKubernetesVersion(),
		provider:     cp.GetProvider(),
		template:     cp.GetTemplate(),
		bootstrap:    effectiveBootstrap(s.GetBootstrap(), cp.GetBootstrap()),
		os:           manifest.OSOf(cp.GetOs()),
		maxSurge:     int(cp.GetMaxSurge()),
		order:        manifest.DeletionOrderOldest,

		drainTimeout:    cp.GetNodeDrainTimeout(),
		deletionTimeout: cp.GetNodeDeletionTimeout(),
	}
	if pl.maxSurge == 0 && pl.replicas < 3 {
		pl.maxSurge = 1 // validation refuses this; never risk quorum anyway
	}
	pl.hash = TemplateHash(RoleControlPlane, pl.provider, pl.version, pl.os, pl.template, pl.bootstrap)
	return pl
}

func (p *planner) workerPool(wp *capnv1.WorkerPool) *pool {
	s := p.c.GetSpec()
	pl := &pool{
		name:      wp.GetName(),
		replicas:  max(0, int(wp.GetReplicas())),
		version:   wp.GetVersion(),
		provider:  wp.GetProvider(),
		template:  wp.GetTemplate(),
		bootstrap: effectiveBootstrap(s.GetBootstrap(), wp.GetBootstrap()),
		os:        manifest.OSOf(wp.GetOs()),
		labels:    wp.GetLabels(),
		taints:    wp.GetTaints(),
		strategy:  wp.GetStrategy().GetType(),
		order:     wp.GetDeletionOrder(),

		drainTimeout:    wp.GetNodeDrainTimeout(),
		deletionTimeout: wp.GetNodeDeletionTimeout(),
		autoscaling:     wp.GetAutoscaling(),
	}
	if pl.version == "" {
		pl.version = s.GetKubernetesVersion()
	}
	if pl.strategy == manifest.StrategyRollingUpdate {
		// Validation guarantees both parse; fall back to the defaults if not.
		surge, err := manifest.ResolveIntOrPercent(wp.GetStrategy().GetMaxSurge(), pl.replicas, true)
		if err != nil {
			surge = 1
		}
		unav, err := manifest.ResolveIntOrPercent(wp.GetStrategy().GetMaxUnavailable(), pl.replicas, false)
		if err != nil {
			unav = 0
		}
		if surge == 0 && unav == 0 {
			unav = 1 // as Cluster API: a rollout must be able to move
		}
		pl.maxSurge, pl.maxUnav = surge, unav
	}
	pl.hash = TemplateHash(RoleWorker, pl.provider, pl.version, pl.os, pl.template, pl.bootstrap)
	return pl
}

// effectiveBootstrap is the cluster's bootstrap with the override merged in:
// scalars the override sets win, its lists are appended, its maps merged.
func effectiveBootstrap(cluster, override *capnv1.BootstrapSpec) *capnv1.BootstrapSpec {
	out := &capnv1.BootstrapSpec{}
	if cluster != nil {
		proto.Merge(out, cluster)
	}
	if override != nil {
		proto.Merge(out, override)
	}
	return out
}

// setHolds decides which pools may create machines: none before the control
// plane is initialized, none while it rolls (a new-version worker must not
// join an old control plane). While the control plane's rollout waits for
// the maintenance window (confined, nothing of it in progress), only the
// pools whose machines would be newer than its own wait with it
// (confinedPoolHold): scaling is never held by a window.
func (p *planner) setHolds() {
	if p.byImplementation() {
		for _, pl := range p.pools {
			pl.hold = p.implementationHold(pl)
		}
		return
	}
	hold := ""
	switch {
	case !p.initialized:
		hold = "waiting for the control plane to initialize"
	case p.cp.anyOutdated() && p.cp.confined && !p.cp.anyDeleting() && len(p.cp.active()) == p.cp.replicas:
		for _, pl := range p.pools {
			pl.hold = p.confinedPoolHold(pl)
		}
		return
	case p.cp.anyOutdated():
		hold = "waiting for the control plane to finish rolling out"
	}
	for _, pl := range p.pools {
		pl.hold = hold
	}
}

// create plans a new machine in pl at the lowest free ordinal.
func (p *planner) create(pl *pool, first bool, reason string) {
	if p.full() {
		return
	}
	name := p.freeName(pl)
	p.taken[name] = true
	role := RoleWorker
	if pl.controlPlane {
		role = RoleControlPlane
	}
	m := &capnv1.Machine{
		Metadata: &capnv1.ObjectMeta{
			Name:              name,
			Labels:            map[string]string{LabelCluster: p.name, LabelPool: pl.name},
			Generation:        1,
			CreationTimestamp: timestamp(p.in.Now),
		},
		Spec: &capnv1.MachineSpec{
			Cluster:           p.name,
			Pool:              pl.name,
			Role:              role,
			Provider:          pl.provider,
			Version:           pl.version,
			Os:                pl.os,
			Template:          cloneOrNil(pl.template),
			Labels:            cloneMap(pl.labels),
			Taints:            cloneTaints(pl.taints),
			TemplateHash:      pl.hash,
			Bootstrap:         proto.Clone(pl.bootstrap).(*capnv1.BootstrapSpec),
			FirstControlPlane: first,
			Stopped:           p.c.GetSpec().GetHibernated(),

			NodeDrainTimeout:    cloneDuration(pl.drainTimeout),
			NodeDeletionTimeout: cloneDuration(pl.deletionTimeout),
		},
	}
	if pl.streak > 0 {
		m.Metadata.Annotations = map[string]string{AnnotationFailureStreak: strconv.Itoa(pl.streak)}
	}
	p.add(CreateMachine{Machine: m, Reason: reason})
	vm := &machine{name: name, m: m}
	pl.machines = append(pl.machines, vm)
	p.all[name] = vm
}

// replaceFailed plans the deletion of the failed machine m (its pool then
// makes a replacement). One that failed quickly (quickFailure) waits for
// its failure backoff (FailureBackoff of its streak) since it failed;
// until then it reports false and the plan is looked at again when the
// backoff ends.
func (p *planner) replaceFailed(m *machine, reason string) bool {
	if !m.quickFailure(p.in.Now) {
		p.delete(m, reason)
		return true
	}
	if left := m.status.GetPhaseSince().AsTime().Add(FailureBackoff(m.streak())).Sub(p.in.Now); left > 0 {
		if p.wait == 0 || left < p.wait {
			p.wait = left
		}
		return false
	}
	p.delete(m, reason)
	return true
}

// delete plans a machine's deletion and counts it as deleting from now on.
func (p *planner) delete(m *machine, reason string) {
	if m.deleting || !p.add(DeleteMachine{Name: m.name, Reason: reason}) {
		return
	}
	m.deleting = true
}

// add appends a to the plan, unless the plan holds Input.MaxActions
// already: then it notes that the plan is truncated and reports false.
func (p *planner) add(a Action) bool {
	if p.full() {
		return false
	}
	p.actions = append(p.actions, a)
	return true
}

// full reports whether the plan holds Input.MaxActions actions, and if so
// marks it truncated: whatever it would add next waits for the next plan.
func (p *planner) full() bool {
	if p.in.MaxActions > 0 && len(p.actions) >= p.in.MaxActions {
		p.truncated = true
		return true
	}
	return false
}

// room is how many more actions the plan may hold.
func (p *planner) room() int {
	if p.in.MaxActions <= 0 {
		return math.MaxInt
	}
	return max(0, p.in.MaxActions-len(p.actions))
}

// removeGone plans the removal of records whose deletion is complete.
func (p *planner) removeGone() {
	for _, m := range p.gone {
		p.add(RemoveMachine{Name: m.name})
	}
}

// ensureInfra asks for the cluster's infrastructure while none is observed.
// Machines do not wait for it here: the machine-manager and the provider do.
func (p *planner) ensureInfra() {
	if !p.in.Infra.Exists {
		p.add(EnsureClusterInfra{Provider: p.cp.provider})
	}
}

// deleteOrphans deletes the machines of pools removed from the spec.
func (p *planner) deleteOrphans() {
	for _, m := range p.orphans {
		p.delete(m, "pool "+m.m.GetSpec().GetPool()+" was removed from the spec")
	}
}

func cloneOrNil(t *capnv1.MachineTemplate) *capnv1.MachineTemplate {
	if t == nil {
		return nil
	}
	return proto.Clone(t).(*capnv1.MachineTemplate)
}

func cloneDuration(d *durationpb.Duration) *durationpb.Duration {
	if d == nil {
		return nil
	}
	return proto.Clone(d).(*durationpb.Duration)
}

func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cloneTaints(ts []*capnv1.Taint) []*capnv1.Taint {
	var out []*capnv1.Taint
	for _, t := range ts {
		out = append(out, proto.Clone(t).(*capnv1.Taint))
	}
	return out
}
