package docker

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"

	"github.com/capn-dev/capn/providers/docker/engine"
)

// A provider in a container (docker-compose) cannot reach what the host
// publishes on 127.0.0.1 — there, 127.0.0.1 is its own container — and
// docker isolates bridge networks from each other, so it cannot reach a
// cluster network from its own either. It joins each cluster's network
// instead (the daemon attaches it; nothing changes in the compose file)
// and checks the endpoint container at its static address there; it
// leaves the network before removing it. On the daemon's host it checks
// the published port, as users reach the endpoint.

// SelfNone is Options.SelfContainer for a provider on the daemon's host.
const SelfNone = "none"

var (
	containerIDInPath   = regexp.MustCompile(`/containers/([0-9a-f]{64})/`)
	containerIDInCgroup = regexp.MustCompile(`[/-]([0-9a-f]{64})(\.scope)?$`)
	shortContainerID    = regexp.MustCompile(`^[0-9a-f]{12,64}$`)
)

// self is the id of the container this provider runs in on its daemon,
// or "" when it runs on the daemon's host. It is found once (an
// unreachable daemon is retried next time).
func (p *Provider) self(ctx context.Context) (string, error) {
	p.selfMu.Lock()
	defer p.selfMu.Unlock()
	if p.selfKnown {
		return p.selfID, nil
	}
	id, err := p.findSelf(ctx)
	if err != nil {
		return "", err
	}
	p.selfID, p.selfKnown = id, true
	if id != "" {
		p.log.Info().Str("container", id).Msg("docker provider runs in a container: it joins cluster networks to check their endpoints")
	}
	return id, nil
}

func (p *Provider) findSelf(ctx context.Context) (string, error) {
	switch p.opts.SelfContainer {
	case SelfNone:
		return "", nil
	case "":
	default:
		ctr, err := p.api.ContainerInspect(ctx, p.opts.SelfContainer)
		if err != nil {
			return "", fmt.Errorf("docker: --docker-self-container %s: %w", p.opts.SelfContainer, err)
		}
		return ctr.ID, nil
	}
	for _, id := range selfCandidates() {
		ctr, err := p.api.ContainerInspect(ctx, id)
		switch {
		case errors.Is(err, engine.ErrNotFound):
			continue
		case err != nil:
			return "", err
		case strings.HasPrefix(ctr.ID, id) && ctr.State.Running:
			return ctr.ID, nil
		}
	}
	return "", nil
}

// selfCandidates are the container ids this process may run in: those
// its mounts (/etc/hostname, /etc/hosts, /etc/resolv.conf come from the
// daemon's containers/<id>/ directory) and cgroups name, then the
// hostname when it looks like docker's default (the id's first 12 hex
// digits). Each is confirmed on the daemon.
func selfCandidates() []string {
	var out []string
	add := func(id string) {
		for _, o := range out {
			if o == id {
				return
			}
		}
		out = append(out, id)
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, m := range containerIDInPath.FindAllStringSubmatch(string(b), -1) {
			add(m[1])
		}
	}
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if m := containerIDInCgroup.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
				add(m[1])
			}
		}
	}
	if h, err := os.Hostname(); err == nil && shortContainerID.MatchString(h) {
		add(h)
	}
	return out
}

// joinNetwork attaches this provider's container, if any, to the
// cluster's network. The cluster's lock must be held.
func (p *Provider) joinNetwork(ctx context.Context, self, cluster string) error {
	ctr, err := p.api.ContainerInspect(ctx, self)
	if err != nil {
		return fmt.Errorf("docker: inspect this provider's container: %w", err)
	}
	if _, ok := ctr.NetworkSettings.Networks[p.names.network(cluster)]; ok {
		return nil
	}
	n, err := p.findNetwork(ctx, cluster)
	if err != nil {
		return err
	}
	if n == nil {
		return fmt.Errorf("docker: network %s is gone", p.names.network(cluster))
	}
	// The last host address, which allocateAddress never hands out: a
	// dynamic one would be the next machine's.
	addr := selfAddress(n.subnet)
	p.log.Info().Str("cluster", cluster).Str("address", addr.String()).Msg("joining the cluster network to reach its endpoint")
	if err := p.api.NetworkConnect(ctx, p.names.network(cluster), self, addr.String()); err != nil {
		return fmt.Errorf("docker: join network %s: %w", p.names.network(cluster), err)
	}
	return nil
}

// leaveNetwork detaches this provider's container, if any and attached,
// from the cluster's network. The cluster's lock must be held.
func (p *Provider) leaveNetwork(ctx context.Context, cluster string) error {
	self, err := p.self(ctx)
	if err != nil || self == "" {
		return err
	}
	ctr, err := p.api.ContainerInspect(ctx, self)
	if err != nil {
		return fmt.Errorf("docker: inspect this provider's container: %w", err)
	}
	if _, ok := ctr.NetworkSettings.Networks[p.names.network(cluster)]; !ok {
		return nil
	}
	p.log.Info().Str("cluster", cluster).Msg("leaving the cluster network")
	if err := p.api.NetworkDisconnect(ctx, p.names.network(cluster), self, true); err != nil && !errors.Is(err, engine.ErrNotFound) {
		return fmt.Errorf("docker: leave network %s: %w", p.names.network(cluster), err)
	}
	return nil
}

// selfAddress is where this provider's container sits on a cluster
// network: the last host address of the subnet (.254 of a /24), which
// allocateAddress never hands out.
func selfAddress(subnet netip.Prefix) netip.Addr {
	a := subnet.Masked().Addr().As4()
	for i := range 4 {
		keep := min(max(subnet.Bits()-8*i, 0), 8)
		a[i] |= byte(0xff >> keep)
	}
	return netip.AddrFrom4(a).Prev() // the broadcast address's predecessor
}
