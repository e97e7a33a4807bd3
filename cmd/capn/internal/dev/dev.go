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
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/embedded"
	"github.com/capn-dev/capn/services/runtime"
)

// devName is capn dev's own name in logs, /readyz and NATS.
const devName = "capn-dev"

// Config is capn dev's configuration.
type Config struct {
	// DataDir holds JetStream's files (DataDir/jetstream) and the lock
	// file that keeps a second capn dev out.
	DataDir string
	// NATSListen is where NATS accepts TCP clients (the nats CLI, programs
	// run apart): host:port (port 0 picks one), or "none".
	NATSListen string
	// HTTPAddr serves /healthz /readyz /metrics for every service.
	HTTPAddr  string
	LogLevel  string
	LogFormat string
	// ShutdownTimeout bounds each service's stop.
	ShutdownTimeout time.Duration
	// GatewayAddr is where the gateway's API listens (host:port; port 0
	// picks one).
	GatewayAddr string
	// WriteClientConfig writes the user's default client config too (the
	// one in the data directory is always written).
	WriteClientConfig bool
	// Providers are the infrastructure providers to run, comma-separated
	// (of sim, process, docker). sim always runs; process and docker run
	// when they can, and capn dev says why when they cannot.
	Providers string
	// ProcessNodeBinary is the capn-node the process provider's machines
	// run ("": beside this program, else on PATH).
	ProcessNodeBinary string
	// DockerImage is the docker provider's machine image ("": capn-node:latest).
	DockerImage string
	// KubeBin is the directory of the Kubernetes binaries the process
	// provider's machines run when their bootstrap data asks (make kube;
	// "": no Kubernetes runs on them).
	KubeBin string
	// Extra are services to run after capn dev's own; no flag sets them:
	// tests add theirs to prove the wiring.
	Extra []runtime.Service
}

// natsListenNone as NATSListen serves only in-process connections.
const natsListenNone = "none"

func DefaultConfig() Config {
	return Config{
		DataDir:           ".capn",
		NATSListen:        "127.0.0.1:4222",
		HTTPAddr:          "127.0.0.1:8081",
		LogLevel:          runtime.DefaultLogLevel,
		LogFormat:         runtime.DefaultLogFormat,
		ShutdownTimeout:   runtime.DefaultShutdownTimeout,
		GatewayAddr:       "127.0.0.1:8080",
		WriteClientConfig: true,
		Providers:         strings.Join(devProviderNames, ","),
	}
}

func (c *Config) Flags() []runtime.Flag {
	return []runtime.Flag{
		{Name: "data-dir", Env: "CAPN_DATA_DIR", Usage: "`directory` of JetStream's files; reused by the next start", Value: runtime.StringValue(&c.DataDir)},
		{Name: "nats-listen", Env: "CAPN_NATS_LISTEN", Usage: "NATS client `address` for the nats CLI and other programs (host:port), or \"none\"", Value: runtime.StringValue(&c.NATSListen)},
		{Name: "http-addr", Env: "CAPN_HTTP_ADDR", Usage: "`address` of /healthz /readyz /metrics for every service (host:port, or \"off\")", Value: runtime.StringValue(&c.HTTPAddr)},
		{Name: "log-level", Env: "CAPN_LOG_LEVEL", Usage: "log `level`: trace|debug|info|warn|error", Value: runtime.StringValue(&c.LogLevel)},
		{Name: "log-format", Env: "CAPN_LOG_FORMAT", Usage: "log `format`: json|console|auto (console on a terminal)", Value: runtime.StringValue(&c.LogFormat)},
		{Name: "shutdown-timeout", Env: "CAPN_SHUTDOWN_TIMEOUT", Usage: "how long each service may take to `stop`", Value: runtime.DurationValue(&c.ShutdownTimeout)},
		{Name: "gateway-addr", Env: "CAPN_GATEWAY_ADDR", Usage: "`address` of the gateway's HTTP API (host:port)", Value: runtime.StringValue(&c.GatewayAddr)},
		{Name: "write-client-config", Env: "CAPN_WRITE_CLIENT_CONFIG", Usage: "also write the user's default client config (${XDG_CONFIG_HOME:-~/.config}/capn/config.yaml) unless it points at another gateway", Value: runtime.BoolValue(&c.WriteClientConfig)},
		{Name: "providers", Env: "CAPN_PROVIDERS", Usage: "infrastructure `providers` to run, comma-separated: sim always runs; process and docker run when they can (capn dev says why not)", Value: runtime.StringValue(&c.Providers)},
		{Name: "process-node-binary", Env: "CAPN_PROCESS_NODE_BINARY", Usage: "capn-node `path` the process provider's machines run (default: beside this program, else on PATH)", Value: runtime.StringValue(&c.ProcessNodeBinary)},
		{Name: "docker-image", Env: "CAPN_DOCKER_IMAGE", Usage: "the docker provider's machine `image`, built locally by 'make images' (default capn-node:latest)", Value: runtime.StringValue(&c.DockerImage)},
		{Name: "kube-bin", Env: "CAPN_KUBE_BIN", Usage: "`dir` of the Kubernetes binaries the process provider's machines run when their bootstrap data asks ('make kube'; default: none, no Kubernetes)", Value: runtime.StringValue(&c.KubeBin)},
	}
}

