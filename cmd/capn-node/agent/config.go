package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/schemas/nodecapacity"
	"github.com/capn-dev/capn/services/daemon"
)

// Defaults of Config.
const (
	DefaultHeartbeatEvery = 10 * time.Second
	// DefaultFetchRetryMax bounds the wait between two bootstrap fetches.
	DefaultFetchRetryMax = 15 * time.Second
	// DefaultAddress is the machine's address when none is given.
	DefaultAddress = "127.0.0.1"
)

// Config is one machine's node agent. A provider starts capn-node with it
// as flags (--name=value) or CAPN_NODE_* variables.
type Config struct {
	// Cluster and Machine are the machine's identity: they name its
	// bootstrap fetch subject and its heartbeat subject.
	Cluster, Machine string
	// NodeName is the node name heartbeats carry (default Machine).
	NodeName string
	// Version is the kubelet version heartbeats report: the machine's
	// Kubernetes version (CreateMachine.version). No kubelet runs.
	Version string
	// DataDir is the machine's own directory: bootstrap files go under
	// <DataDir>/rootfs, never to the real /.
	DataDir string
	// NATS is how the agent reaches capn (URL and credentials).
	NATS daemon.NATSConfig
	// NATSSocket, when set, is a unix socket every NATS connection is
	// dialled through instead of the URL's host (the docker provider's
	// relay); the URL still names the server for TLS and logs.
	NATSSocket string
	// BootstrapChecksum is CreateMachine.bootstrap_checksum: the data the
	// agent fetches must have it.
	BootstrapChecksum string
	// BootstrapCredential is CreateMachine.bootstrap_credential: the
	// machine's secret for the fetch, from its provider. It is read from
	// BootstrapCredentialFile when that is set.
	BootstrapCredential     string
	BootstrapCredentialFile string
	// CACertHash, when set, pins the cluster CA (sha256:<hex> of its
	// public key, as kubeadm): the bootstrap data's join material must
	// name exactly this CA.
	CACertHash string
	// HeartbeatEvery is the heartbeat interval (default 10s).
	HeartbeatEvery time.Duration
	// HealthAddr, when set, serves GET /healthz on host:port (the
	// machine's own address): 200 once bootstrapped, 503 before.
	HealthAddr string
	// FetchRetryMax bounds the backoff between bootstrap fetches.
	FetchRetryMax time.Duration
	// KubeBin, when set, is a directory with etcd, kube-apiserver,
	// kube-controller-manager, kube-scheduler and kwok: bootstrap data of
	// the kube-local provider then runs the machine's part of the cluster
	// (package kube). Empty means no real Kubernetes here.
	KubeBin string
	// Address is the machine's own IP address (default 127.0.0.1): the
	// control plane binds to it.
	Address string
	// ProviderID, when set, is the Node's spec.providerID, as the
	// infrastructure reports it.
	ProviderID string
	// NodeCapacity, when set, is the Node's capacity as
	// cpu=2,memory=8Gi,pods=110 (nodecapacity; its provider passes the
	// machine template's); kwok's defaults otherwise.
	NodeCapacity string
	// KubePorts overrides the control plane's ports:
	// name=port,... with names etcd-client, etcd-peer, apiserver,
	// controller-manager, scheduler (kubeadm's defaults otherwise).
	KubePorts string
	// EtcdLearnerTimeout is how long the control plane's membership sweep
	// lets an etcd learner stay unstarted or unpromoted before removing it
	// (0: kube.DefaultLearnerTimeout, 2m).
	EtcdLearnerTimeout time.Duration
	// RunCloudConfig makes this machine a real node: #cloud-config
	// bootstrap data (the kubeadm provider's) is run on this host as
	// cloud-init would (write_files to /, every runcmd entry: kubeadm
	// init or join), by capn-node's cloud-config runner, instead of being
	// written under <DataDir>/rootfs. The agent must run as root in the
	// node's own namespaces (the process provider's node mode).
	RunCloudConfig bool
}

