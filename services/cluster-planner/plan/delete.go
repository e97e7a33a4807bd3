package plan

import (
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// planDelete tears a cluster down in order, each step only once the one
// before is observed complete:
//
//  1. every worker machine is deleted (all at once), until all are gone;
//  2. then every control-plane machine, until all are gone;
//  3. then, once no machine record is left, the cluster infrastructure;
//  4. then, once it is gone, the PKI;
//  5. then the cluster record.
//
// With the Orphan policy (capn move) nothing in the world is touched:
// every machine is let go of at once (its provider drops its record and
// leaves it running), then the cluster infrastructure's record, then the
// PKI held here, then the cluster record.
//
// A control plane made by an implementation (type hosted or external) has
// no machine (and an external one's Nodes are drained and deleted, not
// excluded: its API server stays): once the workers are gone the implementation is sent
// DeleteControlPlane until its record is gone (the command is sent along
// with the next steps when there is no record, if the plan has room for
// both: whatever it made without reporting goes too); then the
// infrastructure, if a provider holds one, the PKI and the cluster record.
func (p *planner) planDelete() {
	if p.c.GetMetadata().Orphaning() {
		p.planOrphan()
		return
	}
	var workers, cps []*machine
	for _, m := range p.list {
		if m.gone() {
			continue
		}
		if m.m.GetSpec().GetPool() == p.cp.name {
			cps = append(cps, m)
		} else {
			workers = append(workers, m)
		}
	}
	// Nothing is left to reschedule pods onto: the machines' Nodes are not
	// drained (Cluster API skips the drain of a cluster being deleted).
	// An external control plane outlives the capn cluster: its workers'
	// Nodes are drained and deleted from it as a scale-down's are (the
	// machine-manager waits for the health-watcher's Node deletion).
	if p.implementation() != capnv1.ControlPlaneExternal {
		for _, m := range append(append([]*machine(nil), workers...), cps...) {
			p.excludeDrain(m)
		}
	}
	if len(workers) > 0 {
		for _, m := range workers {
			p.delete(m, "cluster is being deleted: workers first")
		}
		return
	}
	if len(cps) > 0 {
		for _, m := range cps {
			p.delete(m, "cluster is being deleted: control plane after the workers")
		}
		return
	}
	if p.byImplementation() {
		switch {
		case p.in.ControlPlane != nil:
			p.add(DeleteControlPlane{Implementation: p.implementation(), Command: p.command()})
			return // until the implementation removed its record
		case p.room() > 1:
			// No record (gone, or never written): sent again with the
			// next step, never in its place; the stream drops the repeats.
			p.add(DeleteControlPlane{Implementation: p.implementation(), Command: p.command()})
		}
	}
	switch {
	case len(p.all) > 0:
		// Records of deleted machines are being removed (removeGone).
	case p.in.Infra.Exists && (p.cp.provider != "" || p.in.Infra.Provider != ""):
		provider := p.cp.provider
		if p.in.Infra.Provider != "" {
			provider = p.in.Infra.Provider
		}
		p.add(DeleteClusterInfra{Provider: provider})
	case p.in.PKIExists:
		p.add(DeletePKI{})
	default:
		p.add(DeleteCluster{})
	}
}

// planOrphan is planDelete with the Orphan policy.
func (p *planner) planOrphan() {
	left := 0
	for _, m := range p.list {
		if m.gone() {
			continue
		}
		left++
		if !m.deleting && p.add(DeleteMachine{Name: m.name, Orphan: true, Reason: "cluster is being deleted with the Orphan policy: let go of, left running"}) {
			m.deleting = true
		}
	}
	switch {
	case left > 0 || len(p.all) > 0:
		// Machines are being let go of, or their records removed.
	case p.in.Infra.Exists:
		provider := p.cp.provider
		if p.in.Infra.Provider != "" {
			provider = p.in.Infra.Provider
		}
		p.add(DeleteClusterInfra{Provider: provider, Orphan: true})
	case p.in.PKIExists:
		p.add(DeletePKI{})
	default:
		p.add(DeleteCluster{})
	}
}

// excludeDrain marks m with annotations.ExcludeNodeDraining, in place,
// unless it has it.
func (p *planner) excludeDrain(m *machine) {
	if _, ok := m.m.GetMetadata().GetAnnotations()[annotations.ExcludeNodeDraining]; ok {
		return
	}
	nm := proto.Clone(m.m).(*capnv1.Machine)
	if nm.Metadata == nil {
		nm.Metadata = &capnv1.ObjectMeta{Name: m.name}
	}
	if nm.Metadata.Annotations == nil {
		nm.Metadata.Annotations = map[string]string{}
	}
	nm.Metadata.Annotations[annotations.ExcludeNodeDraining] = "cluster is being deleted"
	nm.Metadata.Generation++
	if p.add(UpdateMachine{Machine: nm, Reason: "cluster is being deleted: do not drain its Nodes"}) {
		m.m = nm
	}
}

// deletionStep says where a deletion stands, for the Deleting condition.
func (p *planner) deletionStep() (reason, message string) {
	workers, cps := 0, 0
	for _, m := range p.list {
		if m.gone() {
			continue
		}
		if m.m.GetSpec().GetPool() == p.cp.name {
			cps++
		} else {
			workers++
		}
	}
	orphan := ""
	if p.c.GetMetadata().Orphaning() {
		orphan = " (Orphan policy: let go of, left running)"
	}
	switch {
	case p.c.GetMetadata().Orphaning() && workers+cps > 0:
		return ReasonOrphaningMachines, "letting go of " + plural(workers+cps, "machine") + orphan
	case workers > 0:
		return ReasonDeletingWorkers, "deleting " + plural(workers, "worker machine")
	case cps > 0:
		return ReasonDeletingControlPlane, "deleting " + plural(cps, "control-plane machine")
	case p.byImplementation() && !p.c.GetMetadata().Orphaning() && p.in.ControlPlane != nil:
		return ReasonDeletingImplementation, p.implementationDeletion()
	case len(p.all) > 0:
		return ReasonRemovingMachineRecords, "removing " + plural(len(p.all), "deleted machine record")
	case p.in.Infra.Exists:
		return ReasonDeletingInfrastructure, "waiting for the cluster infrastructure to be deleted" + orphan
	case p.in.PKIExists:
		return ReasonDeletingPKI, "waiting for the cluster's PKI to be deleted"
	}
	return ReasonDeletingCluster, "removing the cluster record"
}

// implementationDeletion says what the implementation does while the
// planner waits for its record to go: a hosted control plane is stopped
// and its data removed; an external one stays, only what capn made in it
// goes.
func (p *planner) implementationDeletion() string {
	record := "controlplane-" + p.implementation() + " deletes the record controlplane." + p.name + " last"
	switch p.implementation() {
	case capnv1.ControlPlaneHosted:
		return "stopping the hosted control plane (etcd, API servers, controller-manager, scheduler) and removing its data; " + record
	case capnv1.ControlPlaneExternal:
		return "removing what capn made in the external cluster (the workers' join RBAC and cluster-info); the external control plane itself stays; " + record
	}
	return "waiting for the " + p.implementation() + " control plane to be deleted; " + record
}
