package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/process/realnode"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/nodecapacity"
)

// Name is the provider's name: it consumes capn.provider.process.> and
// owns infra.process.* in observed KV.
const Name = "process"

// Provider runs machines as capn-node processes on this host. Its state
// directory is its only memory: Describe and List read it and /proc every
// time, so a restarted provider has its machines back at once. Methods
// are safe for concurrent use; the SDK serialises those of one machine.
type Provider struct {
	opts Options
	dirs layout
	now  func() time.Time

	// mu guards allocation (addresses, ports) and directory scans against
	// concurrent creates.
	mu sync.Mutex

	childMu  sync.Mutex
	children map[string]*child // by pid file: processes this provider started and reaps

	envMu    sync.Mutex
	reporter sdk.Reporter // set while Run runs
	log      zerolog.Logger
	secrets  *store.Bucket[*capnv1.ClusterSecretsStatus] // optional: the CA pin

	kube kubeBins // the versions of the --kube-bin directories

	real *realNodes // node mode (Options.RealNodes); nil otherwise
}

// child is a process this provider started: it reaps it, and knows at once
// when it exits.
type child struct {
	ref    procRef
	exited chan struct{}
}

var (
	_ sdk.Provider        = (*Provider)(nil)
	_ sdk.PowerController = (*Provider)(nil)
	_ sdk.Runner          = (*Provider)(nil)
	_ sdk.Adopter         = (*Provider)(nil)

	_ sdk.KubernetesVersioner = (*Provider)(nil)
)

// New returns a process provider with opts.
func New(opts Options) (*Provider, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("process: %w", err)
	}
	opts = opts.withDefaults()
	if err := os.MkdirAll(opts.StateDir, stateDirMode); err != nil {
		return nil, fmt.Errorf("process: state dir: %w", err)
	}
	p := &Provider{opts: opts, dirs: layout{opts.StateDir}, now: time.Now, children: map[string]*child{}, log: zerolog.Nop()}
	if opts.RealNodes {
		if err := p.initRealNodes(); err != nil {
			return nil, fmt.Errorf("process: real nodes: %w", err)
		}
	}
	return p, nil
}

// BootstrapKubeadm is the kubeadm bootstrap provider's name: the only
// bootstrap data real nodes run.
const BootstrapKubeadm = "kubeadm"

// Name is "process".
func (p *Provider) Name() string { return Name }

// Capabilities: stop-start and reboot, and real-kubernetes while KubeBin
// holds a kube-apiserver (read at every announcement, so binaries built
// after the start count). In node mode no reboot: Reboot restarts a
// machine's capn-node agent only, while the node's kubelet, containerd
// and containers (node-problem-detector's among them) run on, so it cures
// nothing a node reboot would; the remediator then replaces the machine.
func (p *Provider) Capabilities() []string {
	caps := []string{sdk.CapabilityStopStart}
	if !p.realNodesOn() {
		caps = append(caps, sdk.CapabilityReboot)
	}
	if p.runsKubernetes() || p.realNodesOn() {
		caps = append(caps, sdk.CapabilityRealKubernetes)
	}
	return caps
}

// runsKubernetes reports whether a KubeBin directory holds an executable
// kube-apiserver.
func (p *Provider) runsKubernetes() bool {
	for _, d := range SplitKubeBin(p.opts.KubeBin) {
		fi, err := os.Stat(filepath.Join(d, "kube-apiserver"))
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return true
		}
	}
	return false
}

// KubeBins are the KubeBin directories whose kube-apiserver answers, with
// their versions, oldest first (read again when a binary changes).
func (p *Provider) KubeBins(ctx context.Context) []KubeBin {
	return p.kube.list(ctx, SplitKubeBin(p.opts.KubeBin))
}

// KubernetesVersions implements sdk.KubernetesVersioner: the versions of
// KubeBins, announced with the provider.
func (p *Provider) KubernetesVersions() []string {
	var out []string
	if p.realNodesOn() {
		// Real nodes run the stack's kubelet and kubeadm.
		if v, err := kubeletVersion(p.real.stack); err == nil {
			out = append(out, v)
		}
		return out
	}
	for _, b := range p.KubeBins(context.Background()) {
		if !slices.Contains(out, b.Version) {
			out = append(out, b.Version)
		}
	}
	return out
}

// kubeDir is the KubeBin directory of the machine's version; "" when the
// provider runs no Kubernetes, or for a machine that is not kube-local
// when no directory has its version (its node runs no Kubernetes
// anyway). A kube-local machine of a version not built gets
// *MissingVersionError.
func (p *Provider) kubeDir(ctx context.Context, rec *machineRecord) (string, error) {
	if p.opts.KubeBin == "" {
		return "", nil
	}
	dir, err := p.kube.forVersion(ctx, SplitKubeBin(p.opts.KubeBin), rec.Version)
	if err != nil && rec.Bootstrap != BootstrapKubeLocal {
		return "", nil
	}
	return dir, err
}

