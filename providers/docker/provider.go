package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/docker/engine"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// Name is the provider's name: it consumes capn.provider.docker.> and owns
// infra.docker.* in observed KV.
const Name = "docker"

// Provider runs machines as containers of the capn-node image. The daemon
// is its only memory: Describe and List inspect containers by name and
// label every time, so a restarted provider has its machines back at
// once. Methods are safe for concurrent use; a cluster's network and
// address plan are changed under that cluster's lock.
type Provider struct {
	opts  Options
	api   *engine.Client
	names names
	now   func() time.Time
	// natsURL is what machines' capn-node is told (through the relay
	// unless ContainerNATSURL).
	natsURL string

	clusterLocks sync.Map // cluster -> *sync.Mutex

	// selfID is the container this provider runs in ("" on the daemon's
	// host), once selfKnown (see self).
	selfMu    sync.Mutex
	selfID    string
	selfKnown bool

	envMu    sync.Mutex
	reporter sdk.Reporter
	log      zerolog.Logger
	secrets  *store.Bucket[*capnv1.ClusterSecretsStatus]
}

var (
	_ sdk.Provider        = (*Provider)(nil)
	_ sdk.PowerController = (*Provider)(nil)
	_ sdk.Runner          = (*Provider)(nil)
)

// New returns a docker provider; natsURL is capn's NATS URL as the
// provider reaches it (what the relay forwards to, and what machines are
// told unless ContainerNATSURL). It does not reach the daemon: see
// Preflight.
func New(opts Options, natsURL string) (*Provider, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	opts = opts.withDefaults()
	api, err := engine.New(opts.Host)
	if err != nil {
		return nil, err
	}
	api.Timeout = opts.APITimeout
	if opts.ContainerNATSURL != "" {
		natsURL = opts.ContainerNATSURL
	}
	return &Provider{opts: opts, api: api, names: names{opts.Deployment}, now: time.Now, natsURL: natsURL, log: zerolog.Nop()}, nil
}

// Name is "docker".
func (p *Provider) Name() string { return Name }

// Capabilities: stop-start and reboot.
func (p *Provider) Capabilities() []string {
	return []string{sdk.CapabilityStopStart, sdk.CapabilityReboot}
}

// lockCluster serialises changes to one cluster's network and addresses.
func (p *Provider) lockCluster(cluster string) func() {
	m, _ := p.clusterLocks.LoadOrStore(cluster, new(sync.Mutex))
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// CreateMachine creates and starts the machine's container on its
// cluster's network (made on demand) with a static address of its own; an
// existing container is returned as it is, and started if it is not
// running. The request must carry the bootstrap checksum: the node
// fetches its own data with it.
func (p *Provider) CreateMachine(ctx context.Context, req *capnv1.CreateMachine) (*capnv1.InfraMachine, error) {
	c, m := req.GetCluster(), req.GetMachine()
	name := p.names.container(c, m)
	ctr, err := p.api.ContainerInspect(ctx, name)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		if req.GetBootstrapChecksum() == "" {
			return nil, sdk.Permanent(errors.New("docker: the create carries no bootstrap checksum; the machine could not fetch its bootstrap data"))
		}
		if err := p.createContainer(ctx, req); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	case !p.names.ours(ctr.Config.Labels, c, m, RoleMachine):
		return nil, sdk.Permanent(fmt.Errorf("docker: container %s exists but is not this deployment's machine %s/%s", name, c, m))
	}
	if ctr == nil || ctr.State.Status == "created" {
		// Never started (just made, or made by a provider that stopped
		// before it started it): its NATS files go in first.
		if err := p.copyNodeFiles(ctx, name); err != nil {
			return nil, err
		}
	}
	if err := p.api.ContainerStart(ctx, name); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return p.Describe(ctx, c, m)
}

// nodeFile is a file capn-node needs to reach NATS: a local file of this
// provider, copied into the machine's container at path.
type nodeFile struct {
	flag, src, path string
	mode            os.FileMode
}

// nodeFiles are the NATS files configured for machines.
func (p *Provider) nodeFiles() []nodeFile {
	var out []nodeFile
	for _, f := range []nodeFile{
		{"nats-creds", p.opts.NodeNATSCreds, CredsMount, 0o600},
		{"nats-nkey", p.opts.NodeNATSNKey, NKeyMount, 0o600},
		{"nats-tls-ca", p.opts.NodeNATSTLSCA, TLSCAMount, 0o644},
		{"nats-tls-cert", p.opts.NodeNATSTLSCert, TLSCertMount, 0o644},
		{"nats-tls-key", p.opts.NodeNATSTLSKey, TLSKeyMount, 0o600},
	} {
		if f.src != "" {
			out = append(out, f)
		}
	}
	return out
}

