// Package script is the bootstrap provider for users who bring their own
// user data (bootstrap.userData). capn adds only the join material it owns
// and otherwise runs the user's data as is:
//
//   - userData starting with "#!" (any interpreter): the output is a
//     /bin/sh script that writes the join material and the user's files,
//     saves the user's script byte for byte to /run/capn/user-data, and
//     execs it with the join variables exported. Format "script".
//   - userData starting with "#cloud-config": the same files are appended
//     to the user's write_files; the user's runcmd sources
//     /run/capn/join.env. Format "cloud-config". The document is
//     re-serialised, so YAML comments are not kept.
//
// Join material: /run/capn/join.env (0600, shell variable assignments, see
// Env), /run/capn/ca.crt (the cluster CA certificate), and on
// control-plane machines the shared PKI under /etc/kubernetes/pki, where
// kubeadm looks for it. preCommands and postCommands are refused: put them
// in userData.
package script

import (
	"errors"
	"fmt"
	"path"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/cloudinit"
)

// Name selects this provider in bootstrap.provider.
const Name = "script"

// Paths of the join material.
var (
	EnvFile      = path.Join(bootstrap.CapnDir, "join.env")
	CACertFile   = path.Join(bootstrap.CapnDir, "ca.crt")
	UserDataFile = path.Join(bootstrap.CapnDir, "user-data")
)

// Provider is the script bootstrap provider. The zero value is ready to use
// and safe for concurrent use.
type Provider struct{}

// New returns the script provider.
func New() Provider { return Provider{} }

// Name implements bootstrap.Provider.
func (Provider) Name() string { return Name }

// ValidateSpec implements bootstrap.Provider.
func (Provider) ValidateSpec(path string, spec *capnv1.BootstrapSpec) error {
	var errs []error
	ud := spec.GetUserData()
	switch {
	case ud == "":
		errs = append(errs, fmt.Errorf("%s.userData: required by the script provider (a script starting with #! or a #cloud-config document)", path))
	case !strings.HasPrefix(ud, "#!") && !cloudinit.IsCloudConfig([]byte(ud)):
		errs = append(errs, fmt.Errorf("%s.userData: must start with #! (a script) or #cloud-config", path))
	}
	switch f := bootstrap.Format(spec.GetFormat()); {
	case f == "":
	case f == bootstrap.FormatIgnition:
		errs = append(errs, fmt.Errorf("%s.format: %q: the script provider renders what its userData is (a script or a cloud-config); ignition is the kubeadm provider's", path, f))
	case f == bootstrap.FormatScript && ud != "" && !strings.HasPrefix(ud, "#!"),
		f == bootstrap.FormatCloudConfig && ud != "" && !cloudinit.IsCloudConfig([]byte(ud)):
		errs = append(errs, fmt.Errorf("%s.format: %q does not match userData, which starts with %q", path, f, firstLine(ud)))
	}
	if len(spec.GetIgnorePreflightErrors()) > 0 {
		errs = append(errs, fmt.Errorf("%s.ignorePreflightErrors: the script provider runs userData as is; pass --ignore-preflight-errors to kubeadm in userData (this includes names inherited from spec.bootstrap)", path))
	}
	for _, l := range []struct {
		field string
		cmds  []string
	}{{"preCommands", spec.GetPreCommands()}, {"postCommands", spec.GetPostCommands()}} {
		if len(l.cmds) > 0 {
			errs = append(errs, fmt.Errorf("%s.%s: the script provider runs userData as is; put these commands in userData (this includes commands inherited from spec.bootstrap)", path, l.field))
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
	if err := p.ValidateSpec("bootstrap", in.Spec); err != nil {
		return bootstrap.Output{}, err
	}
	files := []bootstrap.File{
		{Path: EnvFile, Content: []byte(Env(in)), Owner: "root:root", Permissions: "0600"},
		{Path: CACertFile, Content: in.PKI.CACert, Owner: "root:root", Permissions: "0644"},
	}
	if in.Role == bootstrap.RoleControlPlane {
		files = append(files, bootstrap.PKIFiles(in.PKI)...)
	}
	files = append(files, bootstrap.UserFiles(in.Spec)...)

	ud := []byte(in.Spec.GetUserData())
	if cloudinit.IsCloudConfig(ud) {
		data, err := cloudinit.AppendWriteFiles(ud, cloudinit.Files(files))
		if err != nil {
			return bootstrap.Output{}, fmt.Errorf("bootstrap.userData: %w", err)
		}
		return bootstrap.Output{Format: bootstrap.FormatCloudConfig, Data: data}, nil
	}
	return bootstrap.Output{Format: bootstrap.FormatScript, Data: wrapScript(files, ud)}, nil
}

// firstLine is s up to its first line break, at most 40 bytes.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 40 {
		s = s[:40]
	}
	return s
}
