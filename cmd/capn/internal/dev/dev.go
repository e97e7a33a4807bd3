// Package dev is `capn dev`: an embedded NATS server with JetStream that
// requires authentication (devauth.go), every capn service and the
// gateway in one process, each with its own in-process connection
// (devservices.go), the providers that can run (devproviders.go), the
// files clients read (devclient.go) and the banner. Package cli parses
// its flags (Config.Flags) and calls Run; docs/cli.md is the reference.
package dev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/services/runtime"
)

// devName is capn dev's own name in logs, /readyz and NATS.
const devName = "capn-dev"

// Run runs capn dev until ctx is cancelled or a service fails; it logs
// and prints its banner to out. lookup reads the environment (for the
// user's default client config). It returns nil after a clean stop: every
// service returned, every connection closed, NATS shut down and the data
// directory unlocked.
func Run(ctx context.Context, cfg Config, out io.Writer, lookup func(string) (string, bool)) error {
	if err := dev(ctx, cfg, out, lookup); err != nil {
		return err
	}
	fmt.Fprintln(out, "capn dev: stopped")
	return nil
}

func dev(ctx context.Context, cfg Config, out io.Writer, lookup func(string) (string, bool)) error {
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return fmt.Errorf("create data dir (--data-dir): %w", err)
	}
	unlock, err := lockDataDir(dataDir)
	if err != nil {
		return err
	}
	defer unlock()

	base := runtime.NewLogger(runtime.Config{LogLevel: cfg.LogLevel, LogFormat: cfg.LogFormat}, out)
	log := base.With().Str("service", devName).Logger()

	auth, err := newDevAuth(dataDir, devNATSDeployment(cfg)) // devauth.go
	if err != nil {
		return err
	}
	srv, err := startNATS(cfg, dataDir, log, auth)
	if err != nil {
		return err
	}
	defer func() {
		log.Info().Msg("stopping NATS")
		srv.Shutdown()
		srv.WaitForShutdown()
	}()

	// capn dev's own connection provisions the topology once (the services
	// skip it) and tells /readyz whether the server answers.
	nc, err := runtime.Connect(ctx, auth.conn(devAdminUser), devName, log, nats.InProcessServer(srv))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	log.Info().Msg("provisioning JetStream streams and buckets")
	if err := events.Provision(ctx, js, devTopology()); err != nil {
		return fmt.Errorf("provision JetStream: %w", err)
	}

	natsURL := "" // in process only: nothing outside this process reaches NATS
	natsContext := ""
	if srv.Addr() != nil {
		natsURL = srv.ClientURL()
		if natsContext, err = auth.writeContext(dataDir, natsURL); err != nil {
			return fmt.Errorf("write the nats CLI context: %w", err)
		}
	}
	// Machines log in as themselves (auth callout): only the URL is theirs.
	provs := devProviders(ctx, cfg, dataDir, runtime.NATSConfig{URL: natsURL})
	var provSvcs []runtime.Service
	for _, p := range provs {
		if p.svc != nil {
			provSvcs = append(provSvcs, p.svc)
		} else {
			log.Warn().Str("provider", p.name).Msgf("the %s provider is not running: %s", p.name, p.why)
		}
	}

	gw, err := openDevGateway(cfg, dataDir)
	if err != nil {
		return err
	}
	services, err := devServices(cfg, gw, auth, provSvcs)
	if err != nil {
		gw.ln.Close()
		return err
	}
	names := make([]string, len(services))
	for i, s := range services {
		names[i] = s.Name()
		if slices.Contains(names[:i], names[i]) || names[i] == devName {
			gw.ln.Close()
			return fmt.Errorf("two services are named %q", names[i])
		}
	}
	clientNotes, err := writeClientConfigs(cfg, dataDir, gw.URL(), gw.token, lookup)
	if err != nil {
		gw.ln.Close()
		return err
	}

	reg := runtime.NewRegistry()
	ops := runtime.NewOpsHandler(reg, runtime.Check{Service: devName, Conn: nc})
	for _, name := range names {
		// Not ready until Run takes over the check with the service's own.
		r := runtime.NewReadiness()
		r.SetNotReady("not started")
		ops.Set(runtime.Check{Service: name, Ready: r})
	}
	opsURL := "off (--http-addr off)"
	if cfg.HTTPAddr != runtime.HTTPOff {
		ln, err := runtime.ListenOps(cfg.HTTPAddr)
		if err != nil {
			return err
		}
		opsSrv := runtime.ServeOps(ln, ops, log)
		opsURL = opsSrv.URL() + "   (/healthz /readyz /metrics)"
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = opsSrv.Shutdown(ctx) // best effort: the process is ending
		}()
	}

	svcCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		name string
		err  error
	}
	results := make(chan result, len(services))
	for _, svc := range services {
		scfg := runtime.Config{
			Name: svc.Name(), NATS: auth.conn(svc.Name()), HTTPAddr: runtime.HTTPOff, LogLevel: cfg.LogLevel, LogFormat: cfg.LogFormat,
			SkipProvision: true, ShutdownTimeout: cfg.ShutdownTimeout,
		}
		go func() {
			results <- result{svc.Name(), runtime.Run(svcCtx, scfg, svc,
				runtime.WithInProcess(srv), runtime.WithOps(ops), runtime.WithRegistry(reg), runtime.WithLogger(base))}
		}()
	}
	printBanner(out, banner{srv: srv, natsContext: natsContext, opsURL: opsURL, dataDir: dataDir, services: names, providers: provs, gateway: gw, clientNotes: clientNotes,
		kubeBin: cfg.KubeBin, off: offParts(cfg, provs)})

	running := slices.Clone(names)
	var failed error
	for failed == nil && ctx.Err() == nil && len(running) > 0 {
		select {
		case <-ctx.Done():
		case r := <-results:
			running = slices.DeleteFunc(running, func(n string) bool { return n == r.name })
			if r.err != nil {
				failed = r.err
				log.Error().Err(r.err).Str("failed_service", r.name).Msg("a service failed, stopping capn dev")
			} else {
				log.Warn().Str("stopped_service", r.name).Msg("a service stopped on its own")
			}
		}
	}
	if failed == nil && len(running) == 0 {
		<-ctx.Done()
	}

	fmt.Fprintln(out, "capn dev: stopping")
	cancel()
	// Run bounds each service's stop by ShutdownTimeout; a little more
	// lets it drain and say so itself.
	deadline := time.NewTimer(cfg.ShutdownTimeout + 2*time.Second)
	defer deadline.Stop()
	var stuck []string
	for len(running) > 0 {
		select {
		case r := <-results:
			running = slices.DeleteFunc(running, func(n string) bool { return n == r.name })
			if errors.Is(r.err, runtime.ErrShutdownTimeout) {
				stuck = append(stuck, r.name)
			} else if r.err != nil {
				log.Error().Err(r.err).Str("failed_service", r.name).Msg("service failed while stopping")
			}
		case <-deadline.C:
			stuck = append(stuck, running...)
			running = nil
		}
	}
	if len(stuck) > 0 {
		slices.Sort(stuck)
		err := fmt.Errorf("services did not stop within %s: %s", cfg.ShutdownTimeout, strings.Join(stuck, ", "))
		failed = errors.Join(failed, err)
	}
	return failed
}
