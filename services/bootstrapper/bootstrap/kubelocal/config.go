package kubelocal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
)

// The node config file: its path on the machine, apiVersion and kind.
const (
	ConfigPath = "/etc/capn/kube-local.json"
	APIVersion = "capn.dev/kube-local/v1alpha1"
	Kind       = "NodeConfig"
)

// Defaults written when the cluster's network leaves a field out (kubeadm's
// service CIDR and DNS domain, flannel's and kind's pod CIDR).
const (
	DefaultServiceCIDR = "10.96.0.0/12"
	DefaultPodCIDR     = "10.244.0.0/16"
	DefaultDNSDomain   = "cluster.local"
)

// ControlPlaneTaint is the taint a control-plane node gets when the
// machine has no taints of its own, as kubeadm does.
const ControlPlaneTaint = "node-role.kubernetes.io/control-plane"

// NodeConfig is /etc/capn/kube-local.json: what the node side (capn-node
// with --kube-bin) needs to run this machine's part of the cluster. The
// machine's own address and its providerID are not in it: only the
// machine knows them.
type NodeConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Cluster    string `json:"cluster"`
	// NodeName is the machine's name and its Node's name.
	NodeName string `json:"nodeName"`
	// Role is control-plane or worker.
	Role string `json:"role"`
	// FirstControlPlane is true for the one machine that starts a new
	// etcd cluster and registers the join material.
	FirstControlPlane bool `json:"firstControlPlane"`
	// KubernetesVersion is v<major>.<minor>.<patch>: the binaries the node
	// runs must be this version.
	KubernetesVersion string `json:"kubernetesVersion"`
	// Endpoint is the cluster's control-plane endpoint (the load balancer
	// in front of every control-plane machine's API server).
	Endpoint    Endpoint `json:"endpoint"`
	ServiceCIDR string   `json:"serviceCIDR"`
	PodCIDR     string   `json:"podCIDR"`
	DNSDomain   string   `json:"dnsDomain"`
	// BootstrapToken is id.secret: registered by the first control plane
	// (Secret kube-system/bootstrap-token-<id>), used by the others to join.
	BootstrapToken string `json:"bootstrapToken"`
	// TokenTTL is how long the token is valid once registered (a Go
	// duration, e.g. 15m0s).
	TokenTTL string `json:"tokenTTL"`
	// CACertHash pins the cluster CA (sha256:<hex> of its public key).
	CACertHash string            `json:"caCertHash"`
	Labels     map[string]string `json:"labels,omitempty"`
	Taints     []Taint           `json:"taints,omitempty"`
	// PreCommands run before the node starts its part of the cluster,
	// PostCommands once it serves (the API server answers /readyz, the
	// worker's Node is registered); each under CommandTimeout (a Go
	// duration; empty: bootstrap.DefaultCommandTimeout).
	PreCommands    []string `json:"preCommands,omitempty"`
	PostCommands   []string `json:"postCommands,omitempty"`
	CommandTimeout string   `json:"commandTimeout,omitempty"`
}

// Timeout is CommandTimeout, parsed (bootstrap.DefaultCommandTimeout when
// empty).
func (c *NodeConfig) Timeout() time.Duration {
	if d, err := time.ParseDuration(c.CommandTimeout); err == nil && d > 0 {
		return d
	}
	return bootstrap.DefaultCommandTimeout
}

// Endpoint is host and port of the control-plane endpoint.
type Endpoint struct {
	Host string `json:"host"`
	Port int32  `json:"port"`
}

// String is host:port.
func (e Endpoint) String() string {
	return bootstrap.Endpoint{Host: e.Host, Port: e.Port}.String()
}

// Taint is a node taint.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// Token is the bootstrap token, parsed.
func (c *NodeConfig) Token() (token.Token, error) { return token.Parse(c.BootstrapToken) }

// TTL is TokenTTL, parsed.
func (c *NodeConfig) TTL() (time.Duration, error) { return time.ParseDuration(c.TokenTTL) }