// Validate reports every problem at once, in the runtime's words.
func (c Config) Validate() error {
	errs := []error{runtime.Config{
		Name: devName, HTTPAddr: c.HTTPAddr, LogLevel: c.LogLevel, LogFormat: c.LogFormat,
		ShutdownTimeout: c.ShutdownTimeout,
	}.Validate()}
	if c.DataDir == "" {
		errs = append(errs, &runtime.FieldError{Flag: "data-dir", Env: "CAPN_DATA_DIR", Problem: "must not be empty"})
	}
	if c.NATSListen != natsListenNone {
		if _, _, err := splitListen(c.NATSListen); err != nil {
			errs = append(errs, &runtime.FieldError{Flag: "nats-listen", Env: "CAPN_NATS_LISTEN", Value: c.NATSListen,
				Problem: `must be host:port (port 0..65535) or "none": ` + err.Error(), Err: err})
		}
	}
	if _, _, err := splitListen(c.GatewayAddr); err != nil {
		errs = append(errs, &runtime.FieldError{Flag: "gateway-addr", Env: "CAPN_GATEWAY_ADDR", Value: c.GatewayAddr,
			Problem: "must be host:port (port 0..65535): " + err.Error(), Err: err})
	}
	if c.KubeBin != "" {
		if fi, err := os.Stat(c.KubeBin); err != nil || !fi.IsDir() {
			errs = append(errs, &runtime.FieldError{Flag: "kube-bin", Env: "CAPN_KUBE_BIN", Value: c.KubeBin,
				Problem: "must be the directory of the Kubernetes binaries ('make kube'; hack/kube.sh --print-path prints it)"})
		}
	}
	seen := map[string]bool{}
	for _, p := range c.providerList() {
		switch {
		case !slices.Contains(devProviderNames, p):
			errs = append(errs, &runtime.FieldError{Flag: "providers", Env: "CAPN_PROVIDERS", Value: c.Providers,
				Problem: fmt.Sprintf("unknown provider %q: want some of %s", p, strings.Join(devProviderNames, ", "))})
		case seen[p]:
			errs = append(errs, &runtime.FieldError{Flag: "providers", Env: "CAPN_PROVIDERS", Value: c.Providers,
				Problem: fmt.Sprintf("provider %q is named twice", p)})
		}
		seen[p] = true
	}
	return errors.Join(errs...)
}

func splitListen(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not 0..65535", p)
	}
	return host, port, nil
}

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

// startNATS starts the embedded server with its store under dataDir,
// listening as cfg says.
func startNATS(cfg Config, dataDir string, log zerolog.Logger, auth *devAuth) (*server.Server, error) {
	opts := embedded.Options{StoreDir: filepath.Join(dataDir, "jetstream"), ServerName: devName, Nkeys: auth.nkeys, AuthCallout: auth.callout}
	if cfg.NATSListen == natsListenNone {
		opts.DontListen = true
	} else {
		host, port, err := splitListen(cfg.NATSListen)
		if err != nil {
			return nil, err
		}
		// nats-server fails to listen silently (it waits for readiness
		// until a timeout), so try the address first for a clear error.
		ln, err := net.Listen("tcp", cfg.NATSListen)
		if err != nil {
			return nil, fmt.Errorf("NATS cannot listen on %s (change it with --nats-listen or CAPN_NATS_LISTEN, or \"none\" for in-process only): %w", cfg.NATSListen, err)
		}
		ln.Close()
		if port == 0 {
			port = server.RANDOM_PORT // 0 means 4222 to nats-server
		}
		opts.Host, opts.Port = host, port
	}
	log.Info().Str("store_dir", opts.StoreDir).Msg("starting NATS with JetStream")
	srv, err := embedded.Start(opts)
	if err != nil {
		return nil, err
	}
	return srv, nil
}

// banner is what capn dev tells its user once everything started.
type banner struct {
	srv         *server.Server
	natsContext string // the nats CLI's context file, "" when NATS is in-process only
	opsURL      string
	dataDir     string
	services    []string
	providers   []devProvider
	gateway     devGateway
	clientNotes []string
	kubeBin     string    // --kube-bin, "" for none
	off         []offPart // the optional parts that are off
}

func printBanner(w io.Writer, b banner) {
	natsLine := "in-process only (--nats-listen none)"
	if b.srv.Addr() != nil {
		u := b.srv.ClientURL()
		natsLine = fmt.Sprintf("%s   (authenticated; try: nats --context %s stream ls)", u, b.natsContext)
	}
	svc := strings.Join(b.services, ", ")
	if svc == "" {
		svc = "none yet"
	}
	client := strings.Join(b.clientNotes, "\n            ")
	tokenPath := filepath.Join(b.dataDir, AdminTokenFile)
	fmt.Fprintf(w, `
capn dev is running
  gateway   %s   (try: capn apply -f examples/demo-cluster.yaml --wait)
  dashboard capn dashboard   (opens it logged in by a one-time link)
  token     %s   (admin; the whole token: cat %s)
  client    %s
  NATS      %s
  ops       %s
  data dir  %s
  services  %s
  providers %s
  off       %s
Press Ctrl-C to stop.

`, b.gateway.URL(), shortToken(b.gateway.token), tokenPath, client, natsLine, b.opsURL, b.dataDir, svc,
		providersLine(b.providers, b.kubeBin), offLines(b.off))
}

// shortToken is enough of a token to tell it from another, and too little
// to use: the banner lands in logs people paste into bug reports.
func shortToken(tok string) string {
	const keep = 8
	if len(tok) <= keep {
		return "…"
	}
	return tok[:keep] + "…"
}
