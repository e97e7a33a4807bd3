// Command capn-node is the node agent of machines of the process and docker
// providers. It does NOT run a kubelet or kubeadm: it fetches and checks
// the machine's bootstrap data, writes its files under the machine's own
// data dir (<data-dir>/rootfs, never the real /; the commands are listed,
// not run), and reports node heartbeats to capn. Given --kube-bin and
// kube-local bootstrap data it also runs the machine's real Kubernetes
// part (a control plane, or a worker's join), with kwok in place of the
// kubelet (package agent, package kube). With --run-cloud-config (a real
// node: the process provider's node mode, or a host of your own, as root)
// it runs #cloud-config data on the machine instead, as cloud-init would:
// write_files to /, runcmd — kubeadm init or join — while `capn-node
// kubelet` keeps the kubelet running.
//
//	capn-node agent    --cluster=c --machine=m --version=v1.33.4 --data-dir=/abs/dir \
//	                   --bootstrap-checksum=sha256:... [--ca-cert-hash=sha256:...] \
//	                   [--nats-url=nats://127.0.0.1:4222 | --nats-socket=/run/capn-relay/nats.sock] \
//	                   [--nats-creds=f | --nats-nkey=f] [--nats-tls-ca=f --nats-tls-cert=f --nats-tls-key=f] \
//	                   [--nats-inbox-prefix=_INBOX_machine.<c>.<m>] \
//	                   [--heartbeat-every=10s] [--health-addr=127.0.0.5:10248] [--run-cloud-config]
//	capn-node endpoint --cluster=c [--listen=:6443] [--process-state-dir=/abs/dir] [--backend-port=6443] \
//	                   [--check-every=1s] [--log-level=info]
//	capn-node cloud-config --data=/abs/bootstrap-data [--timeout=0]
//	capn-node kubelet  --kubelet=/usr/bin/kubelet [--restart-sec=10s]
//	capn-node image    --ref=registry.k8s.io/etcd:3.7.0-0 --out=etcd.tar \
//	                   --file=usr/local/bin/etcd=/abs/etcd [--dir=tmp=1777] [--entrypoint=w]... [--env=K=V]...
//	capn-node version
//
// Every agent flag also reads its CAPN_NODE_* (or CAPN_NATS_*) variable; the
// NATS flags are the services' (services/daemon), so the rendered env file
// of a deployment's node user configures it.
// SIGINT or SIGTERM stops it cleanly (exit 0); bad flags exit 2. SIGHUP moves
// the agent to the NATS its data dir names (package rehome), its processes
// left running.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/agent"
	"github.com/capn-dev/capn/cmd/capn-node/endpoint"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/services/daemon"
)

const usage = `usage: capn-node <command> [flags]

capn-node is the node agent of process and docker machines. It does NOT run a
kubelet: it fetches and checks the machine's bootstrap data, writes its files
under <data-dir>/rootfs (commands are listed, not run) and reports node
heartbeats to capn. With --kube-bin and kube-local bootstrap data it also runs
the machine's real Kubernetes part (etcd, kube-apiserver, controller-manager,
scheduler on a control plane; a join via CSR on a worker), kwok standing in
for the kubelet. With --run-cloud-config (a real node, as root) it runs
#cloud-config data on the machine as cloud-init would: kubeadm init or join.

commands:
  agent     run the node agent of one machine (see capn-node agent -h)
  endpoint  serve a cluster's control-plane endpoint: a TCP load balancer to
            its control-plane machines' API servers, and while none is up a
            placeholder (HTTP: /healthz 200, anything else 503)
  cloud-config
            run a machine's #cloud-config bootstrap data on this machine
            (write_files, runcmd; kubeadm init or join), as cloud-init would
  kubelet   keep a kubelet running as kubeadm's systemd unit does, on a
            machine without systemd
  image     write an image FROM scratch as an OCI layout archive (for
            ctr images import on a node without a registry)
  version   print the version
`

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.LookupEnv, os.Stderr))
}

func run(ctx context.Context, args []string, lookup func(string) (string, bool), stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return daemon.ExitUsage
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "agent":
		return runAgent(ctx, args[1:], lookup, stderr)
	case "endpoint":
		return runEndpoint(ctx, args[1:], stderr)
	case "image":
		return runImage(args[1:], stderr)
	case "cloud-config":
		return runCloudConfig(ctx, args[1:], stderr)
	case "kubelet":
		return runKubelet(ctx, args[1:], stderr)
	case "version":
		fmt.Fprintln(stderr, version())
		return daemon.ExitOK
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stderr, usage)
		return daemon.ExitOK
	}
	fmt.Fprintf(stderr, "capn-node: unknown command %q\n\n%s", args[0], usage)
	return daemon.ExitUsage
}

