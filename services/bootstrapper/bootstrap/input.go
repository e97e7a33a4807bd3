package bootstrap

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/token"
)

// Cluster is what the service knows about a machine's cluster besides the
// GenerateBootstrap command.
type Cluster struct {
	// Endpoint is the control-plane endpoint the infrastructure reports.
	Endpoint Endpoint
	Network  *capnv1.NetworkSpec
	PKI      pki.Set
	// WorkerCA, when set, is the CA certificate workers trust for the API
	// server instead of the PKI's: a hosted or external control plane's,
	// from its record (controlplane.<cluster>). Control-plane machines
	// always get the PKI's.
	WorkerCA []byte
	// CACertHash, when set, computes the pin of a CA certificate as
	// pki.CACertHash does (the default): a caller rendering many
	// machines of one cluster may remember it instead of parsing the
	// certificate for each.
	CACertHash func(certPEM []byte) (string, error)
}

// NewInput builds a provider's Input from a GenerateBootstrap command, the
// cluster and the join token, and validates it. The PKI is cut to the role:
// control-plane machines get the shared CAs and service-account keys,
// workers the cluster CA certificate only.
func NewInput(cmd *capnv1.GenerateBootstrap, c Cluster, tok token.Token) (Input, error) {
	spec := cmd.GetBootstrap()
	if spec == nil {
		spec = &capnv1.BootstrapSpec{}
	}
	if spec.GetCa() != nil {
		// The user's CA reaches providers through PKI, never the spec.
		spec = Merge(spec, nil)
		spec.Ca = nil
	}
	in := Input{
		Cluster:           cmd.GetCluster(),
		Machine:           cmd.GetMachine(),
		Role:              Role(cmd.GetRole()),
		FirstControlPlane: cmd.GetFirstControlPlane(),
		KubernetesVersion: cmd.GetVersion(),
		OS:                OSOf(cmd.GetOs()),
		Endpoint:          c.Endpoint,
		Network:           c.Network,
		Spec:              spec,
		Labels:            cmd.GetLabels(),
		Taints:            cmd.GetTaints(),
		Token:             tok,
		PKI:               PKI{CACert: c.PKI.CA.CertPEM},
	}
	if in.KubernetesVersion != "" && !strings.HasPrefix(in.KubernetesVersion, "v") {
		in.KubernetesVersion = "v" + in.KubernetesVersion
	}
	var errs []error
	ttl, err := token.TTL(spec.GetTokenTtl())
	if err != nil {
		errs = append(errs, fmt.Errorf("bootstrap.tokenTtl: %w", err))
	}
	in.TokenTTL = ttl
	trusted := c.PKI.CA.CertPEM
	if len(c.WorkerCA) > 0 && in.Role != RoleControlPlane {
		trusted = c.WorkerCA
		in.PKI = PKI{CACert: c.WorkerCA}
	}
	if len(trusted) > 0 {
		hash := c.CACertHash
		if hash == nil {
			hash = pki.CACertHash
		}
		h, err := hash(trusted)
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster CA: %w", err))
		}
		in.CACertHash = h
	}
	if in.Role == RoleControlPlane {
		in.PKI = PKI{
			CACert: c.PKI.CA.CertPEM, CAKey: c.PKI.CA.KeyPEM,
			EtcdCACert: c.PKI.EtcdCA.CertPEM, EtcdCAKey: c.PKI.EtcdCA.KeyPEM,
			FrontProxyCACert: c.PKI.FrontProxyCA.CertPEM, FrontProxyCAKey: c.PKI.FrontProxyCA.KeyPEM,
			ServiceAccountPublic: c.PKI.ServiceAccount.PublicPEM, ServiceAccountKey: c.PKI.ServiceAccount.PrivatePEM,
		}
	}
	if err := errors.Join(append(errs, in.Validate())...); err != nil {
		return Input{}, err
	}
	return in, nil
}