// ProviderID is the provider id of a process machine: process://<cluster>/<machine>.
func ProviderID(cluster, machine string) string { return "process://" + cluster + "/" + machine }

// CreateMachine makes the machine's directory and identity (provider id,
// a 127.a.b.x address of its own) and starts its capn-node; an existing
// machine is returned as it is (its node restarted if it is neither
// running nor stopped). The request must carry the bootstrap checksum: the
// node fetches its own data with it.
func (p *Provider) CreateMachine(ctx context.Context, req *capnv1.CreateMachine) (*capnv1.InfraMachine, error) {
	c, m := req.GetCluster(), req.GetMachine()
	rec, err := p.record(c, m)
	switch {
	case errors.Is(err, sdk.ErrNotFound):
		if req.GetBootstrapChecksum() == "" {
			return nil, sdk.Permanent(errors.New("process: the create carries no bootstrap checksum; the machine could not fetch its bootstrap data"))
		}
		// A kube-local machine runs the binaries of its own version:
		// refused before anything is made when they are not built; and
		// its Node's capacity is the template's (nodecapacity).
		_, capErr := nodecapacity.FromParameters(req.GetTemplate().GetParameters())
		if p.realNodesOn() && req.GetBootstrapProvider() != BootstrapKubeadm && capErr == nil {
			capErr = fmt.Errorf("process: real nodes run kubeadm bootstrap data; this machine's bootstrap provider is %q", req.GetBootstrapProvider())
		}
		if _, err := p.kubeDir(ctx, &machineRecord{Version: req.GetVersion(), Bootstrap: req.GetBootstrapProvider()}); err != nil || capErr != nil {
			if err == nil {
				err = capErr
			}
			p.log.Warn().Str("cluster", c).Str("machine", m).Str("version", req.GetVersion()).Err(err).Msg("machine refused")
			im := &capnv1.InfraMachine{Provider: Name, Cluster: c, Machine: m, Message: err.Error(), Updated: timestamppb.New(p.now())}
			im.SetStateValue(sdk.StateFailed)
			return im, nil
		}
		if rec, err = p.newRecord(ctx, req); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	}
	if cred := req.GetBootstrapCredential(); cred != "" && rec.Checksum == req.GetBootstrapChecksum() {
		// The machine's user data: its node reads it from a file of its
		// own (0600), never from its command line.
		if err := writeAtomic(p.credentialPath(c, m), []byte(cred+"\n")); err != nil {
			return nil, err
		}
	}
	if exists(p.stoppedPath(c, m)) {
		return p.Describe(ctx, c, m)
	}
	if _, ok := p.running(rec); !ok {
		if err := p.startNode(ctx, rec); err != nil {
			return nil, err
		}
	}
	return p.Describe(ctx, c, m)
}

