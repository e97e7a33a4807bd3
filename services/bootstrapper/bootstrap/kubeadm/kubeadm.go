// Package kubeadm is the default bootstrap provider: a cloud-init
// #cloud-config that writes the cluster PKI (control-plane machines only),
// the user's files and a kubeadm v1beta4 configuration, then runs the
// user's pre-commands, kubeadm init or join, the Cluster API success
// sentinel, and the user's post-commands — as Cluster API's kubeadm
// bootstrap provider does.
package kubeadm

import (
	"errors"
	"fmt"
	"slices"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/cloudinit"
)

// Name selects this provider in bootstrap.provider.
const Name = "kubeadm"

// MinMinor is the oldest Kubernetes minor version (1.x) whose kubeadm reads
// kubeadm.k8s.io/v1beta4 and ECDSA-P256.
const MinMinor = 31

// Provider is the kubeadm bootstrap provider. The zero value is ready to
// use and safe for concurrent use.
type Provider struct{}

// New returns the kubeadm provider.
func New() Provider { return Provider{} }

// Name implements bootstrap.Provider.
func (Provider) Name() string { return Name }

// ValidateSpec implements bootstrap.Provider: kubeadm renders everything
// itself, so userData (the script provider's) is refused.
func (Provider) ValidateSpec(path string, spec *capnv1.BootstrapSpec) error {
	if spec.GetUserData() != "" {
		return fmt.Errorf("%s.userData: only the script provider reads userData; remove it or set provider: script", path)
	}
	return nil
}

// Render implements bootstrap.Provider.
func (p Provider) Render(in bootstrap.Input) (bootstrap.Output, error) {
	if err := in.Validate(); err != nil {
		return bootstrap.Output{}, err
	}
	var errs []error
	if major, minor, _ := bootstrap.ParseVersion(in.KubernetesVersion); major != 1 || minor < MinMinor {
		errs = append(errs, fmt.Errorf("version %s: the kubeadm provider needs Kubernetes v1.%d or newer (kubeadm.k8s.io/v1beta4)", in.KubernetesVersion, MinMinor))
	}
	errs = append(errs, p.ValidateSpec("bootstrap", in.Spec))
	if err := errors.Join(errs...); err != nil {
		return bootstrap.Output{}, err
	}

	var (
		files      []bootstrap.File
		configPath string
		config     []byte
		err        error
		command    string
	)
	if in.Role == bootstrap.RoleControlPlane {
		// Workers get nothing here: kubeadm join writes ca.crt from
		// discovery, and refuses to run if it already exists.
		files = append(files, bootstrap.PKIFiles(in.PKI)...)
	}
	files = append(files, bootstrap.UserFiles(in.Spec)...)
	if in.FirstControlPlane {
		configPath = bootstrap.KubeadmInitConfig
		config, err = initConfig(in)
		command = "kubeadm init --config " + configPath
	} else {
		configPath = bootstrap.KubeadmJoinConfig
		config, err = joinConfig(in)
		command = "kubeadm join --config " + configPath
	}
	if err != nil {
		return bootstrap.Output{}, fmt.Errorf("kubeadm config: %w", err)
	}
	// The config holds the bootstrap token: root only.
	files = append(files, bootstrap.File{Path: configPath, Content: config, Owner: "root:root", Permissions: "0600"})

	runcmd := slices.Clone(in.Spec.GetPreCommands())
	runcmd = append(runcmd, command+" && mkdir -p /run/cluster-api && echo success > "+bootstrap.SentinelFile)
	runcmd = append(runcmd, in.Spec.GetPostCommands()...)

	data, err := cloudinit.Marshal(cloudinit.Config{WriteFiles: cloudinit.Files(files), RunCmd: runcmd})
	if err != nil {
		return bootstrap.Output{}, err
	}
	return bootstrap.Output{Format: bootstrap.FormatCloudConfig, Data: data}, nil
}
