package process

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/capn-dev/capn/services/daemon"
)

// Defaults of Options.
const (
	DefaultHeartbeatEvery = 10 * time.Second
	DefaultWatchEvery     = time.Second
	DefaultStopTimeout    = 10 * time.Second
	// DefaultHealthPort is where each machine's capn-node serves /healthz
	// on the machine's own address (the kubelet's healthz port).
	DefaultHealthPort = 10248
	// NodeBinaryName is the node agent's executable name.
	NodeBinaryName = "capn-node"
)

// Options configure the process provider.
type Options struct {
	// NodeBinary is the capn-node executable every machine runs (default:
	// capn-node next to this program, else on PATH).
	NodeBinary string
	// StateDir holds the clusters, machines and their data dirs (required).
	// Machines outlive the provider: a restarted provider reads them back
	// from here.
	StateDir string
	// NodeNATSURL is the NATS URL machines connect to (default: the URL of
	// the provider's own connection).
	NodeNATSURL string
	// NodeNATSCreds and NodeNATSNKey name a credentials file or an nkey
	// seed file the machines authenticate to NATS with (optional; files
	// on this host that capn-node may read).
	NodeNATSCreds, NodeNATSNKey string
	// NodeNATSTLSCA, NodeNATSTLSCert and NodeNATSTLSKey are the CA that
	// verifies the NATS servers and the client certificate and key the
	// machines present (optional; files on this host).
	NodeNATSTLSCA, NodeNATSTLSCert, NodeNATSTLSKey string
	// NodeNATSInboxPrefix is capn-node's --nats-inbox-prefix (empty: a
	// machine that logs in as itself uses its own _INBOX_machine.<c>.<m>,
	// one with other credentials NATS's _INBOX).
	NodeNATSInboxPrefix string
	// HeartbeatEvery is the machines' heartbeat interval (default 10s).
	HeartbeatEvery time.Duration
	// WatchEvery is how often machine processes are checked for an exit
	// this provider did not see (default 1s); a machine's exit is drift.
	WatchEvery time.Duration
	// StopTimeout is how long a machine gets to exit after SIGTERM before
	// SIGKILL (default 10s).
	StopTimeout time.Duration
	// RehomeWait bounds how long an adopt from another state dir waits
	// for a machine's agent to log in at NodeNATSURL (0:
	// DefaultRehomeWait). Not a flag.
	RehomeWait time.Duration
	// HealthPort is the port of each machine's /healthz on its own address
	// (default 10248; -1: none).
	HealthPort int
	// KubeBin lists the directories of the Kubernetes binaries (etcd,
	// kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
	// kwok; `make kube` builds them, one directory per version),
	// separated by ':' as PATH; a single directory is a list of one.
	// Machines run them when their bootstrap data asks for real
	// Kubernetes: each machine's capn-node gets the one directory whose
	// kube-apiserver is the machine's version as --kube-bin, with the
	// machine's --address and --provider-id. A kube-local machine of a
	// version no directory holds is refused at create (state Failed, the
	// message names the version and make kube). Empty: no Kubernetes
	// runs on these machines.
	KubeBin string
	// RealNodes turns node mode on: every machine is a real Linux node on
	// this host (package realnode: network and mount namespaces of its
	// own on the provider's switch, its own containerd, a real kubelet)
	// whose capn-node agent runs the machine's kubeadm bootstrap data.
	// It needs root, NodeStack and NodeImages; without them the provider
	// refuses to start, naming what is missing and the make command.
	RealNodes bool
	// NodeStack is the node stack in CAPN_NODESTACK_BIN's form,
	// "<containerd/runc/CNI bin>:<kubelet/kubeadm/kube-proxy bin>" (make
	// nodestack; make -s nodestack-bin prints it). Default: that
	// variable.
	NodeStack string
	// NodeImages is the directory of kubeadm's images as OCI archives
	// with its images.txt (make nodeimages). Default: CAPN_NODEIMAGES.
	NodeImages string

	// apiServerPort is the port of the endpoint's backends (default
	// DefaultAPIServerPort); tests change it.
	apiServerPort int
}

func (o Options) withDefaults() Options {
	if o.NodeBinary == "" {
		o.NodeBinary = defaultNodeBinary()
	}
	if o.HeartbeatEvery == 0 {
		o.HeartbeatEvery = DefaultHeartbeatEvery
	}
	if o.WatchEvery == 0 {
		o.WatchEvery = DefaultWatchEvery
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	if o.HealthPort == 0 {
		o.HealthPort = DefaultHealthPort
	}
	if o.RealNodes && o.NodeStack == "" {
		o.NodeStack = os.Getenv("CAPN_NODESTACK_BIN")
	}
	if o.RealNodes && o.NodeImages == "" {
		o.NodeImages = os.Getenv("CAPN_NODEIMAGES")
	}
	if o.apiServerPort == 0 {
		o.apiServerPort = DefaultAPIServerPort
	}
	// Machines run in directories of their own: a relative path would
	// name another directory there.
	if o.KubeBin != "" {
		dirs := SplitKubeBin(o.KubeBin)
		for i, d := range dirs {
			if abs, err := filepath.Abs(d); err == nil && !filepath.IsAbs(d) {
				dirs[i] = abs
			}
		}
		o.KubeBin = strings.Join(dirs, string(filepath.ListSeparator))
	}
	return o
}

// defaultNodeBinary is capn-node beside this executable, else on PATH.
func defaultNodeBinary() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), NodeBinaryName)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	if p, err := exec.LookPath(NodeBinaryName); err == nil {
		return p
	}
	return ""
}