// Flags binds the config to --flags and CAPN_NODE_* (CAPN_NATS_* for NATS)
// variables. The NATS flags are the runtime's names (--nats-url,
// --nats-creds, --nats-nkey, --nats-tls-cert, --nats-tls-key,
// --nats-tls-ca, --nats-inbox-prefix), so a deployment's rendered env
// file of the node user configures capn-node as it does a service.
func (c *Config) Flags() []daemon.Flag {
	f := func(name, env, usage string, p *string) daemon.Flag {
		return daemon.Flag{Name: name, Env: env, Usage: usage, Value: daemon.StringValue(p)}
	}
	return []daemon.Flag{
		f("cluster", "CAPN_NODE_CLUSTER", "`cluster` of this machine (required)", &c.Cluster),
		f("machine", "CAPN_NODE_MACHINE", "`machine` name (required)", &c.Machine),
		f("node-name", "CAPN_NODE_NAME", "`name` heartbeats report (default: the machine)", &c.NodeName),
		f("version", "CAPN_NODE_VERSION", "kubelet `version` heartbeats report (required); no kubelet runs", &c.Version),
		f("data-dir", "CAPN_NODE_DATA_DIR", "this machine's `dir`: bootstrap files go under <dir>/rootfs (required)", &c.DataDir),
		f("bootstrap-checksum", "CAPN_NODE_BOOTSTRAP_CHECKSUM", "sha256:<hex> `checksum` of the bootstrap data to fetch (required)", &c.BootstrapChecksum),
		f("bootstrap-credential-file", "CAPN_NODE_BOOTSTRAP_CREDENTIAL_FILE", "`file` with this machine's bootstrap credential, from its provider (or set CAPN_NODE_BOOTSTRAP_CREDENTIAL; never on the command line)", &c.BootstrapCredentialFile),
		f("bootstrap-credential", "CAPN_NODE_BOOTSTRAP_CREDENTIAL", "this machine's bootstrap credential; prefer the variable or --bootstrap-credential-file: a command line is world-readable", &c.BootstrapCredential),
		f("ca-cert-hash", "CAPN_NODE_CA_CERT_HASH", "sha256:<hex> `pin` of the cluster CA the join material must name (optional)", &c.CACertHash),
		f("nats-url", "CAPN_NATS_URL", "NATS `url` of capn", &c.NATS.URL),
		f("nats-creds", "CAPN_NATS_CREDS", "NATS credentials `file` (JWT and seed) of this machine (optional)", &c.NATS.CredsFile),
		f("nats-nkey", "CAPN_NATS_NKEY", "NATS nkey seed `file` of this machine (optional)", &c.NATS.NKeySeedFile),
		f("nats-tls-cert", "CAPN_NATS_TLS_CERT", "client certificate `file` for TLS to NATS (with --nats-tls-key; optional)", &c.NATS.TLSCert),
		f("nats-tls-key", "CAPN_NATS_TLS_KEY", "client key `file` for TLS to NATS (optional)", &c.NATS.TLSKey),
		f("nats-tls-ca", "CAPN_NATS_TLS_CA", "CA `file` that verifies the NATS server (optional)", &c.NATS.TLSCA),
		f("nats-inbox-prefix", "CAPN_NATS_INBOX_PREFIX", "`prefix` of reply subjects (default: logged in as its machine, _INBOX_machine.<cluster>.<machine>; with other credentials, _INBOX)", &c.NATS.InboxPrefix),
		f("nats-socket", "CAPN_NODE_NATS_SOCKET", "unix `socket` to dial NATS through (the docker provider's relay)", &c.NATSSocket),
		f("health-addr", "CAPN_NODE_HEALTH_ADDR", "`host:port` of GET /healthz (optional)", &c.HealthAddr),
		f("kube-bin", "CAPN_KUBE_BIN", "`dir` of the Kubernetes binaries (make kube): kube-local bootstrap data then runs a real control plane (optional)", &c.KubeBin),
		f("address", "CAPN_NODE_ADDRESS", "this machine's own IP `address`, which its control plane binds to (default 127.0.0.1)", &c.Address),
		f("provider-id", "CAPN_NODE_PROVIDER_ID", "`id` the infrastructure gives this machine: the Node's spec.providerID (optional)", &c.ProviderID),
		f("node-capacity", "CAPN_NODE_CAPACITY", "the Node's `capacity` as cpu=2,memory=8Gi,pods=110 (optional; kwok's 1k CPUs, 1Ti, 1M pods otherwise)", &c.NodeCapacity),
		f("kube-ports", "CAPN_NODE_KUBE_PORTS", "control-plane `ports` as name=port,... (etcd-client, etcd-peer, apiserver, controller-manager, scheduler; default kubeadm's)", &c.KubePorts),
		{Name: "heartbeat-every", Env: "CAPN_NODE_HEARTBEAT_EVERY", Usage: "heartbeat `interval`", Value: daemon.DurationValue(&c.HeartbeatEvery)},
		{Name: "run-cloud-config", Env: "CAPN_NODE_RUN_CLOUD_CONFIG", Usage: "run #cloud-config bootstrap data on this host (write_files to /, runcmd: kubeadm init or join) as cloud-init would: a real node (the process provider's node mode)", Value: daemon.BoolValue(&c.RunCloudConfig)},
		{Name: "etcd-learner-timeout", Env: "CAPN_NODE_ETCD_LEARNER_TIMEOUT", Usage: "how long an etcd learner may stay unstarted or unpromoted before the control planes remove it (`duration`, default 2m)", Value: daemon.DurationValue(&c.EtcdLearnerTimeout)},
	}
}

