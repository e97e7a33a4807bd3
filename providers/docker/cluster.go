package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/capn-dev/capn/providers/docker/engine"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// EndpointMessage says what listens on a docker cluster's endpoint.
const EndpointMessage = "placeholder endpoint container (capn-node endpoint) published on 127.0.0.1: HTTP /healthz answers, nothing else; no Kubernetes API server runs"

// EnsureCluster makes the cluster's network and its endpoint container —
// capn-node endpoint on :6443, published on 127.0.0.1:<a host port chosen
// once, kept in its label> — keeps it running, and returns once it
// serves: through the published port on the daemon's host, through the
// cluster network from a provider in a container (self.go). It is
// idempotent. params are ignored.
func (p *Provider) EnsureCluster(ctx context.Context, cluster string, _ map[string]string) (*capnv1.InfraCluster, error) {
	port, probe, err := p.ensureEndpoint(ctx, cluster)
	if err != nil {
		return nil, err
	}
	if err := waitServing(ctx, probe, 10*time.Second); err != nil {
		return nil, fmt.Errorf("endpoint of %s: %w", cluster, err)
	}
	return &capnv1.InfraCluster{
		Provider: Name, Cluster: cluster, Ready: true, Message: EndpointMessage,
		ControlPlaneEndpoint: &capnv1.Endpoint{Host: "127.0.0.1", Port: int32(port)},
	}, nil
}

// ensureEndpoint makes or starts the endpoint container and returns its
// published port and the address this provider checks it at.
func (p *Provider) ensureEndpoint(ctx context.Context, cluster string) (port int, probe string, err error) {
	unlock := p.lockCluster(cluster)
	defer unlock()
	name := p.names.endpoint(cluster)
	ctr, err := p.api.ContainerInspect(ctx, name)
	if errors.Is(err, engine.ErrNotFound) {
		var n *clusterNetwork
		if n, err = p.ensureNetwork(ctx, cluster); err != nil {
			return 0, "", err
		}
		if err = p.createEndpoint(ctx, cluster, n); err != nil {
			return 0, "", err
		}
		ctr, err = p.api.ContainerInspect(ctx, name)
	}
	if err != nil {
		return 0, "", err
	}
	if !p.names.ours(ctr.Config.Labels, cluster, "", RoleEndpoint) {
		return 0, "", fmt.Errorf("docker: container %s exists but is not this deployment's endpoint of %s", name, cluster)
	}
	port, err = strconv.Atoi(ctr.Config.Labels[LabelEndpointPort])
	if err != nil {
		return 0, "", fmt.Errorf("docker: endpoint %s has no port label: %w", name, err)
	}
	if !ctr.State.Running {
		if err := p.api.ContainerStart(ctx, ctr.ID); err != nil {
			if ctr.State.StartedAt.IsZero() && strings.Contains(err.Error(), "already allocated") {
				// The port was free where this provider chose it (its own
				// network namespace, in a container) but not on the host:
				// the endpoint never served, so the next try makes it again
				// with another port.
				p.log.Warn().Str("cluster", cluster).Int("port", port).Msg("the endpoint's port is taken on the host: choosing another")
				if rerr := p.api.ContainerRemove(ctx, ctr.ID, true); rerr != nil && !errors.Is(rerr, engine.ErrNotFound) {
					return 0, "", errors.Join(err, rerr)
				}
			}
			return 0, "", fmt.Errorf("start %s: %w", name, err)
		}
	}
	self, err := p.self(ctx)
	if err != nil {
		return 0, "", err
	}
	if self == "" {
		return port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
	}
	if err := p.joinNetwork(ctx, self, cluster); err != nil {
		return 0, "", err
	}
	addr := ctr.Config.Labels[LabelAddress]
	if addr == "" {
		return 0, "", fmt.Errorf("docker: endpoint %s has no address label", name)
	}
	return port, net.JoinHostPort(addr, strings.TrimSuffix(EndpointPort, "/tcp")), nil
}

func (p *Provider) createEndpoint(ctx context.Context, cluster string, n *clusterNetwork) error {
	addr, err := p.allocateAddress(ctx, cluster, n)
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	labels := p.names.labels(cluster, "", RoleEndpoint)
	labels[LabelAddress] = addr
	labels[LabelEndpointPort] = strconv.Itoa(port)
	cfg := &engine.ContainerConfig{
		Image: p.opts.Image, Hostname: "endpoint", Env: []string{}, Labels: labels,
		Cmd:          []string{"endpoint", "--cluster=" + cluster, "--listen=:6443"},
		ExposedPorts: map[string]struct{}{EndpointPort: {}},
		HostConfig: engine.HostConfig{
			NetworkMode:   p.names.network(cluster),
			PortBindings:  map[string][]engine.PortBinding{EndpointPort: {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(port)}}},
			RestartPolicy: engine.RestartPolicy{Name: "unless-stopped"},
		},
		NetworkingConfig: &engine.NetworkingConfig{EndpointsConfig: map[string]*engine.EndpointSettings{
			p.names.network(cluster): {IPAMConfig: &engine.EndpointIPAM{IPv4Address: addr}, Aliases: []string{"endpoint"}},
		}},
	}
	p.log.Info().Str("cluster", cluster).Int("port", port).Msg("creating the cluster's endpoint container")
	if _, err := p.api.ContainerCreate(ctx, p.names.endpoint(cluster), cfg); err != nil && !errors.Is(err, engine.ErrConflict) {
		if errors.Is(err, engine.ErrNotFound) {
			return fmt.Errorf("docker: image %s not found: build it with `%s`: %w", p.opts.Image, ImageTarget, err)
		}
		return err
	}
	return nil
}

// DeleteCluster removes the endpoint container and, once no machine of
// the cluster is left, its network. A missing cluster is fine.
func (p *Provider) DeleteCluster(ctx context.Context, cluster string) error {
	unlock := p.lockCluster(cluster)
	defer unlock()
	name := p.names.endpoint(cluster)
	ctr, err := p.api.ContainerInspect(ctx, name)
	switch {
	case errors.Is(err, engine.ErrNotFound):
	case err != nil:
		return err
	case !p.names.ours(ctr.Config.Labels, cluster, "", RoleEndpoint):
		return fmt.Errorf("docker: container %s is not this deployment's endpoint; not removing it", name)
	default:
		p.log.Info().Str("cluster", cluster).Msg("removing the cluster's endpoint container")
		if err := p.api.ContainerRemove(ctx, ctr.ID, true); err != nil && !errors.Is(err, engine.ErrNotFound) {
			return err
		}
	}
	return p.tidyNetwork(ctx, cluster)
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitServing waits until the endpoint answers GET /healthz through its
// published port (docker's proxy accepts connections before the
// container listens, so a TCP dial proves nothing).
func waitServing(ctx context.Context, addr string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /healthz: %s", resp.Status)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not serve: %w", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
