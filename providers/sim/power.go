package sim

import (
	"context"
	"fmt"

	"github.com/capn-dev/capn/providers/sdk"
)

// Stop stops a machine: state Stopped, its node stops reporting; identity
// (provider id, addresses) is kept. Stopping a stopped machine succeeds; a
// Creating one stops before it booted.
func (p *Provider) Stop(_ context.Context, cluster, machine string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.machines[key(cluster, machine)]
	if !ok {
		return sdk.ErrNotFound
	}
	if m.im.GetStateValue() == sdk.StateStopped {
		return nil
	}
	m.gen++ // drops the pending boot or heartbeat
	p.setState(m, sdk.StateStopped)
	return nil
}

// Start starts a stopped machine: state Running at once, and its node
// reports again after the boot delay. Starting a running (or booting)
// machine succeeds and changes nothing.
func (p *Provider) Start(_ context.Context, cluster, machine string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.machines[key(cluster, machine)]
	if !ok {
		return sdk.ErrNotFound
	}
	if m.im.GetStateValue() != sdk.StateStopped {
		return nil
	}
	m.gen++
	p.setState(m, sdk.StateRunning)
	p.push(entry{at: p.now().Add(p.bootDelay(cluster, machine)), key: key(cluster, machine), gen: m.gen, kind: evBeat})
	return nil
}

// Reboot pauses a running machine's node for the boot delay (a short stop
// without a state change), then it reports again. Only a running machine
// can reboot.
func (p *Provider) Reboot(_ context.Context, cluster, machine string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.machines[key(cluster, machine)]
	if !ok {
		return sdk.ErrNotFound
	}
	if m.im.GetStateValue() != sdk.StateRunning {
		return sdk.Permanent(fmt.Errorf("sim: cannot reboot a machine that is %s", m.im.GetState()))
	}
	m.gen++
	p.push(entry{at: p.now().Add(p.bootDelay(cluster, machine)), key: key(cluster, machine), gen: m.gen, kind: evBeat})
	return nil
}
