package natsconfig

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Deployment describes one capn deployment's NATS: a JetStream cluster and
// the components that use it. Render turns it into files; Users and
// ServerConfig are its pure parts.
type Deployment struct {
	// Cluster is the JetStream cluster's name (cluster { name }).
	Cluster string
	// Account is the one account every capn user lives in.
	Account string
	// Servers are the cluster's nodes (3 for R3 streams and buckets).
	Servers []Server
	// Replicas of streams and buckets: the init job's --stream-replicas.
	Replicas int
	// Providers are the infrastructure providers that get a user each.
	Providers []Provider
	// NodeAgents: machines run node agents (capn-node, capn-npd-bridge),
	// which have no static user: each logs in as its own machine
	// (machine.<cluster>.<machine>) through the bootstrapper's auth callout,
	// which the servers delegate every other login to.
	NodeAgents bool
	// TLS requires TLS with client certificates on the client port and
	// between routes, with certificates Render issues from local CAs.
	TLS bool
	// MaxMemoryStore and MaxFileStore bound JetStream per node (bytes;
	// 0: the server's default, a share of the machine).
	MaxMemoryStore, MaxFileStore int64
	// UserDir is where a component finds its own credentials directory
	// (users/<name> of the render) — what the env files name; "/etc/capn"
	// in a container. Empty: the rendered directory itself.
	UserDir string
}

// Server is one node of the cluster.
type Server struct {
	// Name is the server name, unique in the cluster ("nats-1").
	Name string
	// Host is how clients and the other nodes reach it (a DNS name or an IP).
	Host string
	// Listen is the interface it binds: "0.0.0.0" in a container,
	// "127.0.0.1" on a shared host.
	Listen string
	// ClientPort, RoutePort and MonitorPort are its ports; MonitorPort 0
	// serves no monitoring endpoint. Monitoring, which has no
	// authentication, binds 127.0.0.1 whatever Listen is.
	ClientPort, RoutePort, MonitorPort int
	// StoreDir is its JetStream directory.
	StoreDir string
	// ConfigDir is where the server finds its own rendered files (TLS
	// certificates); "/etc/nats" in a container. Empty: where Render wrote
	// them.
	ConfigDir string
}

// Provider is one infrastructure provider's user.
type Provider struct {
	// Name is the provider's name (capn.provider.<name>.>).
	Name string
	// Heartbeats lets it publish node heartbeats (capn.health.*.*.heartbeat)
	// for machines it simulates (the sim provider: no node agent runs).
	Heartbeats bool
	// ObservedReads are more observed key patterns it reads, e.g.
	// "secrets.>" for the cluster CA pin (no key material) that the
	// process and docker providers hand their node agents.
	ObservedReads []string
}

// Compose is the deployment docker-compose.yaml runs: three nodes nats-1,
// nats-2 and nats-3 on the compose network, TLS everywhere, R3, the sim
// and docker providers and node agents.
func Compose() Deployment {
	d := Deployment{
		Cluster: "capn", Account: "CAPN", Replicas: 3, TLS: true, NodeAgents: true,
		MaxMemoryStore: 256 << 20, MaxFileStore: 4 << 30, UserDir: "/etc/capn",
		Providers: []Provider{
			{Name: "sim", Heartbeats: true},
			{Name: "docker", ObservedReads: []string{"secrets.>"}},
		},
	}
	for i := 1; i <= 3; i++ {
		name := "nats-" + strconv.Itoa(i)
		d.Servers = append(d.Servers, Server{Name: name, Host: name, Listen: "0.0.0.0",
			ClientPort: 4222, RoutePort: 6222, MonitorPort: 8222, StoreDir: "/data", ConfigDir: "/etc/nats"})
	}
	return d
}

// Loopback is d with its servers moved to 127.0.0.1: node i gets client
// port ports[i][0], route port ports[i][1], monitor port ports[i][2] (0:
// none) and the store directory storeDirs[i]. Tests run the rendered
// configuration on one machine this way.
func (d Deployment) Loopback(ports [][3]int, storeDirs []string) Deployment {
	d.Servers = slices.Clone(d.Servers)
	d.UserDir = ""
	for i := range d.Servers {
		s := &d.Servers[i]
		s.Host, s.Listen, s.ConfigDir = "127.0.0.1", "127.0.0.1", ""
		s.ClientPort, s.RoutePort, s.MonitorPort = ports[i][0], ports[i][1], ports[i][2]
		s.StoreDir = storeDirs[i]
	}
	return d
}

// ClientURLs is the comma-separated URL list of every node
// (tls://host:port with TLS, else nats://).
func (d Deployment) ClientURLs() string {
	scheme := "nats"
	if d.TLS {
		scheme = "tls"
	}
	urls := make([]string, len(d.Servers))
	for i, s := range d.Servers {
		urls[i] = scheme + "://" + net.JoinHostPort(s.Host, strconv.Itoa(s.ClientPort))
	}
	return strings.Join(urls, ",")
}

var (
	nameRe     = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	accountRe  = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,62}$`)
	keyPattern = regexp.MustCompile(`^([A-Za-z0-9_=/-]+|\*)(\.([A-Za-z0-9_=/-]+|\*))*(\.>)?$|^>$`)
)

// Validate reports every problem of d at once.
func (d Deployment) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !nameRe.MatchString(d.Cluster) {
		bad("cluster name %q: want lower-case letters, digits and '-'", d.Cluster)
	}
	if !accountRe.MatchString(d.Account) {
		bad("account %q: want upper-case letters, digits and '_'", d.Account)
	}
	if len(d.Servers) == 0 {
		bad("no servers")
	}
	if d.Replicas < 1 || d.Replicas > 5 || d.Replicas > len(d.Servers) {
		bad("replicas %d: want 1..5 and at most the %d servers", d.Replicas, len(d.Servers))
	}
	seen := map[string]bool{}
	for i, s := range d.Servers {
		if !nameRe.MatchString(s.Name) {
			bad("server %d: name %q: want lower-case letters, digits and '-'", i+1, s.Name)
		}
		if seen[s.Name] {
			bad("server %d: name %q is used twice", i+1, s.Name)
		}
		seen[s.Name] = true
		if s.Host == "" || s.Listen == "" {
			bad("server %s: host and listen address are required", s.Name)
		}
		for _, p := range []struct {
			what string
			port int
			zero bool
		}{{"client", s.ClientPort, false}, {"route", s.RoutePort, false}, {"monitor", s.MonitorPort, true}} {
			if p.port < 0 || p.port > 65535 || (p.port == 0 && !p.zero) {
				bad("server %s: %s port %d: want 1..65535", s.Name, p.what, p.port)
			}
		}
		if s.StoreDir == "" {
			bad("server %s: a JetStream store directory is required", s.Name)
		}
	}
	names := map[string]bool{}
	for _, p := range d.Providers {
		if !nameRe.MatchString(p.Name) {
			bad("provider %q: want lower-case letters, digits and '-', starting with a letter", p.Name)
		}
		if names[p.Name] {
			bad("provider %q is listed twice", p.Name)
		}
		names[p.Name] = true
		for _, k := range p.ObservedReads {
			if !keyPattern.MatchString(k) {
				bad("provider %s: observed read %q is not a key pattern (tokens, '*', a final '>')", p.Name, k)
			}
		}
	}
	return errors.Join(errs...)
}