var (
	nodeNameRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	versionRe  = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([-+][0-9A-Za-z.+-]+)?$`)
	hashRe     = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	hostRe     = regexp.MustCompile(`^[A-Za-z0-9.:%-]+$`)
)

// Validate reports every problem with the Input at once. Messages name the
// field and what is allowed; they never contain a key or the token secret.
func (in Input) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if in.Cluster == "" {
		add("cluster: empty")
	}
	switch {
	case in.Machine == "":
		add("machine: empty")
	case len(in.Machine) > 253 || !nodeNameRe.MatchString(in.Machine):
		add("machine %q: the node name must be a lowercase DNS subdomain (a-z, 0-9, '-', '.'; at most 253 characters)", in.Machine)
	}
	switch in.Role {
	case RoleControlPlane, RoleWorker:
	default:
		add("role %q: want %s or %s", in.Role, RoleControlPlane, RoleWorker)
	}
	if in.FirstControlPlane && in.Role != RoleControlPlane {
		add("firstControlPlane: only a %s machine can initialise the cluster", RoleControlPlane)
	}
	switch {
	case in.OS == "":
		add("os: empty; want %s or %s", OSLinux, OSWindows)
	case !in.OS.Valid():
		add("os %q: want %s or %s", in.OS, OSLinux, OSWindows)
	case in.OS == OSWindows && in.Role == RoleControlPlane:
		add("os: a %s machine cannot be %s: Windows nodes join as workers only", OSWindows, RoleControlPlane)
	}
	if _, _, err := ParseVersion(in.KubernetesVersion); err != nil {
		add("version: %w", err)
	}
	if in.Endpoint.Host == "" {
		add("endpoint.host: empty; the infrastructure has not reported the control-plane endpoint")
	} else if !hostRe.MatchString(in.Endpoint.Host) {
		add("endpoint.host %q: want a DNS name or an IP address", in.Endpoint.Host)
	}
	if in.Endpoint.Port < 1 || in.Endpoint.Port > 65535 {
		add("endpoint.port %d: want 1-65535", in.Endpoint.Port)
	}
	if in.Spec == nil {
		add("bootstrap: nil spec")
	} else if in.Spec.GetCa() != nil {
		add("bootstrap.ca: must not reach a provider; the CA is given through pki")
	}
	errs = append(errs, ValidateLabels("labels", in.Labels)...)
	errs = append(errs, ValidateTaints("taints", in.Taints)...)
	errs = append(errs, in.validatePKI()...)
	if in.Token.IsZero() {
		add("token: empty")
	} else if _, err := token.Parse(in.Token.Value()); err != nil {
		add("token %s: %w", in.Token, err)
	}
	if in.TokenTTL <= 0 {
		add("tokenTTL %s: want a positive duration", in.TokenTTL)
	}
	if !hashRe.MatchString(in.CACertHash) {
		add("caCertHash %q: want sha256:<64 hex digits>", in.CACertHash)
	}
	return errors.Join(errs...)
}

func (in Input) validatePKI() []error {
	p := in.PKI
	var errs []error
	if len(p.CACert) == 0 {
		errs = append(errs, errors.New("pki.caCert: empty; every machine needs the cluster CA certificate"))
	}
	switch in.Role {
	case RoleWorker:
		if p.HasPrivateKeys() || len(p.EtcdCACert)+len(p.FrontProxyCACert)+len(p.ServiceAccountPublic) > 0 {
			errs = append(errs, errors.New("pki: a worker must be given the cluster CA certificate only, no control-plane material"))
		}
	case RoleControlPlane:
		for _, f := range []struct {
			name string
			v    []byte
		}{
			{"caKey", p.CAKey}, {"etcdCACert", p.EtcdCACert}, {"etcdCAKey", p.EtcdCAKey},
			{"frontProxyCACert", p.FrontProxyCACert}, {"frontProxyCAKey", p.FrontProxyCAKey},
			{"serviceAccountPublic", p.ServiceAccountPublic}, {"serviceAccountKey", p.ServiceAccountKey},
		} {
			if len(f.v) == 0 {
				errs = append(errs, fmt.Errorf("pki.%s: empty; control-plane machines need the shared cluster PKI", f.name))
			}
		}
	}
	return errs
}

// ParseVersion reads "v<major>.<minor>.<patch>[-pre][+build]".
func ParseVersion(v string) (major, minor int, err error) {
	m := versionRe.FindStringSubmatch(v)
	if m == nil {
		return 0, 0, fmt.Errorf("%q is not a Kubernetes version like v1.32.1", v)
	}
	major, _ = strconv.Atoi(m[1])
	minor, _ = strconv.Atoi(m[2])
	return major, minor, nil
}

// Format prints a summary safe for logs: no spec content, key or token
// secret.
func (in Input) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "bootstrap.Input{cluster: %s, machine: %s, role: %s, first: %t, version: %s, endpoint: %s, provider: %q, token: %v}",
		in.Cluster, in.Machine, in.Role, in.FirstControlPlane, in.KubernetesVersion, in.Endpoint, in.Spec.GetProvider(), in.Token)
}
