// Package kubeadm is the default bootstrap provider, as Cluster API's
// kubeadm bootstrap provider: the cluster PKI (control-plane machines
// only), the user's files and a kubeadm v1beta4 configuration, then the
// user's pre-commands, kubeadm init or join, the Cluster API success
// sentinel, and the user's post-commands. It renders three ways:
//
//   - linux, format cloud-config (default): a cloud-init #cloud-config
//     (write_files, runcmd); each user command runs under coreutils timeout;
//   - linux, format ignition: an Ignition v3 config (Flatcar, Fedora
//     CoreOS): storage.files and a oneshot systemd unit running
//     /etc/capn/bootstrap.sh (ignition.go);
//   - windows workers: a #cloud-config for cloudbase-init whose runcmd runs
//     a PowerShell script: files under C:\, the kubelet service, kubeadm
//     join (windows.go).
package kubeadm

import (
	"errors"
	"fmt"

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

// ValidateSpec implements bootstrap.Provider for linux machines: kubeadm
// renders everything itself, so userData (the script provider's) is
// refused, and the format is cloud-config or ignition.
func (Provider) ValidateSpec(path string, spec *capnv1.BootstrapSpec) error {
	var errs []error
	if spec.GetUserData() != "" {
		errs = append(errs, fmt.Errorf("%s.userData: only the script provider reads userData; remove it or set provider: script", path))
	}
	switch bootstrap.Format(spec.GetFormat()) {
	case "", bootstrap.FormatCloudConfig, bootstrap.FormatIgnition:
	default:
		errs = append(errs, fmt.Errorf("%s.format: %q: the kubeadm provider renders %s or %s (a script is the script provider's)", path, spec.GetFormat(), bootstrap.FormatCloudConfig, bootstrap.FormatIgnition))
	}
	return errors.Join(errs...)
}

// OperatingSystems implements bootstrap.OSProvider.
func (Provider) OperatingSystems() []bootstrap.OS {
	return []bootstrap.OS{bootstrap.OSLinux, bootstrap.OSWindows}
}

// ValidateOS implements bootstrap.OSProvider: windows machines take
// cloud-config (cloudbase-init), and the kubelet flags capn sets for
// Windows or that only a Linux kubelet has are refused.
func (Provider) ValidateOS(path string, os bootstrap.OS, spec *capnv1.BootstrapSpec) error {
	var errs []error
	if spec.GetUserData() != "" {
		errs = append(errs, fmt.Errorf("%s.userData: only the script provider reads userData; remove it", path))
	}
	switch bootstrap.Format(spec.GetFormat()) {
	case "", bootstrap.FormatCloudConfig:
	default:
		errs = append(errs, fmt.Errorf("%s.format: %q: %s machines take %s (cloudbase-init); ignition is for Flatcar and Fedora CoreOS", path, spec.GetFormat(), os, bootstrap.FormatCloudConfig))
	}
	for _, k := range sortedKeys(spec.GetKubeletExtraArgs()) {
		if why, ok := windowsKubeletArgs[k]; ok {
			errs = append(errs, fmt.Errorf("%s.kubeletExtraArgs[%q]: %s", path, k, why))
		}
	}
	return errors.Join(errs...)
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
	if in.OS == bootstrap.OSWindows {
		errs = append(errs, p.ValidateOS("bootstrap", in.OS, in.Spec))
	} else {
		errs = append(errs, p.ValidateSpec("bootstrap", in.Spec))
	}
	if err := errors.Join(errs...); err != nil {
		return bootstrap.Output{}, err
	}
	if in.OS == bootstrap.OSWindows {
		return renderWindows(in)
	}
	if bootstrap.Format(in.Spec.GetFormat()) == bootstrap.FormatIgnition {
		return renderIgnition(in)
	}
	if !in.FirstControlPlane {
		// A join: from its pool's template (template.go), the same bytes.
		if data, ok := renderJoin(in); ok {
			return bootstrap.Output{Format: bootstrap.FormatCloudConfig, Data: data}, nil
		}
	}
	return renderCloudConfig(in)
}

// renderCloudConfig renders a linux machine's cloud-config in full.
func renderCloudConfig(in bootstrap.Input) (bootstrap.Output, error) {
	config, verb, err := kubeadmConfig(in)
	if err != nil {
		return bootstrap.Output{}, err
	}
	configPath := bootstrap.KubeadmJoinConfig
	if in.FirstControlPlane {
		configPath = bootstrap.KubeadmInitConfig
	}
	files := linuxFiles(in)
	// The config holds the bootstrap token: root only.
	files = append(files, bootstrap.File{Path: configPath, Content: config, Owner: "root:root", Permissions: "0600"})
	data, err := cloudinit.Marshal(cloudinit.Config{WriteFiles: cloudinit.Files(files), RunCmd: runCmd(in, verb, configPath)})
	if err != nil {
		return bootstrap.Output{}, err
	}
	return bootstrap.Output{Format: bootstrap.FormatCloudConfig, Data: data}, nil
}

// runCmd is the runcmd of a linux machine's cloud-config: each user
// command in a shell of its own, under the timeout; the kubeadm line as
// Cluster API writes it.
func runCmd(in bootstrap.Input, verb, configPath string) []any {
	command := "kubeadm " + verb + " --config " + configPath
	timeout := bootstrap.CommandTimeout(in.Spec)
	var runcmd []any
	for _, c := range in.Spec.GetPreCommands() {
		runcmd = append(runcmd, bootstrap.TimeoutArgv(c, timeout))
	}
	runcmd = append(runcmd, command+" && mkdir -p /run/cluster-api && echo success > "+bootstrap.SentinelFile)
	for _, c := range in.Spec.GetPostCommands() {
		runcmd = append(runcmd, bootstrap.TimeoutArgv(c, timeout))
	}
	return runcmd
}

// kubeadmConfig is the machine's kubeadm configuration and the kubeadm
// verb that reads it: init on the first control-plane machine, join on
// every other.
func kubeadmConfig(in bootstrap.Input) (config []byte, verb string, err error) {
	verb = "join"
	if in.FirstControlPlane {
		verb = "init"
		config, err = initConfig(in)
	} else {
		config, err = joinConfig(in)
	}
	if err != nil {
		return nil, "", fmt.Errorf("kubeadm config: %w", err)
	}
	return config, verb, nil
}

// linuxFiles are the files a linux machine gets before its kubeadm
// config: the shared PKI on control-plane machines (workers get none:
// kubeadm join writes ca.crt from discovery, and refuses to run if it
// already exists), then the user's files.
func linuxFiles(in bootstrap.Input) []bootstrap.File {
	var files []bootstrap.File
	if in.Role == bootstrap.RoleControlPlane {
		files = append(files, bootstrap.PKIFiles(in.PKI)...)
	}
	return append(files, bootstrap.UserFiles(in.Spec)...)
}
