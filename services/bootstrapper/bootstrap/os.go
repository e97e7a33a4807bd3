package bootstrap

import (
	"fmt"
	"regexp"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// OS is a machine's operating system, as in WorkerPool.os and
// MachineSpec.os.
type OS string

// Operating systems. An empty os is linux.
const (
	OSLinux   OS = "linux"
	OSWindows OS = "windows"
)

// OSOf reads a spec's os: "" is linux.
func OSOf(s string) OS {
	if s == "" {
		return OSLinux
	}
	return OS(s)
}

// Valid is true for linux and windows.
func (o OS) Valid() bool { return o == OSLinux || o == OSWindows }

// OSProvider is a Provider that renders machines of other operating
// systems than linux. A provider that does not implement it renders linux
// machines only, and the registry refuses any other os for it.
type OSProvider interface {
	Provider
	// OperatingSystems lists what the provider renders, linux first.
	OperatingSystems() []OS
	// ValidateOS checks an effective spec for machines of os (one of
	// OperatingSystems but linux, which ValidateSpec covers): path is the
	// bootstrap spec's field path, as for ValidateSpec.
	ValidateOS(path string, os OS, spec *capnv1.BootstrapSpec) error
}

// Windows paths. A Windows file path is a drive letter, a colon and a
// separator, then names; / and \ both separate (cloudbase-init writes
// either). The names may not hold what Windows refuses in a file name.
var windowsPathRe = regexp.MustCompile(`^[A-Za-z]:[\\/]([^<>:"|?*\x00-\x1f\\/]+[\\/])*[^<>:"|?*\x00-\x1f\\/]+$`)

// IsWindowsPath is true for a clean absolute Windows path such as
// C:\k\config.yaml or C:/k/config.yaml: no empty, "." or ".." name, no
// trailing separator, no name ending in a dot or space.
func IsWindowsPath(p string) bool {
	if !windowsPathRe.MatchString(p) {
		return false
	}
	for _, name := range strings.FieldsFunc(p[3:], func(r rune) bool { return r == '\\' || r == '/' }) {
		if name == "." || name == ".." || strings.HasSuffix(name, ".") || strings.HasSuffix(name, " ") {
			return false
		}
	}
	return true
}

// WindowsPathKey is p as Windows compares paths: case folded, with /.
func WindowsPathKey(p string) string {
	return strings.ToLower(strings.ReplaceAll(p, `\`, "/"))
}

// Paths capn writes on Windows machines (cloudbase-init maps /run to C:\run
// the same way Cluster API's Windows flavours do).
const (
	WindowsKubeadmJoinConfig = `C:\run\kubeadm\kubeadm-join-config.yaml`
	WindowsSentinelFile      = `C:\run\cluster-api\bootstrap-success.complete`
	// WindowsCapnDir holds capn's bootstrap script.
	WindowsCapnDir = `C:\capn`
	// WindowsKubeDir is where a Windows machine image keeps kubeadm.exe
	// and kubelet.exe (Cluster API's image-builder puts them there).
	WindowsKubeDir = `C:\k`
)

// IsReservedWindowsPath is true for the Windows paths capn writes itself:
// the kubeadm config, the sentinel and anything under C:\capn.
func IsReservedWindowsPath(p string) bool {
	k := WindowsPathKey(p)
	switch k {
	case WindowsPathKey(WindowsKubeadmJoinConfig), WindowsPathKey(WindowsSentinelFile):
		return true
	}
	dir := WindowsPathKey(WindowsCapnDir)
	return k == dir || strings.HasPrefix(k, dir+"/")
}

// validateOS is the registry's check of a level's os against the provider
// it selects.
func validateOS(osPath string, os OS, p Provider) error {
	if !os.Valid() {
		return fmt.Errorf("%s: %q: want %s or %s", osPath, os, OSLinux, OSWindows)
	}
	if os == OSLinux {
		return nil
	}
	if op, ok := p.(OSProvider); ok {
		for _, o := range op.OperatingSystems() {
			if o == os {
				return nil
			}
		}
	}
	return fmt.Errorf("%s: %s machines are not rendered by the %s bootstrap provider (it renders linux only); use the kubeadm provider for them", osPath, os, p.Name())
}

// LinuxOnly is the check a provider that renders linux machines only makes
// in Render (the registry refuses other systems earlier, with the field's
// path).
func LinuxOnly(provider string, in Input) error {
	if in.OS != OSLinux {
		return fmt.Errorf("os %s: the %s bootstrap provider renders %s machines only", in.OS, provider, OSLinux)
	}
	return nil
}
