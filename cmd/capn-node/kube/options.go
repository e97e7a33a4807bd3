// Package kube is the node side of the kube-local bootstrap provider: from
// the applied /etc/capn/kube-local.json and the CA keys under
// /etc/kubernetes/pki (both under the machine's rootfs), it runs this
// machine's part of a real Kubernetes control plane from plain binaries.
//
// On the first control-plane machine it
//
//  1. checks the binaries are the declared Kubernetes version;
//  2. issues the leaf certificates and kubeconfigs from the CA keys, as
//     kubeadm's certs and kubeconfig phases do (kept while valid);
//  3. runs etcd, kube-apiserver, kube-controller-manager and kube-scheduler
//     as supervised children, with kubeadm's static-pod flags, bound to the
//     machine's address;
//  4. once the API server answers /readyz, applies kubeadm's bootstrap-token
//     RBAC, the cluster-info ConfigMap and the bootstrap-token Secret, and
//     registers the machine's Node;
//  5. runs kwok in place of a kubelet for that Node (Ready, lease, pods).
//
// Another control-plane machine joins: it registers its Node through the
// endpoint, adds itself to etcd as a learner, is promoted, and runs the
// rest as the first does (etcd.go; runtime.go's joinEtcd). Every control
// plane removes the etcd members of control-plane machines whose Node is
// gone. A worker joins as a kubelet's TLS bootstrap does (bootstrap token,
// CSR, client certificate), registers its Node and runs kwok for it.
// It talks to the API server with net/http and encoding/json (no
// client-go).
package kube

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Ports a control-plane machine listens on, all bound to its address.
type Ports struct {
	EtcdClient        int
	EtcdPeer          int
	APIServer         int
	ControllerManager int
	Scheduler         int
}

// DefaultPorts are kubeadm's.
var DefaultPorts = Ports{EtcdClient: 2379, EtcdPeer: 2380, APIServer: 6443, ControllerManager: 10257, Scheduler: 10259}

// portNames are the names ParsePorts reads, in String's order.
var portNames = []string{"etcd-client", "etcd-peer", "apiserver", "controller-manager", "scheduler"}

func (p *Ports) fields() []*int {
	return []*int{&p.EtcdClient, &p.EtcdPeer, &p.APIServer, &p.ControllerManager, &p.Scheduler}
}

// String is the ParsePorts form of every port.
func (p Ports) String() string {
	parts := make([]string, len(portNames))
	for i, f := range p.fields() {
		parts[i] = portNames[i] + "=" + strconv.Itoa(*f)
	}
	return strings.Join(parts, ",")
}

// ParsePorts reads "name=port,..." over DefaultPorts, names among
// etcd-client, etcd-peer, apiserver, controller-manager, scheduler. Ports
// must be 1-65535 and distinct.
func ParsePorts(s string) (Ports, error) {
	p := DefaultPorts
	if strings.TrimSpace(s) == "" {
		return p, nil
	}
	var errs []error
	for item := range strings.SplitSeq(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		i := slices.Index(portNames, name)
		if !ok || i < 0 {
			errs = append(errs, fmt.Errorf("%q: want name=port with name one of %s", item, strings.Join(portNames, ", ")))
			continue
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 || n > 65535 {
			errs = append(errs, fmt.Errorf("%s=%s: want a port 1-65535", name, val))
			continue
		}
		*p.fields()[i] = n
	}
	seen := map[int]string{}
	for i, f := range p.fields() {
		if other, dup := seen[*f]; dup {
			errs = append(errs, fmt.Errorf("%s and %s are both %d", other, portNames[i], *f))
		}
		seen[*f] = portNames[i]
	}
	return p, errors.Join(errs...)
}

// Options is what the agent knows that the node config does not.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler and kwok.
	BinDir string
	// DataDir is the machine's data dir: the bootstrap files are under
	// <DataDir>/rootfs, logs go to <DataDir>/logs.
	DataDir string
	// Address is the machine's own IP address: everything binds to it.
	Address string
	// ProviderID, when set, becomes the Node's spec.providerID.
	ProviderID string
	// Capacity, when set, is the Node's capacity and allocatable
	// (nodecapacity: cpu, memory, pods); kwok's defaults otherwise.
	Capacity map[string]string
	// Ports default to DefaultPorts.
	Ports Ports
	// LearnerTimeout is how long a control plane's sweep lets an etcd
	// learner stay unstarted or unpromoted before it removes it (default
	// DefaultLearnerTimeout): a learner whose machine died blocks every
	// later join, since etcd allows one learner at a time.
	LearnerTimeout time.Duration
	// Log receives the runtime's progress.
	Log zerolog.Logger
}

// DefaultLearnerTimeout is Options.LearnerTimeout's default.
const DefaultLearnerTimeout = 2 * time.Minute

// Validate reports every problem at once.
func (o Options) Validate() error {
	var errs []error
	if o.BinDir == "" || !filepath.IsAbs(o.BinDir) {
		errs = append(errs, fmt.Errorf("kube-bin %q: want an absolute directory", o.BinDir))
	}
	if o.DataDir == "" || !filepath.IsAbs(o.DataDir) {
		errs = append(errs, fmt.Errorf("data-dir %q: want an absolute directory", o.DataDir))
	}
	if a, err := netip.ParseAddr(o.Address); err != nil || a.Zone() != "" {
		errs = append(errs, fmt.Errorf("address %q: want the machine's IP address", o.Address))
	}
	if o.LearnerTimeout < 0 {
		errs = append(errs, fmt.Errorf("etcd-learner-timeout %s: want a positive duration (0: the default %s)", o.LearnerTimeout, DefaultLearnerTimeout))
	}
	return errors.Join(errs...)
}

// Layout of the files the node side reads and writes, under the rootfs.
type Layout struct {
	RootFS string
}

// Paths under the rootfs, as kubeadm lays them out.
func (l Layout) path(p string) string { return filepath.Join(l.RootFS, filepath.FromSlash(p)) }

// PKIDir is <rootfs>/etc/kubernetes/pki.
func (l Layout) PKIDir() string { return l.path("/etc/kubernetes/pki") }

// KubeconfigPath is <rootfs>/etc/kubernetes/<name>.conf.
func (l Layout) KubeconfigPath(name string) string {
	return l.path("/etc/kubernetes/" + name + ".conf")
}

// AdminKubeconfig is the local admin's kubeconfig (system:masters), the
// one the agent, kwok and an operator on the machine use.
func (l Layout) AdminKubeconfig() string { return l.KubeconfigPath("admin") }

// EtcdDataDir is <rootfs>/var/lib/etcd.
func (l Layout) EtcdDataDir() string { return l.path("/var/lib/etcd") }

// CertDir is where the components would write self-signed serving
// certificates (kept inside the rootfs, never the real /var/run).
func (l Layout) CertDir() string { return l.path("/var/run/kubernetes") }

// KwokConfig is kwok's configuration (its stages).
func (l Layout) KwokConfig() string { return l.path("/etc/kubernetes/kwok.yaml") }