// IsControlPlane is true for a control-plane machine.
func (c *NodeConfig) IsControlPlane() bool { return c.Role == string(bootstrap.RoleControlPlane) }

// Marshal is the file's content: indented JSON, keys in a fixed order (maps
// sorted), ending with a newline.
func (c *NodeConfig) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ConfigPath, err)
	}
	return append(b, '\n'), nil
}

// Parse reads and validates a node config. Unknown fields are refused, so
// a config from a newer renderer is not half understood. Errors name the
// field and never hold the token secret.
func Parse(data []byte) (*NodeConfig, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c NodeConfig
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %w", ConfigPath, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: more than one JSON value", ConfigPath)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate reports every problem at once, each prefixed with the file and
// the field's JSON name.
func (c *NodeConfig) Validate() error {
	var errs []error
	add := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s: %s", ConfigPath, field, fmt.Sprintf(format, a...)))
	}
	if c.APIVersion != APIVersion {
		add("apiVersion", "%q: want %s", c.APIVersion, APIVersion)
	}
	if c.Kind != Kind {
		add("kind", "%q: want %s", c.Kind, Kind)
	}
	if c.Cluster == "" {
		add("cluster", "empty")
	}
	if c.NodeName == "" {
		add("nodeName", "empty")
	} else if !isDNSSubdomain(c.NodeName) {
		add("nodeName", "%q: want a lowercase DNS subdomain", c.NodeName)
	}
	switch bootstrap.Role(c.Role) {
	case bootstrap.RoleControlPlane, bootstrap.RoleWorker:
	default:
		add("role", "%q: want %s or %s", c.Role, bootstrap.RoleControlPlane, bootstrap.RoleWorker)
	}
	if c.FirstControlPlane && !c.IsControlPlane() {
		add("firstControlPlane", "only a %s machine can initialise the cluster", bootstrap.RoleControlPlane)
	}
	if _, _, err := bootstrap.ParseVersion(c.KubernetesVersion); err != nil {
		add("kubernetesVersion", "%v", err)
	}
	if c.Endpoint.Host == "" || strings.ContainsAny(c.Endpoint.Host, "/?#@ []") {
		add("endpoint.host", "%q: want a DNS name or an IP address", c.Endpoint.Host)
	}
	if c.Endpoint.Port < 1 || c.Endpoint.Port > 65535 {
		add("endpoint.port", "%d: want 1-65535", c.Endpoint.Port)
	}
	if err := checkCIDR(c.ServiceCIDR); err != nil {
		add("serviceCIDR", "%v", err)
	}
	if err := checkCIDR(c.PodCIDR); err != nil {
		add("podCIDR", "%v", err)
	}
	if overlap(c.ServiceCIDR, c.PodCIDR) {
		add("podCIDR", "%s overlaps serviceCIDR %s", c.PodCIDR, c.ServiceCIDR)
	}
	if c.DNSDomain == "" || !isDNSSubdomain(c.DNSDomain) {
		add("dnsDomain", "%q: want a DNS domain such as cluster.local", c.DNSDomain)
	}
	if t, err := token.Parse(c.BootstrapToken); err != nil {
		// Never print the value: it is a credential.
		add("bootstrapToken", "%v", err)
	} else if t.IsZero() {
		add("bootstrapToken", "empty")
	}
	if d, err := time.ParseDuration(c.TokenTTL); err != nil || d <= 0 {
		add("tokenTTL", "%q: want a positive Go duration such as 15m0s", c.TokenTTL)
	}
	if !strings.HasPrefix(c.CACertHash, "sha256:") || len(c.CACertHash) != len("sha256:")+64 {
		add("caCertHash", "%q: want sha256:<64 hex digits>", c.CACertHash)
	}
	if c.CommandTimeout != "" {
		if d, err := time.ParseDuration(c.CommandTimeout); err != nil || d < bootstrap.MinCommandTimeout || d > bootstrap.MaxCommandTimeout {
			add("commandTimeout", "%q: want a Go duration between %s and %s", c.CommandTimeout, bootstrap.MinCommandTimeout, bootstrap.MaxCommandTimeout)
		}
	}
	for _, l := range []struct {
		field string
		cmds  []string
	}{{"preCommands", c.PreCommands}, {"postCommands", c.PostCommands}} {
		for i, cmd := range l.cmds {
			if strings.TrimSpace(cmd) == "" || strings.ContainsRune(cmd, 0) {
				add(fmt.Sprintf("%s[%d]", l.field, i), "want a command (not empty, no NUL byte)")
			}
		}
	}
	errs = append(errs, prefixed(bootstrap.ValidateLabels("labels", c.Labels))...)
	taints := make([]*capnv1.Taint, len(c.Taints))
	for i, t := range c.Taints {
		taints[i] = &capnv1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect}
	}
	errs = append(errs, prefixed(bootstrap.ValidateTaints("taints", taints))...)
	return errors.Join(errs...)
}

