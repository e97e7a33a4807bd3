package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sim"
	"github.com/capn-dev/capn/services/bootstrapper"
	"github.com/capn-dev/capn/services/bootstrapper/seal"
	clusterplanner "github.com/capn-dev/capn/services/cluster-planner"
	machinemanager "github.com/capn-dev/capn/services/machine-manager"
	"github.com/capn-dev/capn/services/runtime"
)

// devServices lists every service capn dev runs, configured from cfg.
// Each issue that adds a service registers it here. capn dev gives each
// its own in-process NATS connection, its logs and metrics labelled
// service=<name>, and its place in /readyz.
func devServices(cfg devConfig) ([]runtime.Service, error) {
	ring, err := devKeyring(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	services := []runtime.Service{
		clusterplanner.New(clusterplanner.Config{}),
		machinemanager.New(machinemanager.Config{}),
		bootstrapper.New(bootstrapper.Config{Keyring: ring}),
		sim.NewService(sim.DefaultOptions(), sdk.Options{}),
	}
	return append(services, extraDevServices...), nil
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

// extraDevServices run after devServices' own; tests add theirs here to
// prove the wiring. It is empty in the binary.
var extraDevServices []runtime.Service
