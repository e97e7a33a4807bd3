// Package plantest is an in-memory simulator for the cluster-planner's pure
// Plan function (nomad's scheduler/tests Harness, for capn): it holds a
// cluster's desired and observed state, is a plan.Applier with the record
// rules the service's applier uses (TestApplier holds both to them), makes
// deletions and boots take a few steps, and records what happened so tests
// can assert bounds on every step.
package plantest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
)

// ErrConflict is a CAS failure: a create of a name that exists, or a change
// of a machine that does not.
var ErrConflict = errors.New("conflict")

// Harness simulates one cluster. Fields may be changed between steps.
type Harness struct {
	Cluster  *capnv1.Cluster
	Machines map[string]*capnv1.Machine
	Observed map[string]*capnv1.MachineStatus
	Infra    plan.Infra
	PKI      bool
	// Providers are the running providers and the capabilities they
	// announce: each is announced at Now on every plan. nil: providers are
	// not checked (plan.Input.Providers nil).
	Providers map[string][]string
	// ProviderOS are the operating systems a running provider announces
	// (none listed: linux only).
	ProviderOS map[string][]string
	// Addons are plan.Input.Addons: the add-on sets selecting the cluster
	// and their records, as a test sets them.
	Addons []plan.Addon
	// MaxActions is plan.Input.MaxActions: at most that many actions a
	// plan (0: no bound).
	MaxActions int
	// Status is the last status the planner wrote.
	Status *capnv1.ClusterStatus
	// ClusterDeleted is set when a plan deleted the cluster record.
	ClusterDeleted bool
	// ControlPlane is the observed control-plane record (Input.ControlPlane):
	// the plans' own for type machines (WriteControlPlaneRecord), what a
	// test sets for the other implementations. RecordWrites counts the
	// plans' writes of it.
	ControlPlane *capnv1.ControlPlaneRecord
	RecordWrites int
	// ClusterRevision is Input.ClusterRevision (0: metadata.generation).
	ClusterRevision uint64
	// Commands are the control-plane commands sent, once per id (the
	// stream's duplicate window drops a command sent again).
	Commands []Command
	Now      time.Time
	// Tick is how far Now moves per step (default 10s).
	Tick time.Duration

	// BootSteps is how many steps a new machine takes to run (default 2);
	// DeleteSteps how many a deletion takes (default 1).
	BootSteps   func(name string) int
	DeleteSteps func(name string) int
	// FailBoot makes a booting machine go Failed instead of Running.
	FailBoot func(name string) bool

	// Steps counts steps taken; History records every one.
	Steps   int
	History []Record

	timers map[string]int
	uids   int // uids handed out
}

// Command is a control-plane command as sent: subject, id and body.
type Command struct {
	Subject, ID string
	Command     *capnv1.ControlPlaneCommand
}

// Record is one step: the state before the plan, and the plan.
type Record struct {
	Step   int
	Before map[string]Counts // by pool, before the plan's actions
	After  map[string]Counts // by pool, after the actions were applied
	Result plan.Result
}

// Counts are a pool's machine numbers at one moment.
type Counts struct {
	// Total are the machine records, deleting ones included (not those whose
	// deletion completed).
	Total int
	// Active are not being deleted; Available are Running and healthy.
	Active, Available int
	// Outdated are active machines not of the pool's current template.
	Outdated int
	// OutdatedAll includes machines being deleted.
	OutdatedAll int
}

// New returns a harness for c (defaulted in place) at a fixed start time.
func New(c *capnv1.Cluster) *Harness {
	manifest.Default(c)
	return &Harness{
		Cluster:  c,
		Machines: map[string]*capnv1.Machine{},
		Observed: map[string]*capnv1.MachineStatus{},
		PKI:      true,
		Now:      time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		Tick:     10 * time.Second,
		timers:   map[string]int{},
	}
}

