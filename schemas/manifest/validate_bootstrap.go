package manifest

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// preflightRE is a kubeadm preflight check's name.
var preflightRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]{0,252}$`)

// validateBootstrap checks one bootstrap spec as written, for machines of
// os (file paths are that system's).
func (v Validator) validateBootstrap(b *capnv1.BootstrapSpec, p path, os string, errs *fieldErrors) {
	if b == nil {
		return
	}
	known := v.BootstrapProviders
	if known == nil {
		known = KnownBootstrapProviders
	}
	if b.Provider != "" && !slices.Contains(known, b.Provider) {
		errs.add(p.child("provider"), b.Provider, "unknown bootstrap provider: available are %s", strings.Join(known, ", "))
	}
	paths := map[string]int{}
	for i, f := range b.Files {
		fp := p.child("files").index(i)
		if f == nil {
			errs.add(fp, nil, "must not be null")
			continue
		}
		switch {
		case f.Path == "":
			errs.add(fp.child("path"), nil, "required")
		case os == OSWindows && !windowsPathRE.MatchString(f.Path):
			errs.add(fp.child("path"), f.Path, "must be an absolute windows path such as C:\\k\\config.yaml (the pool's os is windows)")
		case os != OSWindows && !strings.HasPrefix(f.Path, "/"):
			errs.add(fp.child("path"), f.Path, "must be an absolute path")
		}
		if j, dup := paths[f.Path]; dup && f.Path != "" {
			errs.add(fp.child("path"), f.Path, "duplicate of %s", p.child("files").index(j))
		}
		paths[f.Path] = i
		if f.Permissions != "" && !fileModeRE.MatchString(f.Permissions) {
			errs.add(fp.child("permissions"), f.Permissions, "must be an octal mode such as \"0644\"")
		}
		validateFileSecretRef(f, fp, errs)
	}
	for _, k := range sortedKeys(b.KubeletExtraArgs) {
		if k == "" || strings.HasPrefix(k, "-") {
			errs.add(p.child("kubeletExtraArgs").key(k), nil, "must be a kubelet flag name without dashes, e.g. max-pods")
		}
	}
	seen := map[string]int{}
	for i, n := range b.IgnorePreflightErrors {
		ip := p.child("ignorePreflightErrors").index(i)
		if !preflightRE.MatchString(n) {
			errs.add(ip, n, "must be a kubeadm preflight check's name, e.g. ImagePull or Port-6443 (letters, digits, '.', '_', '-'), or all")
			continue
		}
		if j, dup := seen[strings.ToLower(n)]; dup {
			errs.add(ip, n, "duplicate of %s", p.child("ignorePreflightErrors").index(j))
		}
		seen[strings.ToLower(n)] = i
	}
	if _, all := seen["all"]; all && len(b.IgnorePreflightErrors) > 1 {
		errs.add(p.child("ignorePreflightErrors"), nil, "\"all\" ignores every check: give it alone (kubeadm refuses it beside check names)")
	}
	if d := b.TokenTtl; d != nil && d.AsDuration() <= 0 {
		errs.add(p.child("tokenTtl"), d.AsDuration(), "must be positive, e.g. 15m")
	}
	switch b.Format {
	case "", FormatCloudConfig, FormatScript, FormatIgnition:
	default:
		errs.add(p.child("format"), b.Format, "must be %s, %s or %s (empty: the bootstrap provider's own)", FormatCloudConfig, FormatScript, FormatIgnition)
	}
	if d := b.CommandTimeout; d != nil {
		if t := d.AsDuration(); t < MinCommandTimeout || t > MaxCommandTimeout {
			errs.add(p.child("commandTimeout"), t, "must be between %s and %s, e.g. 5m (unset: 5m)", MinCommandTimeout, MaxCommandTimeout)
		}
	}
	if ca := b.Ca; ca != nil {
		if (ca.CertificatePem == "") != (ca.PrivateKeyPem == "") {
			errs.add(p.child("ca"), nil, "needs both certificatePem and privateKeyPem, or neither")
		}
		if ca.CertificatePem != "" && !strings.Contains(ca.CertificatePem, "-----BEGIN ") {
			errs.add(p.child("ca").child("certificatePem"), nil, "must be PEM (-----BEGIN CERTIFICATE-----)")
		}
		if ca.PrivateKeyPem != "" && !strings.Contains(ca.PrivateKeyPem, "-----BEGIN ") {
			errs.add(p.child("ca").child("privateKeyPem"), nil, "must be PEM (-----BEGIN ... PRIVATE KEY-----)")
		}
	}
}

func validateHealth(h *capnv1.HealthPolicy, p path, errs *fieldErrors) {
	if h == nil {
		return
	}
	for i, c := range h.UnhealthyConditions {
		cp := p.child("unhealthyConditions").index(i)
		if c == nil {
			errs.add(cp, nil, "must not be null")
			continue
		}
		if c.Type == "" {
			errs.add(cp.child("type"), nil, "required: a node condition type, e.g. Ready or KernelDeadlock")
		}
		switch c.Status {
		case "True", "False", "Unknown":
		default:
			errs.add(cp.child("status"), c.Status, "must be True, False or Unknown")
		}
		if c.Timeout != nil && c.Timeout.AsDuration() < 0 {
			errs.add(cp.child("timeout"), c.Timeout.AsDuration(), "must not be negative")
		}
	}
	if d := h.NodeStartupTimeout; d != nil {
		if v := d.AsDuration(); v != 0 && v.Seconds() < 30 {
			errs.add(p.child("nodeStartupTimeout"), v, "must be 0 (disabled) or at least 30s")
		}
	}
	if s := h.MaxUnhealthy; s != "" {
		if m := unhealthyRangeRE.FindStringSubmatch(s); m != nil {
			lo, _ := strconv.Atoi(m[1])
			hi, _ := strconv.Atoi(m[2])
			if lo > hi {
				errs.add(p.child("maxUnhealthy"), s, "a range [a-b] needs a <= b")
			}
		} else {
			validateIntOrPercent(s, p.child("maxUnhealthy"), errs)
		}
	}
	if h.MaxInFlight < 0 {
		errs.add(p.child("maxInFlight"), h.MaxInFlight, "must be 0 (unlimited) or more")
	}
	if d := h.HeartbeatGrace; d != nil && d.AsDuration() < 0 {
		errs.add(p.child("heartbeatGrace"), d.AsDuration(), "must not be negative")
	}
	for i, s := range h.TrustedSources {
		if s == "" || strings.ContainsAny(s, " \t\r\n") {
			errs.add(p.child("trustedSources").index(i), s, "must be the name of a gateway token (not empty, no white space)")
		}
	}
}

// validateOS checks a pool's os and what it needs: the bootstrap provider
// that renders it, a format its machines read, and no Linux files or
// commands inherited from spec.bootstrap. cluster is spec.bootstrap,
// pool the pool's own bootstrap (either may be nil).
func validateOS(os string, cluster, pool *capnv1.BootstrapSpec, p path, errs *fieldErrors) {
	switch os {
	case "", OSLinux:
	case OSWindows:
		provider := pool.GetProvider()
		if provider == "" {
			provider = cluster.GetProvider()
		}
		if provider == "" {
			provider = DefaultBootstrapProvider
		}
		if !slices.Contains(WindowsBootstrapProviders, provider) {
			errs.add(p.child("os"), os, "needs the %s bootstrap provider (bootstrap.provider is %s, which renders linux machines only)", strings.Join(WindowsBootstrapProviders, " or "), provider)
		}
		format := pool.GetFormat()
		if format == "" {
			format = cluster.GetFormat()
		}
		if format != "" && format != FormatCloudConfig {
			errs.add(p.child("os"), os, "windows machines take bootstrap.format %s (cloudbase-init), not %s", FormatCloudConfig, format)
		}
		if len(cluster.GetFiles())+len(cluster.GetPreCommands())+len(cluster.GetPostCommands()) > 0 {
			errs.add(p.child("os"), os, "the pool would inherit the files, preCommands and postCommands of spec.bootstrap, which are written for linux; move them to spec.controlPlane.bootstrap and the linux pools' bootstrap")
		}
	default:
		errs.add(p.child("os"), os, "must be %s or %s (empty: %s)", OSLinux, OSWindows, OSLinux)
	}
}

// validateFormat checks that the bootstrap provider a level takes renders
// the format it asks for (ignition is kubeadm's).
func validateFormat(cluster, level *capnv1.BootstrapSpec, p path, errs *fieldErrors) {
	format := level.GetFormat()
	if format == "" {
		format = cluster.GetFormat()
	}
	provider := level.GetProvider()
	if provider == "" {
		provider = cluster.GetProvider()
	}
	if provider == "" {
		provider = DefaultBootstrapProvider
	}
	if format == FormatIgnition && !slices.Contains(IgnitionBootstrapProviders, provider) {
		at := p.child("bootstrap").child("format")
		if level.GetFormat() == "" {
			at = "spec.bootstrap.format"
		}
		errs.add(at, format, "is rendered by the %s bootstrap provider only (this level's is %s)", strings.Join(IgnitionBootstrapProviders, " or "), provider)
	}
}

// secretKeyRE is a bootstrap secret's key, as a Kubernetes Secret's data
// key: letters, digits, '-', '_' and '.'.
var secretKeyRE = regexp.MustCompile(`^[-._a-zA-Z0-9]{1,253}$`)

// IsSecretKey is true for a bootstrap secret's key (a Kubernetes Secret's
// data key rule).
func IsSecretKey(k string) bool { return secretKeyRE.MatchString(k) }

// validateFileSecretRef checks that a file has content or a secretRef,
// not both, and that a secretRef names a secret and a key.
func validateFileSecretRef(f *capnv1.File, fp path, errs *fieldErrors) {
	ref := f.SecretRef
	if ref == nil {
		return
	}
	rp := fp.child("secretRef")
	if f.Content != "" {
		errs.add(fp, nil, "set one of content and secretRef, not both")
	}
	switch {
	case ref.Name == "":
		errs.add(rp.child("name"), nil, "required: the bootstrap secret (capn bootstrap-secret set NAME)")
	case !IsDNSLabel(ref.Name):
		errs.add(rp.child("name"), ref.Name, dnsLabelRule)
	}
	switch {
	case ref.Key == "":
		errs.add(rp.child("key"), nil, "required: the key of the bootstrap secret whose value is the file's content")
	case !secretKeyRE.MatchString(ref.Key):
		errs.add(rp.child("key"), ref.Key, "must be at most 253 letters, digits, '-', '_' or '.'")
	}
}
