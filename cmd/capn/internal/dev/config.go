package dev

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	autoscalerprovider "github.com/capn-dev/capn/services/autoscaler-provider"
	"github.com/capn-dev/capn/services/backup"
	"github.com/capn-dev/capn/services/daemon"
)

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
	// KubeBin lists the directories of the Kubernetes binaries, one per
	// version, separated by ':', that the process provider's machines run
	// (those of their version) when their bootstrap data asks (make kube;
	// "": no Kubernetes runs on them).
	KubeBin string
	// RealNodes makes the process provider's machines real nodes
	// (namespaces, containerd, a kubelet, kubeadm; issue 26): root, with
	// NodeStack and NodeImages.
	RealNodes bool
	// NodeStack and NodeImages are the real nodes' stack
	// ("<containerd bin>:<kubelet bin>", make -s nodestack-bin) and
	// images directory (make nodeimages).
	NodeStack, NodeImages string
	// AutoscalerListen is where the autoscaler-provider serves the
	// cluster autoscaler's externalgrpc API (mutual TLS, certificates in
	// <data-dir>/autoscaler), once a cluster asks for autoscaling; "none"
	// runs no autoscaler-provider.
	AutoscalerListen string
	// BackupEvery and BackupKeep schedule the backup service's backups
	// (0: none) and bound how many the data dir's object store keeps.
	BackupEvery time.Duration
	BackupKeep  int
	// Extra are services to run after capn dev's own; no flag sets them:
	// tests add theirs to prove the wiring.
	Extra []daemon.Service
}

// natsListenNone as NATSListen serves only in-process connections.
const natsListenNone = "none"

func DefaultConfig() Config {
	return Config{
		DataDir:           ".capn",
		NATSListen:        "127.0.0.1:4222",
		HTTPAddr:          "127.0.0.1:8081",
		LogLevel:          daemon.DefaultLogLevel,
		LogFormat:         daemon.DefaultLogFormat,
		ShutdownTimeout:   daemon.DefaultShutdownTimeout,
		GatewayAddr:       "127.0.0.1:8080",
		AutoscalerListen:  autoscalerprovider.DefaultListen,
		WriteClientConfig: true,
		Providers:         strings.Join(devProviderNames, ","),
		BackupKeep:        backup.DefaultKeep,
	}
}

func (c *Config) Flags() []daemon.Flag {
	return []daemon.Flag{
		{Name: "data-dir", Env: "CAPN_DATA_DIR", Usage: "`directory` of JetStream's files; reused by the next start", Value: daemon.StringValue(&c.DataDir)},
		{Name: "nats-listen", Env: "CAPN_NATS_LISTEN", Usage: "NATS client `address` for the nats CLI and other programs (host:port), or \"none\"", Value: daemon.StringValue(&c.NATSListen)},
		{Name: "http-addr", Env: "CAPN_HTTP_ADDR", Usage: "`address` of /healthz /readyz /metrics for every service (host:port, or \"off\")", Value: daemon.StringValue(&c.HTTPAddr)},
		{Name: "log-level", Env: "CAPN_LOG_LEVEL", Usage: "log `level`: trace|debug|info|warn|error", Value: daemon.StringValue(&c.LogLevel)},
		{Name: "log-format", Env: "CAPN_LOG_FORMAT", Usage: "log `format`: json|console|auto (console on a terminal)", Value: daemon.StringValue(&c.LogFormat)},
		{Name: "shutdown-timeout", Env: "CAPN_SHUTDOWN_TIMEOUT", Usage: "how long each service may take to `stop`", Value: daemon.DurationValue(&c.ShutdownTimeout)},
		{Name: "gateway-addr", Env: "CAPN_GATEWAY_ADDR", Usage: "`address` of the gateway's HTTP API (host:port)", Value: daemon.StringValue(&c.GatewayAddr)},
		{Name: "write-client-config", Env: "CAPN_WRITE_CLIENT_CONFIG", Usage: "also write the user's default client config (${XDG_CONFIG_HOME:-~/.config}/capn/config.yaml) unless it points at another gateway", Value: daemon.BoolValue(&c.WriteClientConfig)},
		{Name: "providers", Env: "CAPN_PROVIDERS", Usage: "infrastructure `providers` to run, comma-separated: sim always runs; process and docker run when they can (capn dev says why not)", Value: daemon.StringValue(&c.Providers)},
		{Name: "process-node-binary", Env: "CAPN_PROCESS_NODE_BINARY", Usage: "capn-node `path` the process provider's machines run (default: beside this program, else on PATH)", Value: daemon.StringValue(&c.ProcessNodeBinary)},
		{Name: "docker-image", Env: "CAPN_DOCKER_IMAGE", Usage: "the docker provider's machine `image`, built locally by 'make images' (default capn-node:latest)", Value: daemon.StringValue(&c.DockerImage)},
		{Name: "autoscaler-listen", Env: "CAPN_AUTOSCALER_LISTEN", Usage: "`address` of the cluster autoscaler's externalgrpc API (host:port; mutual TLS, certificates in <data-dir>/autoscaler), opened once a cluster asks for autoscaling, or \"none\"", Value: daemon.StringValue(&c.AutoscalerListen)},
		{Name: "backup-every", Env: "CAPN_BACKUP_EVERY", Usage: "take a scheduled backup of the management plane this `often` into the data dir (0: none; capn backup takes one at any time)", Value: daemon.DurationValue(&c.BackupEvery)},
		{Name: "backup-keep", Env: "CAPN_BACKUP_KEEP", Usage: "how many backups to keep (the newest)", Value: daemon.IntValue(&c.BackupKeep)},
		{Name: "real-nodes", Env: "CAPN_REAL_NODES", Usage: "the process provider's machines are real nodes: network and mount namespaces, containerd and a kubelet each, running their kubeadm bootstrap data (root; make nodestack nodeimages)", Value: daemon.BoolValue(&c.RealNodes)},
		{Name: "node-stack", Env: "CAPN_NODESTACK_BIN", Usage: "real nodes' `dirs` \"<containerd/runc/CNI bin>:<kubelet/kubeadm bin>\" (make -s nodestack-bin)", Value: daemon.StringValue(&c.NodeStack)},
		{Name: "node-images", Env: "CAPN_NODEIMAGES", Usage: "real nodes' image `dir` with images.txt (make nodeimages; hack/nodeimages.sh --print-path)", Value: daemon.StringValue(&c.NodeImages)},
		{Name: "kube-bin", Env: "CAPN_KUBE_BIN", Usage: "`dirs` of the Kubernetes binaries, one per version, colon-separated: the process provider's machines run those of their version when their bootstrap data asks ('make kube'; default: none, no Kubernetes)", Value: daemon.StringValue(&c.KubeBin)},
	}
}

