package process

import (
	"context"
	"time"

	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sdk/natsrelay"
)

// Run watches the machines until ctx ends: every WatchEvery it checks the
// node process of each machine that should run (those this provider
// started are also seen the moment they exit) and asks the SDK to check a
// machine whose process is gone — a crash or a kill -9 is drift, reported
// Gone. It also restarts a cluster endpoint process that died.
func (p *Provider) Run(ctx context.Context, env sdk.Env) error {
	p.envMu.Lock()
	p.reporter = env.Reporter
	p.envMu.Unlock()
	defer func() {
		p.envMu.Lock()
		p.reporter = nil
		p.envMu.Unlock()
	}()
	if p.realNodesOn() {
		// Real nodes' agents reach capn's NATS through the relay.
		r, err := natsrelay.New(p.RelaySocket(), p.opts.NodeNATSURL, p.log)
		if err != nil {
			return err
		}
		relayDone := make(chan error, 1)
		go func() { relayDone <- r.Run(ctx) }()
		defer func() { <-relayDone }()
	}
	t := time.NewTicker(p.opts.WatchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		p.watchOnce()
	}
}

func (p *Provider) watchOnce() {
	recs, err := p.records()
	if err != nil {
		p.log.Warn().Err(err).Msg("cannot read the state dir")
		return
	}
	for _, rec := range recs {
		if exists(p.stoppedPath(rec.Cluster, rec.Machine)) {
			continue
		}
		if _, ok := p.running(rec); !ok {
			p.recheck(rec.Cluster, rec.Machine)
		}
	}
	p.reviveEndpoints()
	if p.realNodesOn() {
		p.routePods()
	}
}
