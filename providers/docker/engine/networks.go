package engine

import (
	"context"
	"net/http"
	"net/url"
)

// Network is what GET /networks says of a network.
type Network struct {
	ID     string            `json:"Id"`
	Name   string            `json:"Name"`
	Labels map[string]string `json:"Labels"`
	IPAM   IPAM              `json:"IPAM"`
}

// IPAM is a network's address plan.
type IPAM struct {
	Driver string       `json:"Driver,omitempty"`
	Config []IPAMConfig `json:"Config"`
}

// IPAMConfig is one subnet of a network.
type IPAMConfig struct {
	Subnet  string `json:"Subnet,omitempty"`
	Gateway string `json:"Gateway,omitempty"`
}

// NetworkCreate creates a bridge network with subnet (and gateway) and
// labels, and returns its id.
func (c *Client) NetworkCreate(ctx context.Context, name, subnet, gateway string, labels map[string]string) (string, error) {
	in := map[string]any{
		"Name": name, "Driver": "bridge", "CheckDuplicate": true, "Labels": labels,
		"IPAM": IPAM{Driver: "default", Config: []IPAMConfig{{Subnet: subnet, Gateway: gateway}}},
	}
	var out struct {
		ID string `json:"Id"`
	}
	err := c.do(ctx, http.MethodPost, "/networks/create", nil, in, &out)
	return out.ID, err
}

// NetworkRemove removes a network (ErrNotFound if it does not exist; an
// APIError 403 or 409 while containers are attached).
func (c *Client) NetworkRemove(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/networks/"+url.PathEscape(id), nil, nil, nil)
}

// NetworkList lists the networks with all labels (nil: every network).
func (c *Client) NetworkList(ctx context.Context, labels map[string]string) ([]Network, error) {
	var out []Network
	err := c.do(ctx, http.MethodGet, "/networks", labelFilters(labels, nil), nil, &out)
	return out, err
}

// NetworkConnect attaches a container to a network, at a static address
// when ipv4 is not empty.
func (c *Client) NetworkConnect(ctx context.Context, network, container, ipv4 string) error {
	in := map[string]any{"Container": container}
	if ipv4 != "" {
		in["EndpointConfig"] = EndpointSettings{IPAMConfig: &EndpointIPAM{IPv4Address: ipv4}}
	}
	return c.do(ctx, http.MethodPost, "/networks/"+url.PathEscape(network)+"/connect", nil, in, nil)
}

// NetworkDisconnect detaches a container from a network; force detaches
// one that is not running too.
func (c *Client) NetworkDisconnect(ctx context.Context, network, container string, force bool) error {
	return c.do(ctx, http.MethodPost, "/networks/"+url.PathEscape(network)+"/disconnect", nil, map[string]any{"Container": container, "Force": force}, nil)
}