// Validate reports every problem at once, in the runtime's words.
func (c Config) Validate() error {
	errs := []error{daemon.Config{
		Name: devName, HTTPAddr: c.HTTPAddr, LogLevel: c.LogLevel, LogFormat: c.LogFormat,
		ShutdownTimeout: c.ShutdownTimeout,
	}.Validate()}
	if c.DataDir == "" {
		errs = append(errs, &daemon.FieldError{Flag: "data-dir", Env: "CAPN_DATA_DIR", Problem: "must not be empty"})
	}
	if c.NATSListen != natsListenNone {
		if _, _, err := splitListen(c.NATSListen); err != nil {
			errs = append(errs, &daemon.FieldError{Flag: "nats-listen", Env: "CAPN_NATS_LISTEN", Value: c.NATSListen,
				Problem: `must be host:port (port 0..65535) or "none": ` + err.Error(), Err: err})
		}
	}
	if _, _, err := splitListen(c.GatewayAddr); err != nil {
		errs = append(errs, &daemon.FieldError{Flag: "gateway-addr", Env: "CAPN_GATEWAY_ADDR", Value: c.GatewayAddr,
			Problem: "must be host:port (port 0..65535): " + err.Error(), Err: err})
	}
	if c.AutoscalerListen != natsListenNone {
		if _, _, err := splitListen(c.AutoscalerListen); err != nil {
			errs = append(errs, &daemon.FieldError{Flag: "autoscaler-listen", Env: "CAPN_AUTOSCALER_LISTEN", Value: c.AutoscalerListen,
				Problem: `must be host:port (port 0..65535) or "none": ` + err.Error(), Err: err})
		}
	}
	for _, dir := range filepath.SplitList(c.KubeBin) {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			errs = append(errs, &daemon.FieldError{Flag: "kube-bin", Env: "CAPN_KUBE_BIN", Value: dir,
				Problem: "must be the directory of the Kubernetes binaries, or several separated by ':' ('make kube'; hack/kube.sh --print-path prints the default one, make -s kube-bin all)"})
		}
	}
	errs = append(errs, backup.New(backup.Config{Every: c.BackupEvery, Keep: c.BackupKeep}).Validate())
	seen := map[string]bool{}
	for _, p := range c.providerList() {
		switch {
		case !slices.Contains(devProviderNames, p):
			errs = append(errs, &daemon.FieldError{Flag: "providers", Env: "CAPN_PROVIDERS", Value: c.Providers,
				Problem: fmt.Sprintf("unknown provider %q: want some of %s", p, strings.Join(devProviderNames, ", "))})
		case seen[p]:
			errs = append(errs, &daemon.FieldError{Flag: "providers", Env: "CAPN_PROVIDERS", Value: c.Providers,
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
