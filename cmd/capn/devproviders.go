package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/capn-dev/capn/providers/docker"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sim"
	"github.com/capn-dev/capn/services/runtime"
)

// devProviderNames are the infrastructure providers capn dev knows, in the
// order it starts them.
var devProviderNames = []string{sim.Name, process.Name, docker.Name}

// devProvider is one provider capn dev was asked to run: its service, or
// why it does not run.
type devProvider struct {
	name string
	svc  runtime.Service // nil: not running
	why  string          // why not
}

// dockerPreflightTimeout bounds capn dev's check of the Docker daemon, so
// that a stuck daemon delays the start only a little.
const dockerPreflightTimeout = 5 * time.Second

// devProviders builds the providers cfg names. sim always runs. process
// runs when its node agents can reach NATS (natsURL is capn dev's TCP
// listener; "" when it listens in process only) and capn-node is found.
// docker runs when, in addition, the daemon answers and has the machines'
// image (docker.Preflight). Each provider that cannot run says why; capn
// dev logs it and prints it in the banner, and runs on without it.
func devProviders(ctx context.Context, cfg devConfig, dataDir, natsURL string) []devProvider {
	var out []devProvider
	for _, name := range cfg.providerList() {
		p := devProvider{name: name}
		switch name {
		case sim.Name:
			p.svc = sim.NewService(sim.DefaultOptions(), sdk.Options{})
		case process.Name:
			svc := process.NewService(process.Options{
				NodeBinary:  cfg.ProcessNodeBinary,
				StateDir:    filepath.Join(dataDir, "process"),
				NodeNATSURL: natsURL,
				KubeBin:     cfg.KubeBin,
			}, sdk.Options{})
			switch err := svc.Validate(); {
			case natsURL == "":
				p.why = "its node agents (capn-node processes) connect over TCP and NATS is in-process only (--nats-listen none)"
			case err != nil:
				p.why = oneLine(err)
			default:
				p.svc = svc
			}
		case docker.Name:
			svc := docker.NewService(docker.Options{
				Image:       cfg.DockerImage,
				Deployment:  devDeployment(dataDir),
				StateDir:    filepath.Join(dataDir, "docker"),
				NodeNATSURL: natsURL,
			}, sdk.Options{})
			if natsURL == "" {
				p.why = "its machines reach NATS through a relay to a TCP listener and NATS is in-process only (--nats-listen none)"
				break
			}
			if err := svc.Validate(); err != nil {
				p.why = oneLine(err)
				break
			}
			pctx, cancel := context.WithTimeout(ctx, dockerPreflightTimeout)
			err := docker.Preflight(pctx, svc.Docker)
			cancel()
			if err != nil {
				p.why = strings.TrimPrefix(oneLine(err), "docker provider: ")
				break
			}
			p.svc = svc
		}
		out = append(out, p)
	}
	return out
}

// devDeployment names capn dev's containers and networks on the Docker
// daemon after its data directory, so that two capn devs (or a deployment
// and capn dev) sharing a daemon never touch each other's machines.
func devDeployment(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	return "capn-dev-" + hex.EncodeToString(sum[:4])
}

// oneLine is err's message on one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// providerList is cfg.Providers split on commas, blanks dropped.
func (c devConfig) providerList() []string {
	var out []string
	for _, p := range strings.Split(c.Providers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// providersLine is the banner's account of the providers: those running,
// then each one that is not, with why.
func providersLine(provs []devProvider) string {
	var running, lines []string
	for _, p := range provs {
		if p.svc != nil {
			running = append(running, p.name)
		}
	}
	if len(running) == 0 {
		lines = append(lines, "none running")
	} else {
		lines = append(lines, strings.Join(running, ", "))
	}
	for _, p := range provs {
		if p.svc == nil {
			lines = append(lines, fmt.Sprintf("%s not running: %s", p.name, p.why))
		}
	}
	return strings.Join(lines, "\n            ")
}