// Input is the planner's input for the current state.
func (h *Harness) Input() plan.Input {
	in := plan.Input{
		Cluster:    h.Cluster,
		Machines:   h.Machines,
		Observed:   h.Observed,
		Infra:      h.Infra,
		PKIExists:  h.PKI,
		Status:     h.Status,
		Now:        h.Now,
		MaxActions: h.MaxActions,
		Addons:     h.Addons,

		ControlPlane:    h.ControlPlane,
		ClusterRevision: h.ClusterRevision,
	}
	if h.Providers != nil {
		in.Providers = map[string]*capnv1.ProviderAnnouncement{}
		for name, caps := range h.Providers {
			in.Providers[name] = &capnv1.ProviderAnnouncement{Name: name, Capabilities: caps, Time: timestamppb.New(h.Now), Instance: "plantest",
				OperatingSystems: h.ProviderOS[name]}
		}
	}
	return in
}

// Plan computes a plan for the current state without applying it.
func (h *Harness) Plan() plan.Result { return plan.Plan(h.Input()) }

// Apply applies a plan's actions in order, as the planner's caller would
// (plan.Apply, with the harness as the plan.Applier), and stores its
// status. Before each action it checks what a single planner must never
// plan, which the Applier would take as a no-op or a race: a create of a
// name the world holds (ErrConflict), a change of a machine it does not
// (ErrConflict), a second deletion, and the removal of a record or the
// teardown of the cluster before what it waits for is gone.
func (h *Harness) Apply(r plan.Result) error {
	if r.ControlPlaneRecord != nil {
		// Before the actions, as the service writes it: a DeleteCluster
		// among them takes it away.
		if err := h.WriteControlPlaneRecord(context.Background(), r.ControlPlaneRecord); err != nil {
			return err
		}
	}
	for _, a := range r.Actions {
		if err := h.check(a); err != nil {
			return err
		}
		if err := plan.Apply(context.Background(), h, []plan.Action{a}); err != nil {
			return err
		}
	}
	h.Status = r.Status
	return nil
}

func (h *Harness) check(a plan.Action) error {
	switch a := a.(type) {
	case plan.CreateMachine:
		name := a.Machine.GetMetadata().GetName()
		if _, ok := h.Machines[name]; ok {
			return fmt.Errorf("create %s: %w: name taken", name, ErrConflict)
		}
	case plan.DeleteMachine:
		m, ok := h.Machines[a.Name]
		if !ok {
			return fmt.Errorf("delete %s: %w: no such machine", a.Name, ErrConflict)
		}
		if m.GetMetadata().GetDeletionTimestamp() != nil {
			return fmt.Errorf("delete %s: already deleting", a.Name)
		}
	case plan.UpdateMachine:
		name := a.Machine.GetMetadata().GetName()
		if _, ok := h.Machines[name]; !ok {
			return fmt.Errorf("update %s: %w: no such machine", name, ErrConflict)
		}
	case plan.RemoveMachine:
		if h.Observed[a.Name].GetPhaseValue() != capnv1.MachineDeleted {
			return fmt.Errorf("remove %s: not deleted yet", a.Name)
		}
	case plan.DeleteClusterInfra:
		if len(h.Machines) > 0 {
			return fmt.Errorf("delete cluster infrastructure with %d machines left", len(h.Machines))
		}
		if h.ControlPlane != nil && h.ControlPlane.GetImplementation() != capnv1.ControlPlaneMachines {
			return errors.New("delete cluster infrastructure before the control plane's record is gone")
		}
	case plan.DeletePKI:
		if h.Infra.Exists {
			return errors.New("delete PKI before the infrastructure is gone")
		}
	case plan.DeleteCluster:
		if h.Infra.Exists || h.PKI || len(h.Machines) > 0 {
			return errors.New("delete cluster before everything it owns is gone")
		}
		if h.ControlPlane != nil && h.ControlPlane.GetImplementation() != capnv1.ControlPlaneMachines {
			return errors.New("delete cluster before its control plane's implementation removed its record")
		}
	case plan.DeleteControlPlane:
		if len(h.Machines) > 0 {
			return fmt.Errorf("delete the control plane with %d machines left", len(h.Machines))
		}
	}
	return nil
}

var _ plan.Applier = (*Harness)(nil)

