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

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/services/daemon"
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

// dev is capn dev from start to stop, step by step; each step undoes
// what it started when it fails, and the deferred calls stop the rest in
// reverse order: the services, the ops endpoint, NATS, the lock.
func dev(ctx context.Context, cfg Config, out io.Writer, lookup func(string) (string, bool)) error {
	dataDir, unlock, err := openDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer unlock()

	base := daemon.NewLogger(daemon.Config{LogLevel: cfg.LogLevel, LogFormat: cfg.LogFormat}, out)
	log := base.With().Str("service", devName).Logger()

	n, err := startAuthenticatedNATS(ctx, cfg, dataDir, log)
	if err != nil {
		return err
	}
	defer n.stop(log)

	// Machines log in as themselves (auth callout): only the URL is theirs.
	provs := devProviders(ctx, cfg, dataDir, daemon.NATSConfig{URL: n.url})
	p, err := planServices(cfg, dataDir, n.auth, runningProviders(provs, log), lookup)
	if err != nil {
		return err
	}
	ops, stopOps, err := serveOps(cfg, n.nc, p.names, log)
	if err != nil {
		return err
	}
	defer stopOps()

	svcCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := startServices(svcCtx, cfg, n, p.services, ops, base)
	printBanner(out, banner{srv: n.srv, natsContext: n.context, opsURL: ops.url, dataDir: dataDir, services: p.names, providers: provs, gateway: p.gw, clientNotes: p.clientNotes,
		kubeBin: cfg.KubeBin, off: offParts(cfg, provs), autoscaler: autoscalerLine(cfg, dataDir)})

	running, failed := waitForEnd(ctx, results, p.names, log)
	fmt.Fprintln(out, "capn dev: stopping")
	cancel()
	if err := stopServices(results, running, cfg.ShutdownTimeout, log); err != nil {
		failed = errors.Join(failed, err)
	}
	return failed
}

// openDataDir makes the data directory, absolute, and locks it for this
// process (lock_unix.go). unlock releases it.
func openDataDir(dir string) (abs string, unlock func(), err error) {
	abs, err = filepath.Abs(dir)
	if err != nil {
		return "", nil, fmt.Errorf("data dir: %w", err)
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return "", nil, fmt.Errorf("create data dir (--data-dir): %w", err)
	}
	unlock, err = lockDataDir(abs)
	if err != nil {
		return "", nil, err
	}
	return abs, unlock, nil
}

// devNATS is capn dev's NATS: the embedded server, its users, and capn
// dev's own connection.
type devNATS struct {
	srv  *server.Server
	auth *devAuth
	// nc is capn dev's own connection: it provisions the topology once
	// (the services skip it) and tells /readyz whether the server answers.
	nc *nats.Conn
	// url is where clients outside this process reach NATS, and context
	// the nats CLI's context file; both "" when NATS is in process only.
	url, context string
}

// startAuthenticatedNATS loads or makes the NATS users (devauth.go),
// starts the embedded server, connects as the admin, provisions the
// topology and writes the nats CLI's context. On an error it stops what
// it started.
func startAuthenticatedNATS(ctx context.Context, cfg Config, dataDir string, log zerolog.Logger) (_ *devNATS, err error) {
	auth, err := newDevAuth(dataDir, devNATSDeployment(cfg))
	if err != nil {
		return nil, err
	}
	srv, err := startNATS(cfg, dataDir, log, auth)
	if err != nil {
		return nil, err
	}
	n := &devNATS{srv: srv, auth: auth}
	defer func() {
		if err != nil {
			n.stop(log)
		}
	}()
	nc, err := daemon.Connect(ctx, auth.conn(devAdminUser), devName, log, nats.InProcessServer(srv))
	if err != nil {
		return nil, err
	}
	n.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	log.Info().Msg("provisioning JetStream streams and buckets")
	if err := events.Provision(ctx, js, devTopology()); err != nil {
		return nil, fmt.Errorf("provision JetStream: %w", err)
	}
	if srv.Addr() != nil {
		n.url = srv.ClientURL()
		if n.context, err = auth.writeContext(dataDir, n.url); err != nil {
			return nil, fmt.Errorf("write the nats CLI context: %w", err)
		}
	}
	return n, nil
}

// stop closes capn dev's connection and shuts NATS down.
func (n *devNATS) stop(log zerolog.Logger) {
	if n.nc != nil {
		n.nc.Close()
	}
	log.Info().Msg("stopping NATS")
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}

// runningProviders are the services of the providers that run; it logs
// why each of the others does not.
func runningProviders(provs []devProvider, log zerolog.Logger) []daemon.Service {
	var svcs []daemon.Service
	for _, p := range provs {
		if p.svc != nil {
			svcs = append(svcs, p.svc)
		} else {
			log.Warn().Str("provider", p.name).Msgf("the %s provider is not running: %s", p.name, p.why)
		}
	}
	return svcs
}

// servicesPlan is what capn dev runs: its services and their names, the
// gateway's listener and token, and the banner's lines on the client
// configs it wrote.
type servicesPlan struct {
	gw          devGateway
	services    []daemon.Service
	names       []string
	clientNotes []string
}

