package bootstrap

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/token"
)

var (
	permissionsRe = regexp.MustCompile(`^0?[0-7]{3}$`)
	ownerRe       = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?$`)
	kubeletArgRe  = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	secretNameRe  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	secretKeyRe   = regexp.MustCompile(`^[-._a-zA-Z0-9]{1,253}$`)
	// preflightRe is a kubeadm preflight check's name, e.g. ImagePull,
	// Port-6443, FileAvailable--etc-kubernetes-manifests-etcd.yaml.
	preflightRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]{0,252}$`)
)

// reservedKubeletArgs are set by capn from other fields.
var reservedKubeletArgs = map[string]string{
	"node-labels": "set node labels with the pool's labels",
}

// Validate checks one BootstrapSpec as written at path (e.g.
// "spec.bootstrap" or "spec.workerPools[0].bootstrap") for linux machines
// and reports every problem at once, each prefixed with its field path. It
// checks what does not depend on inheritance; ValidateEffective adds the
// provider's own rules on a merged spec. now is the time a user-supplied CA
// must be valid at. A nil spec is valid.
func (r *Registry) Validate(path string, spec *capnv1.BootstrapSpec, now time.Time) error {
	return r.validate(path, OSLinux, spec, now)
}

// validate is Validate for machines of os: file paths are checked as
// that system's.
func (r *Registry) validate(path string, os OS, spec *capnv1.BootstrapSpec, now time.Time) error {
	if spec == nil {
		return nil
	}
	var errs []error
	add := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", path, field, fmt.Sprintf(format, a...)))
	}
	if spec.Provider != "" {
		if _, err := r.Lookup(spec.Provider); err != nil {
			add("provider", "%v", err)
		}
	}
	if f := spec.GetFormat(); f != "" && !slices.Contains(Formats, Format(f)) {
		add("format", "%q: want %s, %s or %s", f, FormatCloudConfig, FormatScript, FormatIgnition)
	}
	if d := spec.GetCommandTimeout(); d != nil {
		if v := d.AsDuration(); v < MinCommandTimeout || v > MaxCommandTimeout {
			add("commandTimeout", "%s: want between %s and %s (unset: %s)", v, MinCommandTimeout, MaxCommandTimeout, DefaultCommandTimeout)
		}
	}
	seen := map[string]int{}
	for i, f := range spec.Files {
		field := fmt.Sprintf("files[%d]", i)
		if f == nil {
			add(field, "null")
			continue
		}
		p := f.GetPath()
		key := p
		switch {
		case p == "":
			add(field+".path", "empty")
		case os == OSWindows && !IsWindowsPath(p):
			add(field+".path", "%q: a windows machine needs a drive path such as C:\\k\\config.yaml", p)
		case os == OSWindows && IsReservedWindowsPath(p):
			add(field+".path", "%q is written by capn itself and cannot be replaced", p)
		case os != OSWindows && (!strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\x00\n\r") || pathClean(p) != p):
			add(field+".path", "%q: want a clean absolute path", p)
		case os != OSWindows && IsReservedPath(p):
			add(field+".path", "%q is written by capn itself and cannot be replaced", p)
		default:
			if os == OSWindows {
				key = WindowsPathKey(p)
			}
			if j, dup := seen[key]; dup {
				add(field+".path", "%q already written by files[%d]", p, j)
			}
			seen[key] = i
		}
		if perm := f.GetPermissions(); perm != "" {
			switch {
			case os == OSWindows:
				add(field+".permissions", "%q: windows files have ACLs, not modes; remove it", perm)
			case !permissionsRe.MatchString(perm):
				add(field+".permissions", "%q: want three or four octal digits like 0644", perm)
			}
		}
		if o := f.GetOwner(); o != "" {
			switch {
			case os == OSWindows:
				add(field+".owner", "%q: cloudbase-init writes windows files as its own user; remove it", o)
			case !ownerRe.MatchString(o):
				add(field+".owner", "%q: want user or user:group", o)
			}
		}
		if ref := f.GetSecretRef(); ref != nil {
			if f.GetContent() != "" {
				add(field, "set one of content and secretRef, not both")
			}
			if ref.GetName() == "" || !secretNameRe.MatchString(ref.GetName()) {
				add(field+".secretRef.name", "%q: want a bootstrap secret's name (a DNS-1123 label: a-z, 0-9, '-')", ref.GetName())
			}
			if !secretKeyRe.MatchString(ref.GetKey()) {
				add(field+".secretRef.key", "%q: want the secret's key (letters, digits, '-', '_', '.')", ref.GetKey())
			}
		}
	}
	for _, list := range []struct {
		field string
		cmds  []string
	}{{"preCommands", spec.PreCommands}, {"postCommands", spec.PostCommands}} {
		for i, c := range list.cmds {
			if strings.TrimSpace(c) == "" {
				add(fmt.Sprintf("%s[%d]", list.field, i), "empty command")
			} else if strings.ContainsRune(c, 0) {
				add(fmt.Sprintf("%s[%d]", list.field, i), "contains a NUL byte")
			}
		}
	}
	for _, k := range sortedKeys(spec.KubeletExtraArgs) {
		field := fmt.Sprintf("kubeletExtraArgs[%q]", k)
		switch {
		case strings.HasPrefix(k, "-"):
			add(field, "write the flag name without leading dashes")
		case !kubeletArgRe.MatchString(k):
			add(field, "want a kubelet flag name (a-z, 0-9, '-')")
		case reservedKubeletArgs[k] != "":
			add(field, "set by capn; %s", reservedKubeletArgs[k])
		}
		if strings.ContainsAny(spec.KubeletExtraArgs[k], "\x00\n\r") {
			add(field, "value contains a line break or NUL byte")
		}
	}
	errs = append(errs, ValidatePreflightErrors(path+".ignorePreflightErrors", spec.GetIgnorePreflightErrors())...)
	if spec.TokenTtl != nil {
		if _, err := token.TTL(spec.TokenTtl); err != nil {
			add("tokenTtl", "%v", err)
		}
	}
	if spec.Ca != nil {
		errs = append(errs, validateCA(path+".ca", spec.Ca, now)...)
	}
	return errors.Join(errs...)
}

