package plan

import (
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// propagate updates in place what never rolls a machine: a pool's labels and
// taints, its nodeDrainTimeout and nodeDeletionTimeout, and spec.stopped
// from the cluster's hibernated flag. Machines being deleted get only the
// timeouts (as Cluster API: a drain stuck on a PodDisruptionBudget is
// ended by setting nodeDrainTimeout). Hibernation (spec.hibernated) stops
// every machine and otherwise freezes the cluster: no machine is created
// or deleted until it wakes. Machines of a pool whose provider cannot
// stop are not marked stopped (the ProvidersReady condition says so).
func (p *planner) propagate() {
	for _, pl := range append([]*pool{p.cp}, p.pools...) {
		stopped := p.c.GetSpec().GetHibernated() && !pl.cannotStop
		for _, m := range pl.machines {
			if p.justCreated(m) {
				continue
			}
			s := m.m.GetSpec()
			timeoutsDiffer := !proto.Equal(s.GetNodeDrainTimeout(), pl.drainTimeout) || !proto.Equal(s.GetNodeDeletionTimeout(), pl.deletionTimeout)
			if m.deleting {
				if timeoutsDiffer {
					p.updateTimeouts(pl, m)
				}
				continue
			}
			labelsDiffer := !pl.controlPlane && !maps.Equal(s.GetLabels(), pl.labels)
			taintsDiffer := !pl.controlPlane && !taintsEqual(s.GetTaints(), pl.taints)
			if !labelsDiffer && !taintsDiffer && !timeoutsDiffer && s.GetStopped() == stopped {
				continue
			}
			if p.full() {
				return
			}
			nm := proto.Clone(m.m).(*capnv1.Machine)
			reason := "propagate labels and taints"
			if !labelsDiffer && !taintsDiffer {
				reason = "propagate node drain and deletion timeouts"
			}
			if !pl.controlPlane {
				nm.Spec.Labels = cloneMap(pl.labels)
				nm.Spec.Taints = cloneTaints(pl.taints)
			}
			if nm.Spec == nil {
				nm.Spec = &capnv1.MachineSpec{}
			}
			nm.Spec.NodeDrainTimeout = cloneDuration(pl.drainTimeout)
			nm.Spec.NodeDeletionTimeout = cloneDuration(pl.deletionTimeout)
			if s.GetStopped() != stopped {
				nm.Spec.Stopped = stopped
				reason = "wake from hibernation"
				if stopped {
					reason = "hibernate"
				}
			}
			if nm.Metadata == nil {
				nm.Metadata = &capnv1.ObjectMeta{Name: m.name}
			}
			nm.Metadata.Generation++
			p.add(UpdateMachine{Machine: nm, Reason: reason})
		}
	}
}

// updateTimeouts copies pl's node drain and deletion timeouts to m, in
// place (m may be deleting: the new timeouts apply to its drain).
func (p *planner) updateTimeouts(pl *pool, m *machine) {
	nm := proto.Clone(m.m).(*capnv1.Machine)
	if nm.Spec == nil {
		nm.Spec = &capnv1.MachineSpec{}
	}
	nm.Spec.NodeDrainTimeout = cloneDuration(pl.drainTimeout)
	nm.Spec.NodeDeletionTimeout = cloneDuration(pl.deletionTimeout)
	if nm.Metadata == nil {
		nm.Metadata = &capnv1.ObjectMeta{Name: m.name}
	}
	nm.Metadata.Generation++
	p.add(UpdateMachine{Machine: nm, Reason: "propagate node drain and deletion timeouts"})
}

// justCreated: the machine was created by this plan (its record is not in
// the input yet).
func (p *planner) justCreated(m *machine) bool {
	_, ok := p.in.Machines[m.name]
	return !ok
}

func taintsEqual(a, b []*capnv1.Taint) bool {
	return slices.EqualFunc(a, b, func(x, y *capnv1.Taint) bool {
		return x.GetKey() == y.GetKey() && x.GetValue() == y.GetValue() && x.GetEffect() == y.GetEffect()
	})
}

// allStopped: every machine not being deleted that can stop reports
// Stopped.
func (p *planner) allStopped() bool {
	stopped, total := p.stoppedCount()
	return stopped == total
}

// canStop: the machine's pool may be stopped (its provider is not known to
// lack stop-start).
func (p *planner) canStop(m *machine) bool {
	for _, pl := range append([]*pool{p.cp}, p.pools...) {
		if pl.name == m.m.GetSpec().GetPool() {
			return !pl.cannotStop
		}
	}
	return true
}
