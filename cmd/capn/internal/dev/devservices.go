package dev

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/secrets/autoscalertls"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/addon-manager"
	autoscalerprovider "github.com/capn-dev/capn/services/autoscaler-provider"
	"github.com/capn-dev/capn/services/backup"
	"github.com/capn-dev/capn/services/bootstrapper"
	"github.com/capn-dev/capn/services/cluster-planner"
	controlplaneexternal "github.com/capn-dev/capn/services/controlplane-external"
	controlplanehosted "github.com/capn-dev/capn/services/controlplane-hosted"
	"github.com/capn-dev/capn/services/daemon"
	fleetmanager "github.com/capn-dev/capn/services/fleet-manager"
	"github.com/capn-dev/capn/services/health-watcher"
	"github.com/capn-dev/capn/services/machine-manager"
	"github.com/capn-dev/capn/services/maintenance"
	"github.com/capn-dev/capn/services/remediator"
)

// devGateway is what capn dev opens for its gateway before the services
// start: the listener (so the banner can print the real address and a busy
// port is a clear error) and the admin token.
type devGateway struct {
	ln    net.Listener
	token string
}

// URL is the gateway's base URL.
func (g devGateway) URL() string { return "http://" + g.ln.Addr().String() }

// devServices lists every service capn dev runs, configured from cfg, with
// the providers that can run (devProviders) after the core services.
// Each issue that adds a service registers it here. capn dev gives each
// its own in-process NATS connection, its logs and metrics labelled
// service=<name>, and its place in /readyz.
func devServices(cfg Config, gw devGateway, auth *devAuth, providers []daemon.Service) ([]daemon.Service, error) {
	ring, err := devKeyring(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	hostedDir, err := filepath.Abs(filepath.Join(cfg.DataDir, "hosted"))
	if err != nil {
		return nil, err
	}
	services := []daemon.Service{
		clusterplanner.New(clusterplanner.Config{}),
		machinemanager.New(machinemanager.Config{}),
		// The bootstrapper also logs machines in (the auth callout).
		bootstrapper.New(bootstrapper.Config{Keyring: ring, CalloutIssuerSeedFile: auth.issuerSeedPath()}),
		healthwatcher.New(healthwatcher.Config{Keyring: ring}), // opens kubeconfigs to read real-kubernetes clusters' Nodes
		remediator.New(remediator.Config{}),
		addonmanager.New(addonmanager.Config{Keyring: ring}), // opens kubeconfigs and add-on secrets
		fleetmanager.New(fleetmanager.Config{}),              // rollouts in waves
		// Backups into <data-dir>/jetstream's backups object store (the
		// secrets stay sealed); the key seals workload clusters' etcd
		// snapshots only.
		backup.New(backup.Config{Every: cfg.BackupEvery, Keep: cfg.BackupKeep, Keyring: ring}),
		// Auto-patch and pending upgrades in maintenance windows,
		// hibernation schedules.
		maintenance.New(maintenance.Config{}),
		// Control planes someone else runs (controlPlane.type: external):
		// opens their registered kubeconfigs.
		controlplaneexternal.New(controlplaneexternal.Config{Keyring: ring}),
		// Hosted control planes: etcd and the Kubernetes components as
		// processes under <data-dir>/hosted, from --kube-bin.
		controlplanehosted.New(controlplanehosted.Config{DataDir: hostedDir, KubeBin: cfg.KubeBin}),
	}
	as, err := devAutoscaler(cfg)
	if err != nil {
		return nil, err
	}
	if as != nil {
		services = append(services, as)
	}
	services = append(services, providers...)
	services = append(services,
		gateway.New(gateway.Options{
			Listener: gw.ln,
			Keyring:  ring, // the bootstrapper's: the gateway opens the kubeconfigs it seals
			Tokens:   []gateway.Token{{Name: "admin", Secret: gw.token, Scopes: []api.Scope{api.ScopeAdmin}}},
		}),
	)
	return append(services, cfg.Extra...), nil
}

// devTopology is what capn dev provisions once for every service (they
// skip provisioning): capn's streams and buckets and the gateway's ingest
// stream.
func devTopology() events.Topology {
	t := events.DefaultTopology(1)
	t.Streams = append(t.Streams, gateway.Topology(1).Streams...)
	return t
}

// devKeyring loads the key that seals the secrets bucket from
// <data-dir>/secrets.key, generating it (mode 0600) on first start. The
// CAPN_SECRETS_KEY variable, when set, wins, as for the bootstrapper.
func devKeyring(dataDir string) (*seal.Keyring, error) {
	var key seal.Key
	var err error
	if _, ok := os.LookupEnv(seal.KeyEnv); ok {
		key, err = seal.KeyFromEnv(seal.KeyEnv)
	} else {
		if err := os.MkdirAll(dataDir, 0o750); err != nil {
			return nil, err
		}
		key, _, err = seal.GenerateKeyFile(filepath.Join(dataDir, "secrets.key"))
	}
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return seal.NewKeyring(key)
}

// AutoscalerDir is where capn dev keeps the autoscaler's mutual TLS
// (secrets/autoscalertls): the CA, the server certificate, and
// clients/<cluster>/ with each autoscaled cluster's client certificate and
// --cloud-config.
const AutoscalerDir = "autoscaler"

// devAutoscaler is the autoscaler-provider capn dev runs (nil with
// --autoscaler-listen none): its API listens only once a cluster asks for
// autoscaling, and it writes each such cluster's cloud config.
func devAutoscaler(cfg Config) (daemon.Service, error) {
	if cfg.AutoscalerListen == natsListenNone {
		return nil, nil
	}
	dir := filepath.Join(cfg.DataDir, AutoscalerDir)
	host, _, err := net.SplitHostPort(cfg.AutoscalerListen)
	if err != nil {
		return nil, err
	}
	hosts := []string{"127.0.0.1", "localhost"}
	if host != "" && !slices.Contains(hosts, host) && host != "0.0.0.0" && host != "::" {
		hosts = append(hosts, host)
	}
	if _, err := autoscalertls.Ensure(dir, hosts, time.Now()); err != nil {
		return nil, fmt.Errorf("autoscaler TLS: %w", err)
	}
	return autoscalerprovider.New(autoscalerprovider.Config{
		Listen:  cfg.AutoscalerListen,
		TLSCert: filepath.Join(dir, autoscalertls.ServerCertFile), TLSKey: filepath.Join(dir, autoscalertls.ServerKeyFile),
		TLSClientCA:    filepath.Join(dir, autoscalertls.CACertFile),
		ServeWhenAsked: true, ClientsDir: dir,
	}), nil
}
