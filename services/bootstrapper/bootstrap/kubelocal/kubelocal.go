// Package kubelocal is the kube-local bootstrap provider: bootstrap data
// for machines whose node agent (capn-node, given --kube-bin) runs the
// Kubernetes control plane itself from plain binaries, with no kubeadm,
// kubelet or container runtime — the process and docker providers'
// machines.
//
// It renders a #cloud-config whose write_files carry:
//   - the role's PKI under /etc/kubernetes/pki (control plane: the cluster,
//     etcd and front-proxy CAs with their keys, and the service-account key
//     pair; worker: the cluster CA certificate only);
//   - the spec's files;
//   - /etc/capn/kube-local.json (0600: it holds the bootstrap token), the
//     NodeConfig the node side reads: cluster, node name, role, first
//     control plane, version, endpoint, service and pod CIDR, DNS domain,
//     token and its TTL, CA pin, labels and taints, and the pre- and
//     post-commands with their timeout.
//
// There is no runcmd: the node agent does the work, and runs the
// commands itself (before it starts its part of the cluster, and once it
// serves). It issues the leaf
// certificates from the CA keys (the machine's address is only known on the
// machine), runs etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler, registers the join material and the Node, and runs kwok in
// place of a kubelet. See cmd/capn-node/kube and docs/bootstrap.md.
package kubelocal

import (
	"errors"
	"fmt"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/cloudinit"
)

// Name selects this provider in bootstrap.provider.
const Name = "kube-local"

// MinMinor is the oldest Kubernetes minor version (1.x) the node side's
// flags are written for (those of kubeadm v1.31's static pods).
const MinMinor = 31

// ReservedPrefixes are directories the node side writes (its config, the
// leaf certificates it issues); the spec's files may not go there.
var ReservedPrefixes = []string{"/etc/capn/", bootstrap.PKIDir + "/"}

// Provider is the kube-local bootstrap provider. The zero value is ready to
// use and safe for concurrent use.
type Provider struct{}

// New returns the kube-local provider.
func New() Provider { return Provider{} }

// Name implements bootstrap.Provider.
func (Provider) Name() string { return Name }

// ValidateSpec implements bootstrap.Provider. The node side runs no
// kubelet, so kubelet arguments and user data are refused rather than
// silently dropped; files are written, except where the node side writes
// its own; the commands run on the node (capn-node).
func (Provider) ValidateSpec(path string, spec *capnv1.BootstrapSpec) error {
	var errs []error
	if spec.GetUserData() != "" {
		errs = append(errs, fmt.Errorf("%s.userData: only the script provider reads userData; remove it or set provider: script", path))
	}
	switch bootstrap.Format(spec.GetFormat()) {
	case "", bootstrap.FormatCloudConfig:
	default:
		errs = append(errs, fmt.Errorf("%s.format: %q: the kube-local provider renders %s only (capn-node reads it)", path, spec.GetFormat(), bootstrap.FormatCloudConfig))
	}
	if len(spec.GetKubeletExtraArgs()) > 0 {
		errs = append(errs, fmt.Errorf("%s.kubeletExtraArgs: no kubelet runs under the kube-local provider (kwok stands in for it); remove them", path))
	}
	if len(spec.GetIgnorePreflightErrors()) > 0 {
		errs = append(errs, fmt.Errorf("%s.ignorePreflightErrors: no kubeadm runs under the kube-local provider; remove them", path))
	}
	for i, f := range spec.GetFiles() {
		for _, p := range ReservedPrefixes {
			if strings.HasPrefix(f.GetPath(), p) {
				errs = append(errs, fmt.Errorf("%s.files[%d].path: %q is under %s, which the kube-local node side writes", path, i, f.GetPath(), p))
			}
		}
	}
	return errors.Join(errs...)
}

// Render implements bootstrap.Provider.
func (p Provider) Render(in bootstrap.Input) (bootstrap.Output, error) {
	if err := in.Validate(); err != nil {
		return bootstrap.Output{}, err
	}
	if err := bootstrap.LinuxOnly(Name, in); err != nil {
		return bootstrap.Output{}, err
	}
	var errs []error
	if major, minor, _ := bootstrap.ParseVersion(in.KubernetesVersion); major != 1 || minor < MinMinor {
		errs = append(errs, fmt.Errorf("version %s: the kube-local provider needs Kubernetes v1.%d or newer", in.KubernetesVersion, MinMinor))
	}
	service, pod, domain, netErrs := network(in.Network)
	errs = append(errs, netErrs...)
	errs = append(errs, p.ValidateSpec("bootstrap", in.Spec))
	if err := errors.Join(errs...); err != nil {
		return bootstrap.Output{}, err
	}
	cfg := NodeConfig{
		APIVersion:        APIVersion,
		Kind:              Kind,
		Cluster:           in.Cluster,
		NodeName:          in.Machine,
		Role:              string(in.Role),
		FirstControlPlane: in.FirstControlPlane,
		KubernetesVersion: in.KubernetesVersion,
		Endpoint:          Endpoint{Host: in.Endpoint.Host, Port: in.Endpoint.Port},
		ServiceCIDR:       service,
		PodCIDR:           pod,
		DNSDomain:         domain,
		BootstrapToken:    in.Token.Value(),
		TokenTTL:          in.TokenTTL.String(),
		CACertHash:        in.CACertHash,
		Labels:            in.Labels,
		Taints:            taintsFor(in),
		PreCommands:       in.Spec.GetPreCommands(),
		PostCommands:      in.Spec.GetPostCommands(),
	}
	if d := in.Spec.GetCommandTimeout(); d != nil {
		cfg.CommandTimeout = d.AsDuration().String()
	}
	if err := cfg.Validate(); err != nil {
		// The Input was valid, so this is a bug here; say so plainly.
		return bootstrap.Output{}, fmt.Errorf("kube-local rendered an invalid node config: %w", err)
	}
	config, err := cfg.Marshal()
	if err != nil {
		return bootstrap.Output{}, err
	}
	// PKIFiles writes only what the Input carries: a worker's has the CA
	// certificate and nothing else.
	files := bootstrap.PKIFiles(in.PKI)
	files = append(files, bootstrap.UserFiles(in.Spec)...)
	files = append(files, bootstrap.File{Path: ConfigPath, Content: config, Owner: "root:root", Permissions: "0600"})
	data, err := cloudinit.Marshal(cloudinit.Config{WriteFiles: cloudinit.Files(files)})
	if err != nil {
		return bootstrap.Output{}, err
	}
	return bootstrap.Output{Format: bootstrap.FormatCloudConfig, Data: data}, nil
}