// ValidatePreflightErrors checks ignorePreflightErrors at path: kubeadm
// check names (letters, digits, '.', '_', '-'), each once (kubeadm
// compares them in lower case), and "all" only alone, as kubeadm requires.
func ValidatePreflightErrors(path string, names []string) []error {
	var errs []error
	seen := map[string]int{}
	for i, n := range names {
		field := fmt.Sprintf("%s[%d]", path, i)
		if !preflightRe.MatchString(n) {
			errs = append(errs, fmt.Errorf("%s: %q: want a kubeadm preflight check's name, e.g. ImagePull or Port-6443 (letters, digits, '.', '_', '-'), or all", field, n))
			continue
		}
		if j, dup := seen[strings.ToLower(n)]; dup {
			errs = append(errs, fmt.Errorf("%s: %q: given already as %s[%d]", field, n, path, j))
		}
		seen[strings.ToLower(n)] = i
	}
	if _, all := seen["all"]; all && len(names) > 1 {
		errs = append(errs, fmt.Errorf("%s: \"all\" ignores every check; give it alone (kubeadm refuses it beside check names)", path))
	}
	return errs
}

func validateCA(path string, ca *capnv1.CertificateAuthority, now time.Time) []error {
	var errs []error
	if _, err := pki.ParseCertificate([]byte(ca.GetCertificatePem())); err != nil {
		errs = append(errs, fmt.Errorf("%s.certificatePem: %w", path, err))
	}
	if _, err := pki.ParsePrivateKey([]byte(ca.GetPrivateKeyPem())); err != nil {
		errs = append(errs, fmt.Errorf("%s.privateKeyPem: %w", path, err))
	}
	if len(errs) > 0 {
		return errs
	}
	if _, err := pki.ParseCA(pki.KeyPair{CertPEM: []byte(ca.GetCertificatePem()), KeyPEM: []byte(ca.GetPrivateKeyPem())}, now); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", path, err))
	}
	return errs
}

// ValidateEffective checks a merged spec (see Merge) of linux machines at
// path: the common rules of Validate, then the rules of the provider it
// selects.
func (r *Registry) ValidateEffective(path string, spec *capnv1.BootstrapSpec) error {
	return r.ValidateFor(path, "os", OSLinux, spec)
}

