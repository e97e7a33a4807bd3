package dev

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/capn-dev/capn/providers/docker"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sim"
	"github.com/capn-dev/capn/services/daemon"
)

// devProviderNames are the infrastructure providers capn dev knows, in the
// order it starts them.
var devProviderNames = []string{sim.Name, process.Name, docker.Name}

// devProvider is one provider capn dev was asked to run: its service, or
// why it does not run and what turns it on.
type devProvider struct {
	name string
	svc  daemon.Service // nil: not running
	why  string         // why not
	fix  string         // the one thing that turns it on ("": nothing capn can suggest)
	// realNodes: the process provider runs real nodes (--real-nodes).
	realNodes bool
}

// Commands the banner gives for an optional part that is off.
const (
	fixNATSListen  = "restart capn dev without --nats-listen none"
	fixNodeBinary  = "make build (it puts capn-node beside capn), or --process-node-binary PATH"
	fixDockerImage = "make images IMAGES=capn-node (with a Docker daemon running)"
	fixRealNodes   = `as root: make kube nodestack nodeimages build, then bin/capn dev --real-nodes --node-stack "$(make -s nodestack-bin)" --node-images "$(hack/nodeimages.sh --print-path)"`
	fixKube        = `make kube, then bin/capn dev --kube-bin "$(hack/kube.sh --print-path)"`
	hostedOffWhy   = "no --kube-bin, so a cluster with controlPlane.type hosted waits (Ready False, BinariesMissing)"
)

// dockerPreflightTimeout bounds capn dev's check of the Docker daemon, so
// that a stuck daemon delays the start only a little.
const dockerPreflightTimeout = 5 * time.Second

// devProviders builds the providers cfg names. sim always runs. process
// runs when its node agents can reach NATS (node.URL is capn dev's TCP
// listener, "" when it listens in process only; node.NKeySeedFile and
// node.InboxPrefix are the node user's) and capn-node is found.
// docker runs when, in addition, the daemon answers and has the machines'
// image (docker.Preflight). Each provider that cannot run says why; capn
// dev logs it and prints it in the banner, and runs on without it.
func devProviders(ctx context.Context, cfg Config, dataDir string, node daemon.NATSConfig) []devProvider {
	natsURL := node.URL
	var out []devProvider
	for _, name := range cfg.providerList() {
		p := devProvider{name: name}
		switch name {
		case sim.Name:
			p.svc = sim.NewService(sim.DefaultOptions(), sdk.Options{})
		case process.Name:
			svc := process.NewService(process.Options{
				NodeBinary:   cfg.ProcessNodeBinary,
				StateDir:     filepath.Join(dataDir, "process"),
				NodeNATSURL:  natsURL,
				NodeNATSNKey: node.NKeySeedFile, NodeNATSInboxPrefix: node.InboxPrefix,
				KubeBin:   cfg.KubeBin,
				RealNodes: cfg.RealNodes, NodeStack: cfg.NodeStack, NodeImages: cfg.NodeImages,
			}, sdk.Options{})
			switch err := svc.Validate(); {
			case runtime.GOOS != "linux":
				p.why = "it needs Linux (/proc), and this is " + runtime.GOOS
			case natsURL == "":
				p.why = "its node agents (capn-node processes) connect over TCP and NATS is in-process only (--nats-listen none)"
				p.fix = fixNATSListen
			case err != nil && cfg.RealNodes && strings.Contains(err.Error(), "real nodes"):
				p.why, p.fix = oneLine(err), fixRealNodes
			case err != nil:
				p.why, p.fix = oneLine(err), fixNodeBinary
			default:
				p.svc, p.realNodes = svc, cfg.RealNodes
			}
		case docker.Name:
			svc := docker.NewService(docker.Options{
				Image:        cfg.DockerImage,
				Deployment:   devDeployment(dataDir),
				StateDir:     filepath.Join(dataDir, "docker"),
				NodeNATSURL:  natsURL,
				NodeNATSNKey: node.NKeySeedFile, NodeNATSInboxPrefix: node.InboxPrefix,
			}, sdk.Options{})
			if natsURL == "" {
				p.why = "its machines reach NATS through a relay to a TCP listener and NATS is in-process only (--nats-listen none)"
				p.fix = fixNATSListen
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
				p.why, p.fix = strings.TrimPrefix(oneLine(err), "docker provider: "), fixDockerImage
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
func (c Config) providerList() []string {
	var out []string
	for _, p := range strings.Split(c.Providers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// offPart is an optional part of capn dev that is not running: what, why,
// and the one command that turns it on.
type offPart struct {
	what, why, fix string
}

// offParts lists what is off: each provider asked for that cannot run,
// and what runs only with --kube-bin (never guessed): Kubernetes on the
// process provider's machines, and hosted control planes.
func offParts(cfg Config, provs []devProvider) []offPart {
	var out []offPart
	for _, p := range provs {
		if p.svc == nil {
			out = append(out, offPart{what: p.name + " provider", why: p.why, fix: p.fix})
		}
	}
	if cfg.KubeBin == "" && !cfg.RealNodes && slices.Contains(cfg.providerList(), process.Name) {
		out = append(out, offPart{what: "Kubernetes on process machines",
			why: "no --kube-bin, so their control planes are placeholders", fix: fixKube})
	}
	if cfg.KubeBin == "" {
		// controlplane-hosted runs, but has no binaries to run.
		out = append(out, offPart{what: "hosted control planes",
			why: hostedOffWhy, fix: fixKube})
	}
	return out
}

// providersLine is the banner's list of the providers running.
func providersLine(provs []devProvider, kubeBin string) string {
	var running []string
	for _, p := range provs {
		if p.svc == nil {
			continue
		}
		if p.name == process.Name && p.realNodes {
			running = append(running, p.name+" (real nodes: containerd, kubelet, kubeadm)")
		} else if p.name == process.Name && kubeBin != "" {
			running = append(running, p.name+" (Kubernetes from "+kubeBin+")")
		} else {
			running = append(running, p.name)
		}
	}
	if len(running) == 0 {
		return "none running"
	}
	return strings.Join(running, ", ")
}

// offLines is the banner's account of offParts: each part with why, and
// under it the command that turns it on.
func offLines(parts []offPart) string {
	if len(parts) == 0 {
		return "nothing: every optional part runs"
	}
	var lines []string
	for _, p := range parts {
		lines = append(lines, p.what+": "+p.why)
		if p.fix != "" {
			lines = append(lines, "  turn on: "+p.fix)
		}
	}
	return strings.Join(lines, "\n            ")
}
