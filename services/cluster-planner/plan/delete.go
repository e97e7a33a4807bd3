package plan

// planDelete tears a cluster down in order, each step only once the one
// before is observed complete:
//
//  1. every worker machine is deleted (all at once), until all are gone;
//  2. then every control-plane machine, until all are gone;
//  3. then, once no machine record is left, the cluster infrastructure;
//  4. then, once it is gone, the PKI;
//  5. then the cluster record.
func (p *planner) planDelete() {
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
	switch {
	case len(p.all) > 0:
		// Records of deleted machines are being removed (removeGone).
	case p.in.Infra.Exists:
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
	switch {
	case workers > 0:
		return ReasonDeletingWorkers, "deleting " + plural(workers, "worker machine")
	case cps > 0:
		return ReasonDeletingControlPlane, "deleting " + plural(cps, "control-plane machine")
	case len(p.all) > 0:
		return ReasonRemovingMachineRecords, "removing " + plural(len(p.all), "deleted machine record")
	case p.in.Infra.Exists:
		return ReasonDeletingInfrastructure, "waiting for the cluster infrastructure to be deleted"
	case p.in.PKIExists:
		return ReasonDeletingPKI, "waiting for the cluster's PKI to be deleted"
	}
	return ReasonDeletingCluster, "removing the cluster record"
}