// CreateMachine implements plan.Applier; uids are plantest-<n>, in order.
func (h *Harness) CreateMachine(_ context.Context, a plan.CreateMachine) error {
	name := a.Machine.GetMetadata().GetName()
	if _, ok := h.Machines[name]; ok {
		return nil
	}
	h.uids++
	h.Machines[name] = plan.NewMachineRecord(a, fmt.Sprintf("plantest-%d", h.uids), h.Now)
	return nil
}

// UpdateMachine implements plan.Applier.
func (h *Harness) UpdateMachine(_ context.Context, a plan.UpdateMachine) error {
	name := a.Machine.GetMetadata().GetName()
	if m, ok := plan.UpdatedMachineRecord(h.Machines[name], a); ok {
		h.Machines[name] = m
	}
	return nil
}

// DeleteMachine implements plan.Applier.
func (h *Harness) DeleteMachine(_ context.Context, a plan.DeleteMachine) error {
	if m, ok := plan.DeletingMachineRecord(h.Machines[a.Name], a, h.Now); ok {
		h.Machines[a.Name] = m
	}
	return nil
}

// RemoveMachine implements plan.Applier: the record goes, and with it the
// machine's status and timers.
func (h *Harness) RemoveMachine(_ context.Context, a plan.RemoveMachine) error {
	delete(h.Machines, a.Name)
	delete(h.Observed, a.Name)
	delete(h.timers, a.Name)
	return nil
}

// EnsureClusterInfra implements plan.Applier: the infrastructure is there
// and ready at once.
func (h *Harness) EnsureClusterInfra(context.Context, plan.EnsureClusterInfra) error {
	h.Infra.Exists, h.Infra.Ready = true, true
	h.Infra.Endpoint = &capnv1.Endpoint{Host: h.Cluster.GetMetadata().GetName() + ".sim", Port: 6443}
	return nil
}

// DeleteClusterInfra implements plan.Applier: the infrastructure is gone at
// once.
func (h *Harness) DeleteClusterInfra(context.Context, plan.DeleteClusterInfra) error {
	h.Infra = plan.Infra{}
	return nil
}

// DeletePKI implements plan.Applier.
func (h *Harness) DeletePKI(context.Context, plan.DeletePKI) error {
	h.PKI = false
	return nil
}

// DeleteCluster implements plan.Applier.
func (h *Harness) DeleteCluster(context.Context, plan.DeleteCluster) error {
	if h.ControlPlane.GetImplementation() == capnv1.ControlPlaneMachines {
		h.ControlPlane = nil
	}
	h.ClusterDeleted = true
	return nil
}

// EnsureControlPlane implements plan.Applier: the command is sent (once
// per id).
func (h *Harness) EnsureControlPlane(_ context.Context, a plan.EnsureControlPlane) error {
	h.send(a.Subject(), a.ID(), a.Command)
	return nil
}

// DeleteControlPlane implements plan.Applier: the command is sent (once
// per id).
func (h *Harness) DeleteControlPlane(_ context.Context, a plan.DeleteControlPlane) error {
	h.send(a.Subject(), a.ID(), a.Command)
	return nil
}

func (h *Harness) send(subject, id string, c *capnv1.ControlPlaneCommand) {
	for _, sent := range h.Commands {
		if sent.ID == id {
			return
		}
	}
	h.Commands = append(h.Commands, Command{Subject: subject, ID: id, Command: proto.CloneOf(c)})
}

// WriteControlPlaneRecord implements plan.Applier: the record is stored
// unless the stored one says the same or is another implementation's.
func (h *Harness) WriteControlPlaneRecord(_ context.Context, rec *capnv1.ControlPlaneRecord) error {
	if h.ControlPlane != nil && h.ControlPlane.GetImplementation() != capnv1.ControlPlaneMachines || plan.SameControlPlaneRecord(h.ControlPlane, rec) {
		return nil
	}
	h.ControlPlane = proto.CloneOf(rec)
	h.RecordWrites++
	return nil
}