// planServices opens the gateway, lists the services (devServices) with
// the providers that run, checks that their names are unique and writes
// the client configs. On an error it closes the gateway's listener.
func planServices(cfg Config, dataDir string, auth *devAuth, providers []daemon.Service, lookup func(string) (string, bool)) (_ servicesPlan, err error) {
	gw, err := openDevGateway(cfg, dataDir)
	if err != nil {
		return servicesPlan{}, err
	}
	defer func() {
		if err != nil {
			gw.ln.Close()
		}
	}()
	services, err := devServices(cfg, gw, auth, providers)
	if err != nil {
		return servicesPlan{}, err
	}
	names := make([]string, len(services))
	for i, s := range services {
		names[i] = s.Name()
		if slices.Contains(names[:i], names[i]) || names[i] == devName {
			return servicesPlan{}, fmt.Errorf("two services are named %q", names[i])
		}
	}
	clientNotes, err := writeClientConfigs(cfg, dataDir, gw.URL(), gw.token, lookup)
	if err != nil {
		return servicesPlan{}, err
	}
	return servicesPlan{gw: gw, services: services, names: names, clientNotes: clientNotes}, nil
}

// devOps is the one /healthz /readyz /metrics of every service.
type devOps struct {
	reg     *prometheus.Registry
	handler *daemon.OpsHandler
	url     string // for the banner
}

// serveOps makes the ops handler, with every service not ready until it
// starts, and serves it on cfg.HTTPAddr unless that is off. stop shuts
// the server down.
func serveOps(cfg Config, nc *nats.Conn, names []string, log zerolog.Logger) (o devOps, stop func(), err error) {
	o.reg = daemon.NewRegistry()
	o.handler = daemon.NewOpsHandler(o.reg, daemon.Check{Service: devName, Conn: nc})
	for _, name := range names {
		// Not ready until Run takes over the check with the service's own.
		r := daemon.NewReadiness()
		r.SetNotReady("not started")
		o.handler.Set(daemon.Check{Service: name, Ready: r})
	}
	o.url = "off (--http-addr off)"
	if cfg.HTTPAddr == daemon.HTTPOff {
		return o, func() {}, nil
	}
	ln, err := daemon.ListenOps(cfg.HTTPAddr)
	if err != nil {
		return devOps{}, nil, err
	}
	opsSrv := daemon.ServeOps(ln, o.handler, log)
	o.url = opsSrv.URL() + "   (/healthz /readyz /metrics)"
	return o, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = opsSrv.Shutdown(ctx) // best effort: the process is ending
	}, nil
}

// serviceResult is what a service's Run returned.
type serviceResult struct {
	name string
	err  error
}

// startServices runs each service until ctx ends, with its own
// in-process connection as its own NATS user, and sends what each Run
// returns on the channel.
func startServices(ctx context.Context, cfg Config, n *devNATS, services []daemon.Service, o devOps, base zerolog.Logger) <-chan serviceResult {
	results := make(chan serviceResult, len(services))
	for _, svc := range services {
		scfg := daemon.Config{
			Name: svc.Name(), NATS: n.auth.conn(svc.Name()), HTTPAddr: daemon.HTTPOff, LogLevel: cfg.LogLevel, LogFormat: cfg.LogFormat,
			SkipProvision: true, ShutdownTimeout: cfg.ShutdownTimeout,
		}
		go func() {
			results <- serviceResult{svc.Name(), daemon.Run(ctx, scfg, svc,
				daemon.WithInProcess(n.srv), daemon.WithOps(o.handler), daemon.WithRegistry(o.reg), daemon.WithLogger(base))}
		}()
	}
	return results
}

// waitForEnd waits until ctx ends or a service fails, and returns the
// services still running and the failure. A service that stops on its
// own without an error is logged; when none is left, it waits for ctx.
func waitForEnd(ctx context.Context, results <-chan serviceResult, names []string, log zerolog.Logger) (running []string, failed error) {
	running = slices.Clone(names)
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
	return running, failed
}

// stopServices waits for the running services, whose context is
// cancelled, to return, and names those that did not stop in time.
func stopServices(results <-chan serviceResult, running []string, timeout time.Duration, log zerolog.Logger) error {
	// Run bounds each service's stop by timeout; a little more lets it
	// drain and say so itself.
	deadline := time.NewTimer(timeout + 2*time.Second)
	defer deadline.Stop()
	var stuck []string
	for len(running) > 0 {
		select {
		case r := <-results:
			running = slices.DeleteFunc(running, func(n string) bool { return n == r.name })
			if errors.Is(r.err, daemon.ErrShutdownTimeout) {
				stuck = append(stuck, r.name)
			} else if r.err != nil {
				log.Error().Err(r.err).Str("failed_service", r.name).Msg("service failed while stopping")
			}
		case <-deadline.C:
			stuck = append(stuck, running...)
			running = nil
		}
	}
	if len(stuck) == 0 {
		return nil
	}
	slices.Sort(stuck)
	return fmt.Errorf("services did not stop within %s: %s", timeout, strings.Join(stuck, ", "))
}
