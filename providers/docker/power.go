package docker

import (
	"context"
	"errors"

	"github.com/capn-dev/capn/providers/docker/engine"
	"github.com/capn-dev/capn/providers/sdk"
)

// Stop stops the machine's container (SIGTERM, SIGKILL after StopTimeout);
// its filesystem, name, id and static address are kept. A stopped machine
// is fine.
func (p *Provider) Stop(ctx context.Context, cluster, machine string) error {
	return p.power(ctx, cluster, machine, func(id string) error { return p.api.ContainerStop(ctx, id, p.opts.StopTimeout) })
}

// Start starts the machine's container again, on its static address; its
// node skips the bootstrap it already applied. A running machine is fine.
func (p *Provider) Start(ctx context.Context, cluster, machine string) error {
	return p.power(ctx, cluster, machine, func(id string) error { return p.api.ContainerStart(ctx, id) })
}

// Reboot restarts the machine's container.
func (p *Provider) Reboot(ctx context.Context, cluster, machine string) error {
	return p.power(ctx, cluster, machine, func(id string) error { return p.api.ContainerRestart(ctx, id, p.opts.StopTimeout) })
}

func (p *Provider) power(ctx context.Context, cluster, machine string, do func(id string) error) error {
	ctr, err := p.api.ContainerInspect(ctx, p.names.container(cluster, machine))
	if errors.Is(err, engine.ErrNotFound) {
		return sdk.ErrNotFound
	}
	if err != nil {
		return err
	}
	if !p.names.ours(ctr.Config.Labels, cluster, machine, RoleMachine) {
		return sdk.ErrNotFound
	}
	if err := do(ctr.ID); errors.Is(err, engine.ErrNotFound) {
		return sdk.ErrNotFound
	} else if err != nil {
		return err
	}
	return nil
}
