package docker

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/capn-dev/capn/providers/docker/engine"
)

// Every cluster has one bridge network, <deployment>.<cluster>, with a /24
// of SubnetPool that no other docker network overlaps. Its containers get
// static addresses chosen here (recorded in their LabelAddress), so a
// machine keeps its address across stop, start and reboot: docker frees a
// stopped container's address, and only static ones come back.

// clusterNetwork is a cluster's network and its address plan.
type clusterNetwork struct {
	id     string
	subnet netip.Prefix
}

// ensureNetwork finds or creates the cluster's network. The cluster's lock
// must be held.
func (p *Provider) ensureNetwork(ctx context.Context, cluster string) (*clusterNetwork, error) {
	if n, err := p.findNetwork(ctx, cluster); err != nil || n != nil {
		return n, err
	}
	all, err := p.api.NetworkList(ctx, nil)
	if err != nil {
		return nil, err
	}
	var taken []netip.Prefix
	for _, n := range all {
		for _, c := range n.IPAM.Config {
			if pfx, err := netip.ParsePrefix(c.Subnet); err == nil {
				taken = append(taken, pfx)
			}
		}
	}
	pool := netip.MustParsePrefix(p.opts.SubnetPool)
	for sub := range subnets(pool) {
		if overlapsAny(sub, taken) {
			continue
		}
		gw := sub.Addr().Next()
		p.log.Info().Str("cluster", cluster).Str("subnet", sub.String()).Msg("creating the cluster network")
		id, err := p.api.NetworkCreate(ctx, p.names.network(cluster), sub.String(), gw.String(), p.names.labels(cluster, "", RoleNetwork))
		switch {
		case err == nil:
			return &clusterNetwork{id: id, subnet: sub}, nil
		case errors.Is(err, engine.ErrConflict):
			// Made meanwhile (another replica)? Then use it.
			if n, ferr := p.findNetwork(ctx, cluster); ferr != nil || n != nil {
				return n, ferr
			}
		}
		var api *engine.APIError
		if !errors.As(err, &api) {
			return nil, err
		}
		taken = append(taken, sub) // the daemon refused this subnet (overlap): next
	}
	return nil, fmt.Errorf("docker: no free /24 left in %s for the network of %s", p.opts.SubnetPool, cluster)
}

// findNetwork returns the cluster's network, or nil.
func (p *Provider) findNetwork(ctx context.Context, cluster string) (*clusterNetwork, error) {
	list, err := p.api.NetworkList(ctx, p.names.labels(cluster, "", RoleNetwork))
	if err != nil {
		return nil, err
	}
	for _, n := range list {
		if n.Name != p.names.network(cluster) || len(n.IPAM.Config) == 0 {
			continue
		}
		sub, err := netip.ParsePrefix(n.IPAM.Config[0].Subnet)
		if err != nil {
			return nil, fmt.Errorf("docker: network %s: subnet %q: %w", n.Name, n.IPAM.Config[0].Subnet, err)
		}
		return &clusterNetwork{id: n.ID, subnet: sub}, nil
	}
	return nil, nil
}

// allocateAddress returns the lowest host address of the network that no
// container of the cluster holds (.1 is the gateway; the last, .254, is
// kept for a provider in a container: self.go). The cluster's lock
// must be held.
func (p *Provider) allocateAddress(ctx context.Context, cluster string, n *clusterNetwork) (string, error) {
	list, err := p.api.ContainerList(ctx, p.names.labels(cluster, "", ""))
	if err != nil {
		return "", err
	}
	used := map[string]bool{}
	for _, c := range list {
		used[c.Labels[LabelAddress]] = true
	}
	a := n.subnet.Addr().Next().Next() // .2
	for ; n.subnet.Contains(a); a = a.Next() {
		if !a.Next().IsValid() || !n.subnet.Contains(a.Next()) || a == selfAddress(n.subnet) {
			break // the broadcast address, or the provider's own (self.go)
		}
		if !used[a.String()] {
			return a.String(), nil
		}
	}
	return "", fmt.Errorf("docker: no free address left in %s for cluster %s", n.subnet, cluster)
}

// tidyNetwork removes the cluster's network once no container of the
// cluster is left (this provider's own container leaves it first). The
// cluster's lock must be held.
func (p *Provider) tidyNetwork(ctx context.Context, cluster string) error {
	left, err := p.api.ContainerList(ctx, p.names.labels(cluster, "", ""))
	if err != nil || len(left) > 0 {
		return err
	}
	n, err := p.findNetwork(ctx, cluster)
	if err != nil || n == nil {
		return err
	}
	if err := p.leaveNetwork(ctx, cluster); err != nil {
		return err
	}
	p.log.Info().Str("cluster", cluster).Msg("removing the cluster network")
	if err := p.api.NetworkRemove(ctx, n.id); err != nil && !errors.Is(err, engine.ErrNotFound) {
		return err
	}
	return nil
}

// subnets yields the /24s of pool in order.
func subnets(pool netip.Prefix) func(func(netip.Prefix) bool) {
	return func(yield func(netip.Prefix) bool) {
		base := pool.Masked().Addr().As4()
		n := 1 << (24 - pool.Bits())
		for i := range n {
			a := base
			a[1] += byte(i >> 8)
			a[2] += byte(i)
			if !yield(netip.PrefixFrom(netip.AddrFrom4(a), 24)) {
				return
			}
		}
	}
}

func overlapsAny(p netip.Prefix, taken []netip.Prefix) bool {
	for _, t := range taken {
		if p.Overlaps(t) {
			return true
		}
	}
	return false
}