func prefixed(errs []error) []error {
	out := make([]error, len(errs))
	for i, err := range errs {
		out[i] = fmt.Errorf("%s: %w", ConfigPath, err)
	}
	return out
}

// checkCIDR accepts one canonical prefix (10.96.0.0/12, not 10.96.0.1/12)
// with room for more than a handful of addresses.
func checkCIDR(s string) error {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return fmt.Errorf("%q: want one CIDR such as 10.96.0.0/12", s)
	}
	if p.Masked() != p {
		return fmt.Errorf("%q: host bits set; want %s", s, p.Masked())
	}
	if p.Addr().BitLen()-p.Bits() < 4 {
		return fmt.Errorf("%q: too small; want at least a /%d", s, p.Addr().BitLen()-4)
	}
	return nil
}

// overlap is true when both parse and share addresses.
func overlap(a, b string) bool {
	pa, err1 := netip.ParsePrefix(a)
	pb, err2 := netip.ParsePrefix(b)
	return err1 == nil && err2 == nil && pa.Overlaps(pb)
}

func isDNSSubdomain(s string) bool {
	if len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// taintsFor are the node's taints: the machine's own, or, for a
// control-plane machine without any, the control-plane taint (kubeadm's
// default).
func taintsFor(in bootstrap.Input) []Taint {
	if len(in.Taints) == 0 && in.Role == bootstrap.RoleControlPlane {
		return []Taint{{Key: ControlPlaneTaint, Effect: "NoSchedule"}}
	}
	out := make([]Taint, len(in.Taints))
	for i, t := range in.Taints {
		out[i] = Taint{Key: t.GetKey(), Value: t.GetValue(), Effect: t.GetEffect()}
	}
	return out
}

// network picks the single service and pod CIDR and the DNS domain from
// the cluster's network, with the defaults for what it leaves out. More
// than one CIDR (dual stack) is refused: the node side runs single-stack.
func network(n *capnv1.NetworkSpec) (service, pod, domain string, errs []error) {
	pick := func(field string, list []string, def string) string {
		switch len(list) {
		case 0:
			return def
		case 1:
			if err := checkCIDR(list[0]); err != nil {
				errs = append(errs, fmt.Errorf("network.%s[0]: %w", field, err))
			}
			return list[0]
		default:
			errs = append(errs, fmt.Errorf("network.%s: %d CIDRs; the kube-local provider runs a single-stack control plane, give one", field, len(list)))
			return ""
		}
	}
	service = pick("serviceCidrs", n.GetServiceCidrs(), DefaultServiceCIDR)
	pod = pick("podCidrs", n.GetPodCidrs(), DefaultPodCIDR)
	domain = n.GetServiceDomain()
	if domain == "" {
		domain = DefaultDNSDomain
	} else if !isDNSSubdomain(domain) {
		errs = append(errs, fmt.Errorf("network.serviceDomain %q: want a DNS domain such as cluster.local", domain))
	}
	if overlap(service, pod) {
		errs = append(errs, fmt.Errorf("network: service CIDR %s and pod CIDR %s overlap", service, pod))
	}
	return service, pod, domain, errs
}