func runAgent(ctx context.Context, args []string, lookup func(string) (string, bool), stderr io.Writer) int {
	// SIGHUP asks the agent to move to the NATS its data dir names
	// (package rehome); caught from the start, so it never kills it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var cfg agent.Config
	logCfg := daemon.Config{LogLevel: daemon.DefaultLogLevel, LogFormat: daemon.LogFormatJSON}
	fs := flag.NewFlagSet("capn-node agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := append(cfg.Flags(),
		daemon.Flag{Name: "log-level", Env: "CAPN_LOG_LEVEL", Usage: "`level`: trace, debug, info, warn, error", Value: daemon.StringValue(&logCfg.LogLevel)})
	daemon.BindFlags(fs, flags...)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: capn-node agent [flags]\n\nThe node agent of one machine. No kubelet runs: it bootstraps the machine's\nfiles under <data-dir>/rootfs and sends heartbeats; with --kube-bin and\nkube-local bootstrap data it runs the machine's Kubernetes part (kwok stands\nin for the kubelet).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return daemon.ExitOK
		}
		return daemon.ExitUsage
	}
	if err := errors.Join(daemon.ApplyFlagEnv(fs, lookup, flags...), cfg.Validate()); err != nil {
		daemon.PrintProblems(stderr, "capn-node agent", err)
		return daemon.ExitUsage
	}
	daemon.PreciseTimestamps()
	log := daemon.NewLogger(logCfg, stderr).With().Str("service", "capn-node").Logger()
	a, err := agent.New(cfg, log)
	if err != nil {
		daemon.PrintProblems(stderr, "capn-node agent", err)
		return daemon.ExitUsage
	}
	go func() {
		for {
			select {
			case <-hup:
				a.Rehome()
			case <-ctx.Done():
				return
			}
		}
	}()
	if err := a.Run(ctx); err != nil {
		log.Error().Err(err).Msg("exiting")
		return daemon.ExitFailed
	}
	return daemon.ExitOK
}

func runEndpoint(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("capn-node endpoint", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", ":6443", "`host:port` to listen on")
	cluster := fs.String("cluster", "", "`cluster` whose endpoint this is (required)")
	stateDir := fs.String("process-state-dir", "", "the process provider's state `dir`: the backends are the cluster's control-plane machines recorded there (default: none, placeholder only)")
	backendPort := fs.Int("backend-port", process.DefaultAPIServerPort, "`port` of the backends' API servers on the machines' addresses")
	checkEvery := fs.Duration("check-every", endpoint.DefaultCheckEvery, "`interval` of the backends' refresh and TCP health checks")
	logLevel := fs.String("log-level", daemon.DefaultLogLevel, "`level`: trace, debug, info, warn, error")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: capn-node endpoint [flags]\n\nA cluster's control-plane endpoint: a TCP load balancer to the healthy backends\n(TLS passes through), and a placeholder (HTTP /healthz 200, anything else 503)\nwhile none is up.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return daemon.ExitOK
		}
		return daemon.ExitUsage
	}
	var problems []string
	if *cluster == "" {
		problems = append(problems, "--cluster is required")
	}
	if *stateDir != "" && !filepath.IsAbs(*stateDir) {
		problems = append(problems, fmt.Sprintf("--process-state-dir %q: must be an absolute path", *stateDir))
	}
	if *backendPort < 1 || *backendPort > 65535 {
		problems = append(problems, fmt.Sprintf("--backend-port %d: must be a port (1-65535)", *backendPort))
	}
	if *checkEvery < 10*time.Millisecond {
		problems = append(problems, fmt.Sprintf("--check-every %s: must be at least 10ms", *checkEvery))
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, "capn-node endpoint: "+p)
		}
		return daemon.ExitUsage
	}
	daemon.PreciseTimestamps()
	log := daemon.NewLogger(daemon.Config{LogLevel: *logLevel, LogFormat: daemon.LogFormatJSON}, stderr).With().
		Str("service", "capn-node-endpoint").Str("cluster", *cluster).Logger()
	cfg := endpoint.Config{Cluster: *cluster, CheckEvery: *checkEvery, Log: log}
	if *stateDir != "" {
		port := strconv.Itoa(*backendPort)
		cfg.Backends = func() ([]string, error) {
			addrs, err := process.ControlPlaneAddresses(*stateDir, *cluster)
			for i, a := range addrs {
				addrs[i] = net.JoinHostPort(a, port)
			}
			return addrs, err
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "capn-node endpoint: %v\n", err)
		return daemon.ExitFailed
	}
	backends := "none: placeholder only"
	if cfg.Backends != nil {
		backends = "the control-plane machines in " + *stateDir + " on port " + strconv.Itoa(*backendPort)
	}
	log.Info().Str("listen", ln.Addr().String()).Str("backends", backends).Msg("control-plane endpoint: load balancer, placeholder while no backend is up")
	if err := endpoint.Serve(ctx, ln, cfg); err != nil {
		log.Error().Err(err).Msg("exiting")
		return daemon.ExitFailed
	}
	return daemon.ExitOK
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return "capn-node " + bi.Main.Version
	}
	return "capn-node dev"
}
