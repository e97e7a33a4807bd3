package process

import (
	"context"
	"os"
)

// Stop stops the machine's capn-node (SIGTERM, then SIGKILL after
// StopTimeout) and keeps its directory, identity and data: the machine is
// Stopped until Start. Stopping a stopped machine succeeds.
func (p *Provider) Stop(_ context.Context, cluster, machine string) error {
	rec, err := p.record(cluster, machine)
	if err != nil {
		return err
	}
	if exists(p.stoppedPath(cluster, machine)) {
		return nil
	}
	// The marker first: the node's exit is then a stop, not drift.
	if err := writeAtomic(p.stoppedPath(cluster, machine), nil); err != nil {
		return err
	}
	if err := p.stopNode(rec); err != nil {
		return err
	}
	return p.touch(rec)
}

// Start starts a stopped machine's capn-node again, on the same address
// and data dir; its node skips the bootstrap it already applied. Starting
// a running machine succeeds.
func (p *Provider) Start(ctx context.Context, cluster, machine string) error {
	rec, err := p.record(cluster, machine)
	if err != nil {
		return err
	}
	if _, ok := p.running(rec); ok && !exists(p.stoppedPath(cluster, machine)) {
		return nil
	}
	if err := p.startNode(ctx, rec); err != nil {
		return err
	}
	if err := os.Remove(p.stoppedPath(cluster, machine)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return p.touch(rec)
}

// Reboot restarts the machine's capn-node (a stopped machine is started).
func (p *Provider) Reboot(ctx context.Context, cluster, machine string) error {
	rec, err := p.record(cluster, machine)
	if err != nil {
		return err
	}
	if !exists(p.stoppedPath(cluster, machine)) {
		if err := writeAtomic(p.stoppedPath(cluster, machine), nil); err != nil {
			return err
		}
		if err := p.stopNode(rec); err != nil {
			return err
		}
	}
	return p.Start(ctx, cluster, machine)
}
