// Package bootstrap is the bootstrap provider contract: what a provider is
// given (Input), what it returns (Output), the Registry that picks one by
// name, and the validation of BootstrapSpec with field paths.
//
// Providers live in subpackages (kubeadm, script, kubelocal); builtin
// registers them.
// A third-party provider implements Provider, passes the conformance suite
// in bootstraptest, and is added to the registry the service is built with.
// See docs/bootstrap.md.
package bootstrap

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/token"
)

// Provider turns one machine's Input into its bootstrap data.
//
// Contract:
//   - Render is a pure function of its Input: no I/O, no clock, no
//     randomness. The same Input gives the same bytes (sort every map).
//   - Render is safe for concurrent use.
//   - Render calls in.Validate() first (or is prepared for an Input that
//     fails it) and returns an error naming the field and the reason, never
//     a secret. An error becomes bootstrap.failed with that reason.
//   - Render never puts material in Output that the Input did not carry for
//     the role: workers are given no private keys, so they get none.
//   - ValidateSpec checks an effective spec (after Merge) for what this
//     provider needs or refuses, as field errors under path joined with
//     errors.Join; the Registry has already checked the common fields.
type Provider interface {
	// Name is the value of bootstrap.provider that selects this provider:
	// lower case, stable, unique in a Registry.
	Name() string
	// ValidateSpec reports every problem with spec for this provider.
	ValidateSpec(path string, spec *capnv1.BootstrapSpec) error
	// Render makes the bootstrap data of one machine.
	Render(in Input) (Output, error)
}

// Role of a machine, as in Machine.role.
type Role string

// Roles.
const (
	RoleControlPlane Role = "control-plane"
	RoleWorker       Role = "worker"
)

// Format of bootstrap data, as in BootstrapReady.format.
type Format string

// Formats.
const (
	// FormatCloudConfig is a cloud-init "#cloud-config" YAML document.
	FormatCloudConfig Format = "cloud-config"
	// FormatScript is an executable script starting with "#!".
	FormatScript Format = "script"
	// FormatIgnition is an Ignition v3 JSON config (Flatcar, Fedora
	// CoreOS).
	FormatIgnition Format = "ignition"
)

// Formats are the formats a spec may ask for (BootstrapSpec.format).
var Formats = []Format{FormatCloudConfig, FormatScript, FormatIgnition}

// Output is one machine's bootstrap data.
type Output struct {
	Format Format
	Data   []byte
}

// Checksum is "sha256:<hex>" of Data, for BootstrapReady.checksum.
func (o Output) Checksum() string {
	sum := sha256.Sum256(o.Data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Endpoint is the control-plane endpoint the infrastructure reports.
type Endpoint struct {
	Host string
	Port int32
}

// String is host:port, with brackets around an IPv6 host.
func (e Endpoint) String() string { return net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port))) }

// Input is everything a provider may use to render one machine's data.
// NewInput builds it from a GenerateBootstrap command and the cluster's
// state, giving each role only the material it needs.
type Input struct {
	Cluster string
	Machine string
	Role    Role
	// FirstControlPlane is true for the one machine that runs kubeadm init.
	FirstControlPlane bool
	// KubernetesVersion is "v<major>.<minor>.<patch>" (a "v" is added).
	KubernetesVersion string
	// OS is the machine's operating system (linux or windows).
	OS       OS
	Endpoint Endpoint
	// Network may be nil (kubeadm's defaults then apply).
	Network *capnv1.NetworkSpec
	// Spec is the effective bootstrap spec (cluster-wide merged with the
	// pool's or control plane's); never nil.
	Spec *capnv1.BootstrapSpec
	// Labels and Taints of the node.
	Labels map[string]string
	Taints []*capnv1.Taint
	// PKI holds only what the role needs.
	PKI PKI
	// Token is the join token; for the first control-plane machine, the
	// token kubeadm init registers.
	Token    token.Token
	TokenTTL time.Duration
	// CACertHash pins the cluster CA for kubeadm join (sha256:<hex>).
	CACertHash string
}

// PKI is the certificate material given to a machine: the CA certificate
// for everyone, the shared CA keys and service-account key pair for
// control-plane machines only. Printing a PKI never prints a key.
type PKI struct {
	CACert               []byte
	CAKey                []byte
	EtcdCACert           []byte
	EtcdCAKey            []byte
	FrontProxyCACert     []byte
	FrontProxyCAKey      []byte
	ServiceAccountPublic []byte
	ServiceAccountKey    []byte
}

// HasPrivateKeys is true when any private key is present.
func (p PKI) HasPrivateKeys() bool {
	return len(p.CAKey)+len(p.EtcdCAKey)+len(p.FrontProxyCAKey)+len(p.ServiceAccountKey) > 0
}

// Format prints which parts are present, never their content.
func (p PKI) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "bootstrap.PKI{ca: %t, control-plane keys: %t}", len(p.CACert) > 0, p.HasPrivateKeys())
}