// ValidateFor is ValidateEffective for machines of os, whose field is at
// osPath (spec.workerPools[1].os): the provider must render that os
// (OSProvider), and checks the spec for it.
func (r *Registry) ValidateFor(path, osPath string, os OS, spec *capnv1.BootstrapSpec) error {
	// The CA was checked where it is written (spec.bootstrap.ca).
	noCA := spec
	if spec.GetCa() != nil {
		noCA = Merge(spec, nil)
		noCA.Ca = nil
	}
	if err := r.validate(path, os, noCA, time.Time{}); err != nil {
		return err
	}
	p, err := r.Lookup(spec.GetProvider())
	if err != nil {
		return fmt.Errorf("%s.provider: %w", path, err)
	}
	if err := validateOS(osPath, os, p); err != nil {
		return err
	}
	if os != OSLinux {
		return p.(OSProvider).ValidateOS(path, os, spec)
	}
	return p.ValidateSpec(path, spec)
}

// ValidateCluster checks every BootstrapSpec of a cluster spec as written
// (spec.bootstrap, spec.controlPlane.bootstrap,
// spec.workerPools[i].bootstrap), the effective spec of the control plane
// and of each pool for the pool's os, and the pools' labels and taints.
// It reports every problem at once; now is the time a user-supplied CA
// must be valid at.
func (r *Registry) ValidateCluster(spec *capnv1.ClusterSpec, now time.Time) error {
	var errs []error
	base := spec.GetBootstrap()
	baseErr := r.Validate("spec.bootstrap", base, now)
	errs = append(errs, baseErr)
	type level struct {
		path, osPath string
		os           OS
		spec         *capnv1.BootstrapSpec
	}
	cp := spec.GetControlPlane()
	levels := []level{{"spec.controlPlane.bootstrap", "spec.controlPlane.os", OSOf(cp.GetOs()), cp.GetBootstrap()}}
	if OSOf(cp.GetOs()) != OSLinux {
		errs = append(errs, fmt.Errorf("spec.controlPlane.os: %q: the control plane runs on %s only (as in Cluster API); put %s nodes in a worker pool", cp.GetOs(), OSLinux, OSWindows))
		levels[0].os = OSLinux
	}
	for i, p := range spec.GetWorkerPools() {
		pp := fmt.Sprintf("spec.workerPools[%d]", i)
		levels = append(levels, level{pp + ".bootstrap", pp + ".os", OSOf(p.GetOs()), p.GetBootstrap()})
		errs = append(errs, ValidateLabels(pp+".labels", p.GetLabels())...)
		errs = append(errs, ValidateTaints(pp+".taints", p.GetTaints())...)
	}
	for _, l := range levels {
		if l.spec.GetCa() != nil {
			errs = append(errs, fmt.Errorf("%s.ca: the CA is cluster-wide; set it at spec.bootstrap.ca", l.path))
		}
		if !l.os.Valid() {
			errs = append(errs, fmt.Errorf("%s: %q: want %s or %s", l.osPath, l.os, OSLinux, OSWindows))
			continue
		}
		if err := r.validate(l.path, l.os, l.spec, now); err != nil {
			errs = append(errs, err)
			continue
		}
		if baseErr != nil {
			continue // the merged spec would repeat spec.bootstrap's errors
		}
		if l.os == OSWindows && len(base.GetFiles())+len(base.GetPreCommands())+len(base.GetPostCommands()) > 0 {
			// spec.bootstrap's files and commands are the Linux machines':
			// a windows pool would inherit them.
			errs = append(errs, fmt.Errorf("%s: windows: the pool would inherit the files, preCommands and postCommands of spec.bootstrap, which are written for linux; move them to spec.controlPlane.bootstrap and the linux pools' bootstrap", l.osPath))
			continue
		}
		// Reported at the pool's (or control plane's) path: that is where
		// the effective spec is decided.
		errs = append(errs, r.ValidateFor(l.path, l.osPath, l.os, Merge(base, l.spec)))
	}
	return errors.Join(errs...)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// pathClean is path.Clean: "/a/../b", "/a//b" and "/a/" are not clean.
func pathClean(p string) string { return path.Clean(p) }