// copyNodeFiles copies the machines' NATS files into a container that has
// not started. They are read from this provider's own file system (under
// docker-compose, its container's mounts), so no path on the daemon's
// host matters; a file that cannot be read fails the create for good.
func (p *Provider) copyNodeFiles(ctx context.Context, container string) error {
	for _, f := range p.nodeFiles() {
		b, err := os.ReadFile(f.src)
		if err != nil {
			return sdk.Permanent(fmt.Errorf("docker: --docker-%s: %w", "node-"+f.flag, err))
		}
		if err := p.api.WriteFile(ctx, container, f.path, b, f.mode); err != nil {
			return fmt.Errorf("docker: copy %s into %s: %w", f.src, container, err)
		}
	}
	return nil
}

func (p *Provider) createContainer(ctx context.Context, req *capnv1.CreateMachine) error {
	c, m := req.GetCluster(), req.GetMachine()
	unlock := p.lockCluster(c)
	defer unlock()
	n, err := p.ensureNetwork(ctx, c)
	if err != nil {
		return err
	}
	addr, err := p.allocateAddress(ctx, c, n)
	if err != nil {
		return err
	}
	labels := p.names.labels(c, m, RoleMachine)
	labels[LabelAddress] = addr
	if fd := req.GetTemplate().GetFailureDomain(); fd != "" {
		labels[LabelFailureDomain] = fd
	}
	for k, v := range req.GetLabels() {
		if _, taken := labels[k]; !taken {
			labels[k] = v
		}
	}
	cmd := []string{"agent", "--cluster=" + c, "--machine=" + m, "--data-dir=" + NodeDataDir,
		"--version=" + req.GetVersion(), "--bootstrap-checksum=" + req.GetBootstrapChecksum(),
		"--nats-url=" + p.natsURL, "--heartbeat-every=" + p.opts.HeartbeatEvery.String(),
		"--health-addr=" + net.JoinHostPort("", HealthPort)}
	var binds []string
	if p.opts.ContainerNATSURL == "" {
		cmd = append(cmd, "--nats-socket="+RelayMount+"/"+RelaySocket)
		binds = append(binds, p.relayDir()+":"+RelayMount+":ro")
	}
	for _, f := range p.nodeFiles() {
		cmd = append(cmd, "--"+f.flag+"="+f.path)
	}
	if p.opts.NodeNATSInboxPrefix != "" {
		cmd = append(cmd, "--nats-inbox-prefix="+p.opts.NodeNATSInboxPrefix)
	}
	if pin := p.caPin(ctx, c); pin != "" {
		cmd = append(cmd, "--ca-cert-hash="+pin)
	}
	stop := int(p.opts.StopTimeout / time.Second)
	cfg := &engine.ContainerConfig{
		// The bootstrap credential is the machine's user data: in its
		// environment, never its command line (docs/providers.md).
		Image: p.opts.Image, Hostname: m, Cmd: cmd, Env: credentialEnv(req), Labels: labels, StopTimeout: &stop,
		HostConfig: engine.HostConfig{Binds: binds, NetworkMode: p.names.network(c), RestartPolicy: engine.RestartPolicy{Name: "no"}},
		NetworkingConfig: &engine.NetworkingConfig{EndpointsConfig: map[string]*engine.EndpointSettings{
			p.names.network(c): {IPAMConfig: &engine.EndpointIPAM{IPv4Address: addr}, Aliases: []string{m}},
		}},
	}
	p.log.Info().Str("cluster", c).Str("machine", m).Str("address", addr).Msg("creating the machine's container")
	if _, err := p.api.ContainerCreate(ctx, p.names.container(c, m), cfg); err != nil {
		if errors.Is(err, engine.ErrNotFound) {
			return sdk.Permanent(fmt.Errorf("docker: image %s not found: build it with `%s` (deploy/images/capn-node.Dockerfile): %w", p.opts.Image, ImageTarget, err))
		}
		if errors.Is(err, engine.ErrConflict) {
			return nil // made meanwhile: the caller starts it
		}
		return err
	}
	return nil
}