// Advance moves the simulated world one step: machines boot, stop, start
// and finish deleting; Now moves by Tick.
func (h *Harness) Advance() {
	h.Now = h.Now.Add(h.Tick)
	for _, name := range slices.Sorted(maps.Keys(h.Machines)) {
		m := h.Machines[name]
		st := h.Observed[name]
		if st == nil {
			st = &capnv1.MachineStatus{}
			st.SetPhaseValue(capnv1.MachinePending)
			h.Observed[name] = st
			h.timers[name] = h.steps(h.BootSteps, name, 2)
		}
		switch phase := st.GetPhaseValue(); {
		case m.GetMetadata().GetDeletionTimestamp() != nil:
			if phase == capnv1.MachineDeleted {
				continue
			}
			if phase != capnv1.MachineDeleting {
				st.SetPhaseValue(capnv1.MachineDeleting)
				h.timers[name] = h.steps(h.DeleteSteps, name, 1)
			}
			if h.timers[name]--; h.timers[name] <= 0 {
				st.SetPhaseValue(capnv1.MachineDeleted)
			}
		case phase == capnv1.MachineFailed:
		case phase == capnv1.MachineRunning && m.GetSpec().GetStopped():
			st.SetPhaseValue(capnv1.MachineStopped)
		case phase == capnv1.MachineStopped && !m.GetSpec().GetStopped():
			st.SetPhaseValue(capnv1.MachineRunning)
		case phase == capnv1.MachineRunning || phase == capnv1.MachineStopped:
		default: // booting
			if h.timers[name]--; h.timers[name] > 0 {
				st.SetPhaseValue(capnv1.MachineProvisioning)
				continue
			}
			if h.FailBoot != nil && h.FailBoot(name) {
				st.SetPhaseValue(capnv1.MachineFailed)
				st.FailureReason = "BootFailed"
				st.PhaseSince = timestamppb.New(h.Now)
				continue
			}
			st.SetPhaseValue(capnv1.MachineRunning)
			if m.GetSpec().GetStopped() {
				st.SetPhaseValue(capnv1.MachineStopped)
			}
			st.KubeletVersion = m.GetSpec().GetVersion()
			st.NodeName = name
			st.Conditions = []*capnv1.Condition{{Type: plan.ConditionNodeHealthy, Status: capnv1.ConditionTrue.Wire()}}
		}
	}
}

func (h *Harness) steps(f func(string) int, name string, def int) int {
	if f == nil {
		return def
	}
	return max(1, f(name))
}

// Step plans, applies and advances once, and records the step.
func (h *Harness) Step() (plan.Result, error) {
	r, err := h.PlanAndApply()
	if err != nil {
		return r, err
	}
	h.Advance()
	return r, nil
}

// PlanAndApply plans and applies once and records the step, without
// advancing the world.
func (h *Harness) PlanAndApply() (plan.Result, error) {
	before := h.Counts()
	r := h.Plan()
	if err := h.Apply(r); err != nil {
		return r, fmt.Errorf("step %d: %w", h.Steps, err)
	}
	h.History = append(h.History, Record{Step: h.Steps, Before: before, After: h.Counts(), Result: r})
	h.Steps++
	return r, nil
}

// Converged: the last plan had no action and the cluster is Ready (or, when
// deleting, its record was deleted).
func (h *Harness) Converged(r plan.Result) bool {
	if h.ClusterDeleted {
		return true
	}
	return len(r.Actions) == 0 && r.Status.GetPhaseValue() == capnv1.ClusterReady
}

// Run steps until Converged or maxSteps; it returns the steps taken. check,
// if set, is called after every plan is applied and before the world
// advances, with the step's record: the harness then still holds each
// machine as the plan saw it (deleted ones now carry their deletion
// timestamp). check may change the harness, as a user would.
func (h *Harness) Run(maxSteps int, check func(Record) error) (int, error) {
	for i := range maxSteps {
		r, err := h.PlanAndApply()
		if err != nil {
			return i, err
		}
		if check != nil {
			if err := check(h.History[len(h.History)-1]); err != nil {
				return i, fmt.Errorf("step %d: %w", h.Steps-1, err)
			}
		}
		h.Advance()
		if h.Converged(r) {
			return i + 1, nil
		}
	}
	return maxSteps, fmt.Errorf("not converged after %d steps: phase %s", maxSteps, h.Status.GetPhase())
}

// DesiredHash is the template hash pool's machines should have.
func (h *Harness) DesiredHash(pool string) string { return DesiredHash(h.Cluster, pool) }

