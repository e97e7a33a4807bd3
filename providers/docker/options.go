package docker

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/capn-dev/capn/services/daemon"
)

// Defaults of Options.
const (
	DefaultImage          = "capn-node:latest"
	DefaultDeployment     = "capn"
	DefaultSubnetPool     = "10.217.0.0/16"
	DefaultHeartbeatEvery = 10 * time.Second
	DefaultStopTimeout    = 10 * time.Second
	DefaultAPITimeout     = 30 * time.Second
	// ImageTarget is the make target that builds DefaultImage.
	ImageTarget = "make images"
)

// Options configure the docker provider.
type Options struct {
	// Host is the Docker daemon's unix socket (default $DOCKER_HOST, else
	// /var/run/docker.sock).
	Host string
	// Image is the machines' image, built locally FROM scratch (default
	// capn-node:latest, built by `make images`); it is never pulled.
	Image string
	// Deployment names this capn deployment's objects on the daemon
	// (label capn.dev/deployment, a prefix of every name), so that two
	// deployments, or tests, share a daemon without touching each
	// other's containers (default "capn").
	Deployment string
	// StateDir holds the NATS relay socket that machines reach capn
	// through (required unless ContainerNATSURL is set).
	StateDir string
	// NodeNATSURL is capn's NATS URL as this provider's host reaches it:
	// what the relay forwards to and what machines are told (default: the
	// URL of the provider's own connection; capn dev, whose services
	// connect in process, sets its listen address).
	NodeNATSURL string
	// ContainerNATSURL, when set, is the NATS URL machines connect to over
	// their cluster network, with no relay: a deployment whose NATS is
	// reachable from containers.
	ContainerNATSURL string
	// NodeNATSCreds and NodeNATSNKey name a credentials file or an nkey
	// seed file that capn-node authenticates to NATS with (optional).
	// Like the TLS files below, it is a file this provider reads (in its
	// container, under docker-compose) and copies into every machine's
	// container before its first start (under /run/capn, 0600): no path
	// on the daemon's host is involved.
	NodeNATSCreds, NodeNATSNKey string
	// NodeNATSTLSCA, NodeNATSTLSCert and NodeNATSTLSKey are the CA that
	// verifies the NATS servers and the client certificate and key that a
	// NATS with verified client certificates requires (optional; cert and
	// key together), copied into machines as the credentials are.
	NodeNATSTLSCA, NodeNATSTLSCert, NodeNATSTLSKey string
	// NodeNATSInboxPrefix is capn-node's --nats-inbox-prefix: the reply
	// subjects its NATS user may subscribe to (empty: a machine that logs
	// in as itself, as in a rendered deployment, uses its own
	// _INBOX_machine.<cluster>.<machine>; one with other credentials
	// NATS's _INBOX).
	NodeNATSInboxPrefix string
	// SelfContainer is the container this provider runs in, if any, on
	// the daemon it drives (name or id). Such a provider cannot reach an
	// endpoint published on the host's 127.0.0.1, so it joins each
	// cluster's network and checks the endpoint container there (and
	// leaves the network before removing it). Empty: detected (the
	// container whose id /proc/self names, or whose id the hostname is);
	// "none": the provider runs on the daemon's host.
	SelfContainer string
	// SubnetPool is where cluster networks get their /24 (default
	// 10.217.0.0/16, one /24 per cluster).
	SubnetPool string
	// HeartbeatEvery is the machines' heartbeat interval (default 10s).
	HeartbeatEvery time.Duration
	// StopTimeout is how long a machine gets after SIGTERM (default 10s).
	StopTimeout time.Duration
	// APITimeout bounds each Docker API call (default 30s).
	APITimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.Host == "" {
		o.Host = os.Getenv("DOCKER_HOST")
	}
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.Deployment == "" {
		o.Deployment = DefaultDeployment
	}
	if o.SubnetPool == "" {
		o.SubnetPool = DefaultSubnetPool
	}
	if o.HeartbeatEvery == 0 {
		o.HeartbeatEvery = DefaultHeartbeatEvery
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	if o.APITimeout == 0 {
		o.APITimeout = DefaultAPITimeout
	}
	return o
}

var deploymentName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,39}$`)

// Validate reports every problem at once. It does not reach the daemon
// (see Preflight).
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	bad := func(flag, value, problem string) {
		errs = append(errs, &daemon.FieldError{Flag: flag, Env: envOf(flag), Value: value, Problem: problem})
	}
	if !deploymentName.MatchString(o.Deployment) {
		bad("docker-deployment", o.Deployment, "want 1-40 lower-case letters, digits and '-'")
	}
	if o.ContainerNATSURL == "" && (o.StateDir == "" || !filepath.IsAbs(o.StateDir)) {
		bad("docker-state-dir", o.StateDir, "required (an absolute path for the NATS relay socket) unless --docker-container-nats-url is set")
	}
	for _, c := range []struct{ flag, v string }{
		{"docker-node-nats-creds", o.NodeNATSCreds}, {"docker-node-nats-nkey", o.NodeNATSNKey},
		{"docker-node-nats-tls-ca", o.NodeNATSTLSCA}, {"docker-node-nats-tls-cert", o.NodeNATSTLSCert}, {"docker-node-nats-tls-key", o.NodeNATSTLSKey},
	} {
		if c.v != "" && !filepath.IsAbs(c.v) {
			bad(c.flag, c.v, "must be an absolute path (a file this provider reads and copies into machines)")
		}
	}
	if o.NodeNATSCreds != "" && o.NodeNATSNKey != "" {
		bad("docker-node-nats-nkey", o.NodeNATSNKey, "set --docker-node-nats-creds or --docker-node-nats-nkey, not both")
	}
	if (o.NodeNATSTLSCert == "") != (o.NodeNATSTLSKey == "") {
		bad("docker-node-nats-tls-key", o.NodeNATSTLSKey, "--docker-node-nats-tls-cert and --docker-node-nats-tls-key go together")
	}
	if strings.ContainsAny(o.NodeNATSInboxPrefix, " \t.*>") {
		bad("docker-node-nats-inbox-prefix", o.NodeNATSInboxPrefix, "want one subject token, e.g. _INBOX_capn")
	}
	if p, err := netip.ParsePrefix(o.SubnetPool); err != nil || !p.Addr().Is4() || p.Bits() > 24 {
		bad("docker-subnet-pool", o.SubnetPool, "want an IPv4 prefix of /24 or wider, e.g. 10.217.0.0/16")
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"docker-heartbeat-every", o.HeartbeatEvery}, {"docker-stop-timeout", o.StopTimeout}, {"docker-api-timeout", o.APITimeout}} {
		if d.v <= 0 {
			bad(d.flag, d.v.String(), "must be positive")
		}
	}
	return errors.Join(errs...)
}

// Flags binds the options to --docker-* flags and CAPN_DOCKER_* variables.
func (o *Options) Flags() []daemon.Flag {
	f := func(name, usage string, v interface {
		Set(string) error
		String() string
	}) daemon.Flag {
		return daemon.Flag{Name: name, Env: envOf(name), Usage: usage, Value: v}
	}
	return []daemon.Flag{
		f("docker-host", "Docker daemon unix `socket` (default $DOCKER_HOST, else /var/run/docker.sock)", daemon.StringValue(&o.Host)),
		f("docker-image", "machines' `image`, built locally by '"+ImageTarget+"' (default "+DefaultImage+")", daemon.StringValue(&o.Image)),
		f("docker-deployment", "`name` scoping this deployment's containers and networks (default "+DefaultDeployment+")", daemon.StringValue(&o.Deployment)),
		f("docker-state-dir", "`dir` of the NATS relay socket machines reach capn through", daemon.StringValue(&o.StateDir)),
		f("docker-node-nats-url", "NATS `url` the relay forwards to (default: this provider's)", daemon.StringValue(&o.NodeNATSURL)),
		f("docker-container-nats-url", "NATS `url` containers connect to directly (no relay)", daemon.StringValue(&o.ContainerNATSURL)),
		f("docker-node-nats-creds", "NATS credentials `file` copied into machines for capn-node (optional)", daemon.StringValue(&o.NodeNATSCreds)),
		f("docker-node-nats-nkey", "NATS nkey seed `file` copied into machines for capn-node (optional)", daemon.StringValue(&o.NodeNATSNKey)),
		f("docker-node-nats-tls-ca", "CA `file` verifying the NATS servers, copied into machines (optional)", daemon.StringValue(&o.NodeNATSTLSCA)),
		f("docker-node-nats-tls-cert", "NATS client certificate `file` copied into machines (optional, with the key)", daemon.StringValue(&o.NodeNATSTLSCert)),
		f("docker-node-nats-tls-key", "NATS client key `file` copied into machines (optional, with the certificate)", daemon.StringValue(&o.NodeNATSTLSKey)),
		f("docker-node-nats-inbox-prefix", "capn-node's reply subject `prefix` (default: a machine logging in as itself uses _INBOX_machine.<cluster>.<machine>, else _INBOX)", daemon.StringValue(&o.NodeNATSInboxPrefix)),
		f("docker-self-container", "`container` this provider runs in (default: detected; 'none': on the daemon's host)", daemon.StringValue(&o.SelfContainer)),
		f("docker-subnet-pool", "IPv4 `prefix` cluster networks get a /24 of (default "+DefaultSubnetPool+")", daemon.StringValue(&o.SubnetPool)),
		f("docker-heartbeat-every", "machines' heartbeat `interval` (0: 10s)", daemon.DurationValue(&o.HeartbeatEvery)),
		f("docker-stop-timeout", "`time` a machine gets after SIGTERM (0: 10s)", daemon.DurationValue(&o.StopTimeout)),
		f("docker-api-timeout", "bound of each Docker API `call` (0: 30s)", daemon.DurationValue(&o.APITimeout)),
	}
}

// envOf is CAPN_ and the flag name in upper snake case.
func envOf(flag string) string {
	b := []byte("CAPN_" + flag)
	for i, c := range b {
		switch {
		case c == '-':
			b[i] = '_'
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func (o Options) String() string {
	return fmt.Sprintf("deployment %s, image %s", o.Deployment, o.Image)
}