// newRecord allocates the machine's identity and writes machine.json.
func (p *Provider) newRecord(ctx context.Context, req *capnv1.CreateMachine) (*machineRecord, error) {
	var lan *realnode.LAN
	if p.realNodesOn() {
		l, err := p.ensureLAN()
		if err != nil {
			return nil, err
		}
		lan = l
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var addr string
	var index int
	var err error
	if lan != nil {
		index, addr, err = p.allocateNode(lan)
	} else {
		addr, err = p.allocateAddress()
	}
	if err != nil {
		return nil, err
	}
	now := p.now().UTC()
	rec := &machineRecord{
		Cluster: req.GetCluster(), Machine: req.GetMachine(), ProviderID: ProviderID(req.GetCluster(), req.GetMachine()),
		Role: req.GetRole(), Address: addr, Version: req.GetVersion(), Bootstrap: req.GetBootstrapProvider(), Checksum: req.GetBootstrapChecksum(),
		CACertHash: p.caPin(ctx, req.GetCluster()), Failure: req.GetTemplate().GetFailureDomain(),
		RealNode: index, Created: now, Changed: now,
	}
	if capacity, err := nodecapacity.FromParameters(req.GetTemplate().GetParameters()); err == nil {
		rec.Capacity = capacity.String()
	}
	if err := os.MkdirAll(p.dirs.nodeDir(rec.Cluster, rec.Machine), stateDirMode); err != nil {
		return nil, err
	}
	if err := writeJSON(p.machineJSON(rec.Cluster, rec.Machine), rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// DeleteMachine stops the machine's node (SIGTERM, then SIGKILL after
// StopTimeout) and removes its directory, and the cluster's directory once
// nothing of the cluster is left. A missing machine is fine.
func (p *Provider) DeleteMachine(_ context.Context, cluster, machine string) error {
	rec, err := p.record(cluster, machine)
	if errors.Is(err, sdk.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := p.stopNode(rec); err != nil {
		return err
	}
	if p.realNodesOn() {
		// Everything of the node: its processes, mounts, cgroups,
		// namespace, routes and directory.
		if err := p.removeRealNode(rec); err != nil {
			return fmt.Errorf("remove real node of %s/%s: %w", cluster, machine, err)
		}
	}
	if err := os.RemoveAll(p.dirs.machine(cluster, machine)); err != nil {
		return fmt.Errorf("remove machine dir: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tidyCluster(cluster)
	if p.realNodesOn() {
		if err := p.tidyLAN(); err != nil {
			return fmt.Errorf("remove real nodes' switch: %w", err)
		}
	}
	return nil
}

// Describe reads the machine back: Running while its capn-node runs,
// Stopped while stopped by capn, and sdk.ErrNotFound when it has no
// directory or its process is gone without a stop (drift: Gone).
func (p *Provider) Describe(_ context.Context, cluster, machine string) (*capnv1.InfraMachine, error) {
	rec, err := p.record(cluster, machine)
	if err != nil {
		return nil, err
	}
	return p.describe(rec)
}

func (p *Provider) describe(rec *machineRecord) (*capnv1.InfraMachine, error) {
	im := &capnv1.InfraMachine{
		Provider: Name, Cluster: rec.Cluster, Machine: rec.Machine, ProviderId: rec.ProviderID,
		Addresses: []*capnv1.Address{
			{Type: "InternalIP", Address: rec.Address},
			{Type: "Hostname", Address: rec.Machine},
		},
		FailureDomain: rec.Failure,
		Updated:       timestamppb.New(rec.Changed),
		Location:      p.dirs.machine(rec.Cluster, rec.Machine),
	}
	if exists(p.stoppedPath(rec.Cluster, rec.Machine)) {
		im.State, im.Message = sdk.StateStopped.Wire(), "capn-node stopped; its data dir is kept"
		return im, nil
	}
	ref, ok := p.running(rec)
	if !ok {
		return nil, sdk.ErrNotFound
	}
	im.SetStateValue(sdk.StateRunning)
	im.Message = fmt.Sprintf("capn-node pid %d on %s (no kubelet runs)", ref.PID, rec.Address)
	if rec.RealNode != 0 {
		im.Message = fmt.Sprintf("real node %d at %s: containerd, kubelet, capn-node pid %d running its kubeadm bootstrap data", rec.RealNode, rec.Address, ref.PID)
	}
	if args, err := cmdline(ref.PID); err == nil && slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--kube-bin=") }) {
		im.Message = fmt.Sprintf("capn-node pid %d on %s (with --kube-bin: runs the Kubernetes its bootstrap data asks for)", ref.PID, rec.Address)
	}
	return im, nil
}

// List returns every machine whose node runs or that capn stopped.
func (p *Provider) List(context.Context) ([]*capnv1.InfraMachine, error) {
	recs, err := p.records()
	if err != nil {
		return nil, err
	}
	out := make([]*capnv1.InfraMachine, 0, len(recs))
	for _, rec := range recs {
		im, err := p.describe(rec)
		if errors.Is(err, sdk.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, im)
	}
	return out, nil
}

// record reads machine.json, or sdk.ErrNotFound.
func (p *Provider) record(cluster, machine string) (*machineRecord, error) {
	rec := new(machineRecord)
	err := readJSON(p.machineJSON(cluster, machine), rec)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, sdk.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// records reads every machine.json.
func (p *Provider) records() ([]*machineRecord, error) {
	clusters, err := p.dirs.clusterNames()
	if err != nil {
		return nil, err
	}
	var out []*machineRecord
	for _, c := range clusters {
		names, err := p.dirs.machineNames(c)
		if err != nil {
			return nil, err
		}
		for _, m := range names {
			rec, err := p.record(c, m)
			if errors.Is(err, sdk.ErrNotFound) {
				continue // being created or deleted
			}
			if err != nil {
				return nil, err
			}
			out = append(out, rec)
		}
	}
	return out, nil
}

func (p *Provider) machineJSON(c, m string) string { return p.dirs.machine(c, m) + "/" + machineFile }
func (p *Provider) stoppedPath(c, m string) string { return p.dirs.machine(c, m) + "/" + stoppedFile }
func (p *Provider) pidPath(c, m string) string     { return p.dirs.machine(c, m) + "/" + pidFile }
func (p *Provider) credentialPath(c, m string) string {
	return p.dirs.machine(c, m) + "/" + credentialFile
}

// RunsNodeAgents implements sdk.NodeAgentProvider: every machine runs
// capn-node, which fetches its bootstrap data with the credential the SDK
// puts in CreateMachine.
func (p *Provider) RunsNodeAgents() {}

// caPin is the cluster CA hash the bootstrapper publishes in observed
// secrets.<cluster> (no key material), or "" when unknown: the node then
// checks its join material for consistency only.
func (p *Provider) caPin(ctx context.Context, cluster string) string {
	p.envMu.Lock()
	b := p.secrets
	p.envMu.Unlock()
	if b == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, _, err := b.Get(ctx, keys.Secrets(cluster))
	if err != nil {
		return ""
	}
	return st.GetCaCertHash()
}

// StateDir is the directory the provider keeps its clusters and machines in.
func (p *Provider) StateDir() string { return p.opts.StateDir }