// DesiredHash is the template hash pool's machines should have in cluster c
// ("" for an unknown pool); the planner computes the same.
func DesiredHash(c *capnv1.Cluster, pool string) string {
	c = proto.Clone(c).(*capnv1.Cluster)
	manifest.Default(c)
	s := c.GetSpec()
	merge := func(o *capnv1.BootstrapSpec) *capnv1.BootstrapSpec {
		b := proto.Clone(s.GetBootstrap()).(*capnv1.BootstrapSpec)
		if b == nil {
			b = &capnv1.BootstrapSpec{}
		}
		if o != nil {
			proto.Merge(b, o)
		}
		return b
	}
	if pool == manifest.ControlPlanePool {
		cp := s.GetControlPlane()
		return plan.TemplateHash(plan.RoleControlPlane, cp.GetProvider(), s.GetKubernetesVersion(), manifest.OSOf(cp.GetOs()), cp.GetTemplate(), merge(cp.GetBootstrap()))
	}
	for _, p := range s.GetWorkerPools() {
		if p.GetName() == pool {
			return plan.TemplateHash(plan.RoleWorker, p.GetProvider(), p.GetVersion(), manifest.OSOf(p.GetOs()), p.GetTemplate(), merge(p.GetBootstrap()))
		}
	}
	return ""
}

// Counts returns every pool's numbers now (pools of the spec, plus any pool
// machines still claim).
func (h *Harness) Counts() map[string]Counts {
	out := map[string]Counts{manifest.ControlPlanePool: {}}
	for _, p := range h.Cluster.GetSpec().GetWorkerPools() {
		out[p.GetName()] = Counts{}
	}
	hashes := map[string]string{}
	for pool := range out {
		hashes[pool] = h.DesiredHash(pool)
	}
	for name, m := range h.Machines {
		st := h.Observed[name]
		if st.GetPhaseValue() == capnv1.MachineDeleted {
			continue
		}
		pool := m.GetSpec().GetPool()
		c := out[pool]
		c.Total++
		outdated := m.GetSpec().GetTemplateHash() != hashes[pool]
		if outdated {
			c.OutdatedAll++
		}
		if m.GetMetadata().GetDeletionTimestamp() == nil {
			c.Active++
			if outdated {
				c.Outdated++
			}
			if st.GetPhaseValue() == capnv1.MachineRunning && !unhealthy(m, st) {
				c.Available++
			}
		}
		out[pool] = c
	}
	return out
}

func unhealthy(m *capnv1.Machine, st *capnv1.MachineStatus) bool {
	if _, ok := m.GetMetadata().GetAnnotations()[plan.AnnotationUnhealthy]; ok {
		return true
	}
	for _, c := range st.GetConditions() {
		if c.GetType() == plan.ConditionNodeHealthy && c.GetStatusValue() == capnv1.ConditionFalse {
			return true
		}
	}
	return false
}

// Names returns the machine names of a pool, sorted.
func (h *Harness) Names(pool string) []string {
	var out []string
	for name, m := range h.Machines {
		if m.GetSpec().GetPool() == pool {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// SetPhase sets a machine's observed phase (e.g. MachineFailed).
func (h *Harness) SetPhase(name string, phase capnv1.MachinePhase) {
	if h.Observed[name] == nil {
		h.Observed[name] = &capnv1.MachineStatus{}
	}
	h.Observed[name].SetPhaseValue(phase)
}

// Annotate sets an annotation on a desired machine.
func (h *Harness) Annotate(name, key, value string) {
	m := h.Machines[name]
	if m.Metadata.Annotations == nil {
		m.Metadata.Annotations = map[string]string{}
	}
	m.Metadata.Annotations[key] = value
}

// Update changes the cluster's spec in place and bumps its generation.
func (h *Harness) Update(f func(s *capnv1.ClusterSpec)) {
	f(h.Cluster.Spec)
	manifest.Default(h.Cluster)
	if h.Cluster.Metadata != nil {
		h.Cluster.Metadata.Generation++
	}
}

// Delete requests the cluster's deletion.
func (h *Harness) Delete() { h.Cluster.Metadata.DeletionTimestamp = timestamppb.New(h.Now) }
