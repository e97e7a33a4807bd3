package sim

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Adopt takes back what a previous run of the provider recorded in
// observed KV: the sim's machines exist only in memory, so its observed
// records are their only persistence. Machines that were Creating boot
// again (after the boot delay), Running ones resume heartbeats at a
// per-machine phase within HeartbeatEvery (so that a large fleet does not
// report all at once), Stopped ones stay stopped. Records in other states
// (Deleting, Deleted, Failed) describe nothing that exists and are left to
// the SDK and the core. Adopt is called once before Run, and with one
// record for each adopt command (a restore or a move hands the machine
// over): a machine or cluster it already has is kept as it is.
func (p *Provider) Adopt(_ context.Context, machines []*capnv1.InfraMachine, clusters []*capnv1.InfraCluster) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	for _, c := range clusters {
		if _, ok := p.clusters[c.GetCluster()]; !ok {
			p.clusters[c.GetCluster()] = proto.Clone(c).(*capnv1.InfraCluster)
		}
	}
	for _, im := range machines {
		c, name, state := im.GetCluster(), im.GetMachine(), im.GetStateValue()
		if state != sdk.StateCreating && state != sdk.StateRunning && state != sdk.StateStopped {
			continue
		}
		if _, ok := p.machines[key(c, name)]; ok {
			continue
		}
		m := &machine{im: clone(im), version: versionOf(im.GetMessage()), gen: 1}
		m.im.Provider = Name
		if u := im.GetUpdated().AsTime(); u.After(p.stamped) {
			p.stamped = u
		}
		p.machines[key(c, name)] = m
		for _, a := range im.GetAddresses() {
			if a.GetType() == "InternalIP" {
				p.lastIP[c] = max(p.lastIP[c], ipIndex(a.GetAddress()))
			}
		}
		switch state {
		case sdk.StateCreating:
			p.push(entry{at: now.Add(p.bootDelay(c, name)), key: key(c, name), gen: m.gen, kind: evBoot})
		case sdk.StateRunning:
			p.push(entry{at: now.Add(spread(p.opts.HeartbeatEvery, p.opts.Seed, "phase", c, name)), key: key(c, name), gen: m.gen, kind: evBeat})
			p.scheduleVanish(m, now)
		}
	}
	return nil
}

// OrphanMachine lets go of a machine handed to another deployment: it
// leaves this simulation (no more heartbeats from here) without being
// deleted — its twin lives on in the sim that adopts it. Letting go of
// a machine it does not have succeeds.
func (p *Provider) OrphanMachine(_ context.Context, cluster, machine string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.machines, key(cluster, machine))
	return nil
}

// OrphanCluster lets go of a cluster's simulated infrastructure.
func (p *Provider) OrphanCluster(_ context.Context, cluster string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.clusters, cluster)
	return nil
}