func (c Config) withDefaults() Config {
	if c.NodeName == "" {
		c.NodeName = c.Machine
	}
	if c.HeartbeatEvery == 0 {
		c.HeartbeatEvery = DefaultHeartbeatEvery
	}
	if c.FetchRetryMax == 0 {
		c.FetchRetryMax = DefaultFetchRetryMax
	}
	if c.NATS.URL == "" {
		c.NATS.URL = daemon.DefaultNATSURL
	}
	if c.Address == "" {
		c.Address = DefaultAddress
	}
	return c
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(flag, env, value, problem string) {
		errs = append(errs, &daemon.FieldError{Flag: flag, Env: env, Value: value, Problem: problem})
	}
	if err := sdk.ValidateName("cluster", c.Cluster); err != nil {
		bad("cluster", "CAPN_NODE_CLUSTER", c.Cluster, err.Error())
	}
	if err := sdk.ValidateName("machine", c.Machine); err != nil {
		bad("machine", "CAPN_NODE_MACHINE", c.Machine, err.Error())
	}
	if c.Version == "" {
		bad("version", "CAPN_NODE_VERSION", "", "required: the kubelet version heartbeats report")
	}
	if c.DataDir == "" || !filepath.IsAbs(c.DataDir) {
		bad("data-dir", "CAPN_NODE_DATA_DIR", c.DataDir, "required: an absolute path")
	}
	if !strings.HasPrefix(c.BootstrapChecksum, "sha256:") {
		bad("bootstrap-checksum", "CAPN_NODE_BOOTSTRAP_CHECKSUM", c.BootstrapChecksum, "required: sha256:<hex>")
	}
	if c.BootstrapCredentialFile != "" && !filepath.IsAbs(c.BootstrapCredentialFile) {
		bad("bootstrap-credential-file", "CAPN_NODE_BOOTSTRAP_CREDENTIAL_FILE", c.BootstrapCredentialFile, "must be an absolute path")
	}
	if c.CACertHash != "" && !strings.HasPrefix(c.CACertHash, "sha256:") {
		bad("ca-cert-hash", "CAPN_NODE_CA_CERT_HASH", c.CACertHash, "must be sha256:<hex>")
	}
	if c.HeartbeatEvery < 10*time.Millisecond {
		bad("heartbeat-every", "CAPN_NODE_HEARTBEAT_EVERY", c.HeartbeatEvery.String(), "must be at least 10ms")
	}
	if c.NATSSocket != "" && !filepath.IsAbs(c.NATSSocket) {
		bad("nats-socket", "CAPN_NODE_NATS_SOCKET", c.NATSSocket, "must be an absolute path")
	}
	if c.KubeBin != "" && !filepath.IsAbs(c.KubeBin) {
		bad("kube-bin", "CAPN_KUBE_BIN", c.KubeBin, "must be an absolute path")
	}
	if _, err := nodecapacity.Parse(c.NodeCapacity); err != nil {
		bad("node-capacity", "CAPN_NODE_CAPACITY", c.NodeCapacity, err.Error())
	}
	if a, err := netip.ParseAddr(c.Address); err != nil || a.Zone() != "" {
		bad("address", "CAPN_NODE_ADDRESS", c.Address, "must be an IP address")
	}
	if c.EtcdLearnerTimeout < 0 {
		bad("etcd-learner-timeout", "CAPN_NODE_ETCD_LEARNER_TIMEOUT", c.EtcdLearnerTimeout.String(), "must not be negative (0: the default 2m)")
	}
	if _, err := kube.ParsePorts(c.KubePorts); err != nil {
		bad("kube-ports", "CAPN_NODE_KUBE_PORTS", c.KubePorts, err.Error())
	}
	// URL, credentials, TLS files and inbox prefix: the runtime's checks,
	// under the same flag names.
	if err := c.NATS.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// String is the identity, for logs.
func (c Config) String() string { return fmt.Sprintf("%s/%s", c.Cluster, c.Machine) }

// credential is the bootstrap credential: the file's content (trimmed)
// when a file is named, else the value given.
func (c Config) credential() (string, error) {
	if c.BootstrapCredentialFile == "" {
		return c.BootstrapCredential, nil
	}
	b, err := os.ReadFile(c.BootstrapCredentialFile)
	if err != nil {
		return "", fmt.Errorf("bootstrap credential: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
