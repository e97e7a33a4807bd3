package kubeadm

import (
	"maps"
	"slices"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	yaml "go.yaml.in/yaml/v2"
)

// APIVersion of the kubeadm configuration written (kubeadm v1.31 and newer).
const APIVersion = "kubeadm.k8s.io/v1beta4"

// EncryptionAlgorithm makes kubeadm create its own keys (API server, etcd,
// kubelet client...) as ECDSA P-256, like the CAs capn hands it.
const EncryptionAlgorithm = "ECDSA-P256"

// The subset of kubeadm.k8s.io/v1beta4 written here, fields in the order
// kubeadm documents them.

type typeMeta struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
}

type clusterConfiguration struct {
	typeMeta             `yaml:",inline"`
	ClusterName          string      `yaml:"clusterName"`
	KubernetesVersion    string      `yaml:"kubernetesVersion"`
	ControlPlaneEndpoint string      `yaml:"controlPlaneEndpoint"`
	CertificatesDir      string      `yaml:"certificatesDir"`
	EncryptionAlgorithm  string      `yaml:"encryptionAlgorithm"`
	Networking           *networking `yaml:"networking,omitempty"`
}

type networking struct {
	PodSubnet     string `yaml:"podSubnet,omitempty"`
	ServiceSubnet string `yaml:"serviceSubnet,omitempty"`
	DNSDomain     string `yaml:"dnsDomain,omitempty"`
}

type initConfiguration struct {
	typeMeta         `yaml:",inline"`
	BootstrapTokens  []bootstrapToken `yaml:"bootstrapTokens"`
	NodeRegistration nodeRegistration `yaml:"nodeRegistration"`
}

type bootstrapToken struct {
	Token  string   `yaml:"token"`
	TTL    string   `yaml:"ttl"`
	Usages []string `yaml:"usages"`
	Groups []string `yaml:"groups"`
}

type joinConfiguration struct {
	typeMeta         `yaml:",inline"`
	Discovery        discovery        `yaml:"discovery"`
	NodeRegistration nodeRegistration `yaml:"nodeRegistration"`
	ControlPlane     *struct{}        `yaml:"controlPlane,omitempty"`
}

type discovery struct {
	BootstrapToken bootstrapTokenDiscovery `yaml:"bootstrapToken"`
}

type bootstrapTokenDiscovery struct {
	APIServerEndpoint string   `yaml:"apiServerEndpoint"`
	Token             string   `yaml:"token"`
	CACertHashes      []string `yaml:"caCertHashes"`
}

type nodeRegistration struct {
	Name string `yaml:"name"`
	// CRISocket is set on windows machines (containerd's named pipe);
	// kubeadm finds the Linux socket itself.
	CRISocket        string `yaml:"criSocket,omitempty"`
	KubeletExtraArgs []arg  `yaml:"kubeletExtraArgs,omitempty"`
	// Taints left out means kubeadm's default: the control-plane taint on
	// control-plane nodes, none on workers.
	Taints []taint `yaml:"taints,omitempty"`
	// IgnorePreflightErrors are the spec's, as written.
	IgnorePreflightErrors []string `yaml:"ignorePreflightErrors,omitempty"`
}

type arg struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

type taint struct {
	Key    string `yaml:"key"`
	Value  string `yaml:"value,omitempty"`
	Effect string `yaml:"effect"`
}

// initConfig is the ClusterConfiguration and InitConfiguration of the
// first control-plane machine.
func initConfig(in bootstrap.Input) ([]byte, error) {
	cc := clusterConfiguration{
		typeMeta:             typeMeta{APIVersion, "ClusterConfiguration"},
		ClusterName:          in.Cluster,
		KubernetesVersion:    in.KubernetesVersion,
		ControlPlaneEndpoint: in.Endpoint.String(),
		CertificatesDir:      bootstrap.PKIDir,
		EncryptionAlgorithm:  EncryptionAlgorithm,
		Networking:           network(in.Network),
	}
	ic := initConfiguration{
		typeMeta: typeMeta{APIVersion, "InitConfiguration"},
		BootstrapTokens: []bootstrapToken{{
			Token:  in.Token.Value(),
			TTL:    in.TokenTTL.String(),
			Usages: []string{"signing", "authentication"},
			Groups: []string{token.NodeGroup},
		}},
		NodeRegistration: registration(in),
	}
	return marshalDocs(cc, ic)
}

// joinConfig is the JoinConfiguration of every other machine.
func joinConfig(in bootstrap.Input) ([]byte, error) {
	jc := joinConfiguration{
		typeMeta: typeMeta{APIVersion, "JoinConfiguration"},
		Discovery: discovery{BootstrapToken: bootstrapTokenDiscovery{
			APIServerEndpoint: in.Endpoint.String(),
			Token:             in.Token.Value(),
			CACertHashes:      []string{in.CACertHash},
		}},
		NodeRegistration: registration(in),
	}
	if in.Role == bootstrap.RoleControlPlane {
		jc.ControlPlane = &struct{}{}
	}
	return marshalDocs(jc)
}

func network(n *capnv1.NetworkSpec) *networking {
	out := networking{
		PodSubnet:     strings.Join(n.GetPodCidrs(), ","),
		ServiceSubnet: strings.Join(n.GetServiceCidrs(), ","),
		DNSDomain:     n.GetServiceDomain(),
	}
	if out == (networking{}) {
		return nil
	}
	return &out
}

func registration(in bootstrap.Input) nodeRegistration {
	args := map[string]string{}
	if in.OS == bootstrap.OSWindows {
		maps.Copy(args, windowsKubeletDefaults)
	}
	for k, v := range in.Spec.GetKubeletExtraArgs() {
		args[k] = v
	}
	if l := bootstrap.NodeLabelsArg(in.Labels); l != "" {
		args["node-labels"] = l
	}
	nr := nodeRegistration{Name: in.Machine}
	if in.OS == bootstrap.OSWindows {
		nr.CRISocket = WindowsCRISocket
	}
	for _, k := range sortedKeys(args) {
		nr.KubeletExtraArgs = append(nr.KubeletExtraArgs, arg{Name: k, Value: args[k]})
	}
	for _, t := range in.Taints {
		nr.Taints = append(nr.Taints, taint{Key: t.GetKey(), Value: t.GetValue(), Effect: t.GetEffect()})
	}
	nr.IgnorePreflightErrors = in.Spec.GetIgnorePreflightErrors()
	return nr
}

func marshalDocs(docs ...any) ([]byte, error) {
	var out []byte
	for i, d := range docs {
		b, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, b...)
	}
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