func credentialEnv(req *capnv1.CreateMachine) []string {
	if req.GetBootstrapCredential() == "" {
		return []string{}
	}
	return []string{"CAPN_NODE_BOOTSTRAP_CREDENTIAL=" + req.GetBootstrapCredential()}
}

// RunsNodeAgents implements sdk.NodeAgentProvider: every machine runs
// capn-node, which fetches its bootstrap data with the credential the SDK
// puts in CreateMachine.
func (p *Provider) RunsNodeAgents() {}

// DeleteMachine removes the machine's container (killing it) and, once
// nothing of the cluster is left, its network. A missing machine is fine.
func (p *Provider) DeleteMachine(ctx context.Context, cluster, machine string) error {
	name := p.names.container(cluster, machine)
	ctr, err := p.api.ContainerInspect(ctx, name)
	switch {
	case errors.Is(err, engine.ErrNotFound):
	case err != nil:
		return err
	case !p.names.ours(ctr.Config.Labels, cluster, machine, RoleMachine):
		return sdk.Permanent(fmt.Errorf("docker: container %s is not this deployment's machine; not removing it", name))
	default:
		p.log.Info().Str("cluster", cluster).Str("machine", machine).Msg("removing the machine's container")
		if err := p.api.ContainerRemove(ctx, ctr.ID, true); err != nil && !errors.Is(err, engine.ErrNotFound) {
			return err
		}
	}
	unlock := p.lockCluster(cluster)
	defer unlock()
	return p.tidyNetwork(ctx, cluster)
}

// Describe inspects the machine's container: running → Running, created →
// Creating, exited, dead or paused → Stopped; none (or being removed) →
// sdk.ErrNotFound.
func (p *Provider) Describe(ctx context.Context, cluster, machine string) (*capnv1.InfraMachine, error) {
	ctr, err := p.api.ContainerInspect(ctx, p.names.container(cluster, machine))
	if errors.Is(err, engine.ErrNotFound) {
		return nil, sdk.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if !p.names.ours(ctr.Config.Labels, cluster, machine, RoleMachine) {
		return nil, sdk.ErrNotFound
	}
	return p.describe(ctr)
}

func (p *Provider) describe(ctr *engine.Container) (*capnv1.InfraMachine, error) {
	l := ctr.Config.Labels
	im := &capnv1.InfraMachine{
		Provider: Name, Cluster: l[LabelCluster], Machine: l[LabelMachine], ProviderId: ProviderID(ctr.ID),
		Addresses: []*capnv1.Address{
			{Type: "InternalIP", Address: l[LabelAddress]},
			{Type: "Hostname", Address: l[LabelMachine]},
		},
		FailureDomain: l[LabelFailureDomain],
		Updated:       timestamppb.New(latest(ctr.Created, ctr.State.StartedAt, ctr.State.FinishedAt)),
	}
	switch ctr.State.Status {
	case "running", "restarting":
		im.SetStateValue(sdk.StateRunning)
		im.Message = fmt.Sprintf("container %s on %s (capn-node; no kubelet runs)", trimName(ctr.Name), l[LabelAddress])
	case "created":
		im.State, im.Message = sdk.StateCreating.Wire(), "container created, not started"
	case "exited", "dead", "paused":
		im.SetStateValue(sdk.StateStopped)
		im.Message = fmt.Sprintf("container %s %s (exit code %d); its filesystem is kept", trimName(ctr.Name), ctr.State.Status, ctr.State.ExitCode)
	default: // removing
		return nil, sdk.ErrNotFound
	}
	return im, nil
}

// List returns every machine container of this deployment.
func (p *Provider) List(ctx context.Context) ([]*capnv1.InfraMachine, error) {
	list, err := p.api.ContainerList(ctx, p.names.labels("", "", RoleMachine))
	if err != nil {
		return nil, err
	}
	out := make([]*capnv1.InfraMachine, 0, len(list))
	for _, s := range list {
		ctr, err := p.api.ContainerInspect(ctx, s.ID)
		if errors.Is(err, engine.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		im, err := p.describe(ctr)
		if errors.Is(err, sdk.ErrNotFound) {
			continue
		}
		out = append(out, im)
	}
	return out, nil
}

// caPin is the cluster CA hash from observed secrets.<cluster> (public,
// no key material), or "".
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

func (p *Provider) relayDir() string { return filepath.Join(p.opts.StateDir, "relay") }

func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}
