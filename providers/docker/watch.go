package docker

import (
	"context"
	"path/filepath"
	"time"

	"github.com/capn-dev/capn/providers/docker/engine"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sdk/natsrelay"
)

// Run serves the NATS relay (unless ContainerNATSURL) and follows the
// daemon's container events until ctx ends: a machine container that
// dies, stops, is killed or destroyed — by capn or behind its back — is
// checked at once by the SDK, which reports drift (Gone, Stopped). The
// SDK's periodic List catches what the stream missed (e.g. while the
// daemon was down); the stream is reopened with backoff.
func (p *Provider) Run(ctx context.Context, env sdk.Env) error {
	p.envMu.Lock()
	p.reporter = env.Reporter
	p.envMu.Unlock()
	defer func() {
		p.envMu.Lock()
		p.reporter = nil
		p.envMu.Unlock()
	}()
	relayDone := make(chan error, 1)
	if p.opts.ContainerNATSURL == "" {
		r, err := natsrelay.New(filepath.Join(p.relayDir(), RelaySocket), p.natsURL, p.log)
		if err != nil {
			return err
		}
		go func() { relayDone <- r.Run(ctx) }()
	} else {
		relayDone <- nil
	}
	p.followEvents(ctx)
	return <-relayDone
}

// followEvents streams container events of this deployment, reopening
// the stream with backoff (1s to 30s) until ctx ends.
func (p *Provider) followEvents(ctx context.Context) {
	wait := time.Second
	for ctx.Err() == nil {
		err := p.api.Events(ctx, p.names.labels("", "", ""), func() { wait = time.Second }, p.onEvent)
		if ctx.Err() != nil {
			return
		}
		p.log.Warn().Err(err).Dur("retry_in", wait).Msg("docker event stream broke; the periodic reconcile covers the gap")
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(wait*2, 30*time.Second)
	}
}

// onEvent asks for a drift check of a machine whose container changed.
func (p *Provider) onEvent(e engine.Event) {
	a := e.Actor.Attributes
	if a[LabelRole] != RoleMachine || a[LabelDeployment] != p.opts.Deployment {
		return
	}
	switch e.Action {
	case "die", "stop", "kill", "oom", "destroy", "pause", "start", "restart":
		p.log.Debug().Str("cluster", a[LabelCluster]).Str("machine", a[LabelMachine]).Str("action", e.Action).Msg("container event")
		p.envMu.Lock()
		r := p.reporter
		p.envMu.Unlock()
		if r != nil {
			r.Recheck(a[LabelCluster], a[LabelMachine])
		}
	}
}