// Validate reports every problem at once.
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	bad := func(flag, value, problem string) {
		errs = append(errs, &daemon.FieldError{Flag: flag, Env: envOf(flag), Value: value, Problem: problem})
	}
	if runtime.GOOS != "linux" {
		bad("", runtime.GOOS, "the process provider needs Linux (/proc)")
	}
	switch fi, err := os.Stat(o.NodeBinary); {
	case o.NodeBinary == "":
		bad("process-node-binary", "", "capn-node was not found beside this program nor on PATH: build it (make build) and give its path")
	case err != nil:
		bad("process-node-binary", o.NodeBinary, err.Error())
	case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
		bad("process-node-binary", o.NodeBinary, "not an executable file")
	}
	if o.StateDir == "" || !filepath.IsAbs(o.StateDir) {
		bad("process-state-dir", o.StateDir, "required: an absolute path")
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
		min  time.Duration
	}{{"process-heartbeat-every", o.HeartbeatEvery, 10 * time.Millisecond}, {"process-watch-every", o.WatchEvery, 10 * time.Millisecond}, {"process-stop-timeout", o.StopTimeout, 0}} {
		if d.v < d.min || d.v < 0 {
			bad(d.flag, d.v.String(), fmt.Sprintf("must be at least %s", d.min))
		}
	}
	if (o.NodeNATSTLSCert == "") != (o.NodeNATSTLSKey == "") {
		bad("process-node-nats-tls-key", o.NodeNATSTLSKey, "--process-node-nats-tls-cert and --process-node-nats-tls-key go together")
	}
	if o.HealthPort < -1 || o.HealthPort > 65535 {
		bad("process-health-port", fmt.Sprint(o.HealthPort), "must be a port, or -1 for none")
	}
	for _, d := range SplitKubeBin(o.KubeBin) {
		if fi, err := os.Stat(d); err != nil {
			bad("kube-bin", d, err.Error())
		} else if !fi.IsDir() {
			bad("kube-bin", d, "not a directory: give the directories of the Kubernetes binaries, colon-separated (make kube; hack/kube.sh --print-path prints one)")
		}
	}
	if o.RealNodes {
		if err := checkRealNodes(o); err != nil {
			bad("process-real-nodes", "true", err.Error())
		}
	}
	return errors.Join(errs...)
}

// Flags binds the options to --process-* flags and CAPN_PROCESS_* variables.
func (o *Options) Flags() []daemon.Flag {
	f := func(name, usage string, v interface {
		Set(string) error
		String() string
	}) daemon.Flag {
		return daemon.Flag{Name: name, Env: envOf(name), Usage: usage, Value: v}
	}
	return []daemon.Flag{
		f("process-node-binary", "capn-node `path` machines run (default: beside this program, else PATH)", daemon.StringValue(&o.NodeBinary)),
		f("process-state-dir", "`dir` of clusters, machines and their data (required)", daemon.StringValue(&o.StateDir)),
		f("process-node-nats-url", "NATS `url` machines connect to (default: this provider's)", daemon.StringValue(&o.NodeNATSURL)),
		f("process-node-nats-creds", "NATS credentials `file` machines authenticate with (optional)", daemon.StringValue(&o.NodeNATSCreds)),
		f("process-node-nats-nkey", "NATS nkey seed `file` machines authenticate with (optional)", daemon.StringValue(&o.NodeNATSNKey)),
		f("process-node-nats-tls-ca", "CA `file` machines verify the NATS servers with (optional)", daemon.StringValue(&o.NodeNATSTLSCA)),
		f("process-node-nats-tls-cert", "NATS client certificate `file` of machines (optional, with the key)", daemon.StringValue(&o.NodeNATSTLSCert)),
		f("process-node-nats-tls-key", "NATS client key `file` of machines (optional, with the certificate)", daemon.StringValue(&o.NodeNATSTLSKey)),
		f("process-node-nats-inbox-prefix", "machines' reply subject `prefix` (default: a machine logging in as itself uses _INBOX_machine.<cluster>.<machine>, else _INBOX)", daemon.StringValue(&o.NodeNATSInboxPrefix)),
		f("process-heartbeat-every", "machines' heartbeat `interval` (0: 10s)", daemon.DurationValue(&o.HeartbeatEvery)),
		f("process-watch-every", "`interval` of the check for machine processes that exited (0: 1s)", daemon.DurationValue(&o.WatchEvery)),
		f("process-stop-timeout", "`time` a machine gets after SIGTERM before SIGKILL (0: 10s)", daemon.DurationValue(&o.StopTimeout)),
		f("process-health-port", "`port` of each machine's /healthz on its own address (0: 10248, -1: none)", daemon.IntValue(&o.HealthPort)),
		f("process-real-nodes", "machines are real nodes: network and mount namespaces, containerd and a kubelet each, running their kubeadm bootstrap data (needs root, make nodestack nodeimages)", daemon.BoolValue(&o.RealNodes)),
		f("process-node-stack", "real nodes' `dirs` \"<containerd/runc/CNI bin>:<kubelet/kubeadm bin>\" (default $CAPN_NODESTACK_BIN; make -s nodestack-bin)", daemon.StringValue(&o.NodeStack)),
		f("process-node-images", "real nodes' image `dir` with images.txt (default $CAPN_NODEIMAGES; make nodeimages)", daemon.StringValue(&o.NodeImages)),
		f("kube-bin", "`dirs` of the Kubernetes binaries, one per version, colon-separated: each machine whose bootstrap data asks runs those of its version (make kube; empty: no Kubernetes)", daemon.StringValue(&o.KubeBin)),
	}
}

// envOf is CAPN_ and the flag name in upper snake case.
func envOf(flag string) string {
	if flag == "" {
		return ""
	}
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
