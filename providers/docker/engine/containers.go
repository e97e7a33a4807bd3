package engine

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ContainerConfig is the body of POST /containers/create (the fields the
// provider uses).
type ContainerConfig struct {
	Image            string              `json:"Image"`
	Hostname         string              `json:"Hostname,omitempty"`
	Cmd              []string            `json:"Cmd,omitempty"`
	Env              []string            `json:"Env"`
	Labels           map[string]string   `json:"Labels,omitempty"`
	ExposedPorts     map[string]struct{} `json:"ExposedPorts,omitempty"`
	StopTimeout      *int                `json:"StopTimeout,omitempty"`
	HostConfig       HostConfig          `json:"HostConfig"`
	NetworkingConfig *NetworkingConfig   `json:"NetworkingConfig,omitempty"`
}

// HostConfig is a container's host configuration.
type HostConfig struct {
	Binds         []string                 `json:"Binds,omitempty"`
	NetworkMode   string                   `json:"NetworkMode,omitempty"`
	PortBindings  map[string][]PortBinding `json:"PortBindings,omitempty"`
	RestartPolicy RestartPolicy            `json:"RestartPolicy"`
	Init          bool                     `json:"Init,omitempty"`
}

// PortBinding publishes a container port on the host.
type PortBinding struct {
	HostIP   string `json:"HostIp"`
	HostPort string `json:"HostPort"`
}

// RestartPolicy: "no", "always", "unless-stopped", "on-failure".
type RestartPolicy struct {
	Name string `json:"Name"`
}

// NetworkingConfig attaches a container to networks at create.
type NetworkingConfig struct {
	EndpointsConfig map[string]*EndpointSettings `json:"EndpointsConfig"`
}

// EndpointSettings is a container's attachment to one network.
type EndpointSettings struct {
	IPAMConfig *EndpointIPAM `json:"IPAMConfig,omitempty"`
	Aliases    []string      `json:"Aliases,omitempty"`
	IPAddress  string        `json:"IPAddress,omitempty"`
	NetworkID  string        `json:"NetworkID,omitempty"`
}

// EndpointIPAM asks for a static address.
type EndpointIPAM struct {
	IPv4Address string `json:"IPv4Address,omitempty"`
}

// Container is what GET /containers/{id}/json says.
type Container struct {
	ID      string    `json:"Id"`
	Name    string    `json:"Name"`
	Created time.Time `json:"Created"`
	State   struct {
		Status     string    `json:"Status"` // created, running, paused, restarting, removing, exited, dead
		Running    bool      `json:"Running"`
		Pid        int       `json:"Pid"`
		ExitCode   int       `json:"ExitCode"`
		StartedAt  time.Time `json:"StartedAt"`
		FinishedAt time.Time `json:"FinishedAt"`
	} `json:"State"`
	Config struct {
		Hostname string            `json:"Hostname"`
		Labels   map[string]string `json:"Labels"`
		Cmd      []string          `json:"Cmd"`
		Image    string            `json:"Image"`
	} `json:"Config"`
	HostConfig struct {
		Binds []string `json:"Binds"`
	} `json:"HostConfig"`
	NetworkSettings struct {
		Ports    map[string][]PortBinding     `json:"Ports"`
		Networks map[string]*EndpointSettings `json:"Networks"`
	} `json:"NetworkSettings"`
}

// ContainerSummary is one entry of GET /containers/json.
type ContainerSummary struct {
	ID     string            `json:"Id"`
	Names  []string          `json:"Names"`
	State  string            `json:"State"`
	Labels map[string]string `json:"Labels"`
}

// ContainerCreate creates a container named name and returns its id.
func (c *Client) ContainerCreate(ctx context.Context, name string, cfg *ContainerConfig) (string, error) {
	var out struct {
		ID string `json:"Id"`
	}
	err := c.do(ctx, http.MethodPost, "/containers/create", url.Values{"name": {name}}, cfg, &out)
	return out.ID, err
}

// ContainerStart starts a container (a running one is fine).
func (c *Client) ContainerStart(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/start", nil, nil, nil)
}

// ContainerStop stops a container: SIGTERM (its stop signal), SIGKILL
// after timeout (a stopped one is fine).
func (c *Client) ContainerStop(ctx context.Context, id string, timeout time.Duration) error {
	return c.do(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/stop", seconds(timeout), nil, nil)
}

// ContainerRestart stops (as ContainerStop) and starts a container.
func (c *Client) ContainerRestart(ctx context.Context, id string, timeout time.Duration) error {
	return c.do(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/restart", seconds(timeout), nil, nil)
}

// ContainerRemove removes a container and its anonymous volumes; force
// kills a running one first.
func (c *Client) ContainerRemove(ctx context.Context, id string, force bool) error {
	q := url.Values{"v": {"1"}, "force": {strconv.FormatBool(force)}}
	return c.do(ctx, http.MethodDelete, "/containers/"+url.PathEscape(id), q, nil, nil)
}

// ContainerInspect returns a container by id or name (ErrNotFound).
func (c *Client) ContainerInspect(ctx context.Context, id string) (*Container, error) {
	out := new(Container)
	if err := c.do(ctx, http.MethodGet, "/containers/"+url.PathEscape(id)+"/json", nil, nil, out); err != nil {
		return nil, err
	}
	return out, nil
}

// ContainerList lists every container (running or not) with all labels.
func (c *Client) ContainerList(ctx context.Context, labels map[string]string) ([]ContainerSummary, error) {
	q := labelFilters(labels, nil)
	q.Set("all", "1")
	var out []ContainerSummary
	err := c.do(ctx, http.MethodGet, "/containers/json", q, nil, &out)
	return out, err
}

func seconds(d time.Duration) url.Values {
	return url.Values{"t": {strconv.Itoa(int(d.Round(time.Second) / time.Second))}}
}
