package script

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
)

// Env renders the join material as shell variable assignments, one a line,
// values single-quoted, in a fixed order:
//
//	CAPN_CLUSTER, CAPN_MACHINE, CAPN_ROLE (control-plane|worker),
//	CAPN_FIRST_CONTROL_PLANE (true|false), CAPN_KUBERNETES_VERSION,
//	CAPN_API_ENDPOINT (host:port), CAPN_JOIN_TOKEN, CAPN_TOKEN_TTL
//	(e.g. 15m0s), CAPN_CA_CERT_HASH (sha256:<hex>), CAPN_CA_CERT_FILE,
//	CAPN_PKI_DIR (control-plane only), CAPN_NODE_LABELS (k=v,...),
//	CAPN_NODE_TAINTS (key=value:Effect,...), CAPN_KUBELET_EXTRA_ARGS
//	(--name=value ..., sorted), CAPN_POD_CIDRS, CAPN_SERVICE_CIDRS
//	(comma-separated), CAPN_SERVICE_DOMAIN.
func Env(in bootstrap.Input) string {
	var b strings.Builder
	set := func(k, v string) { fmt.Fprintf(&b, "%s=%s\n", k, shellQuote(v)) }
	set("CAPN_CLUSTER", in.Cluster)
	set("CAPN_MACHINE", in.Machine)
	set("CAPN_ROLE", string(in.Role))
	set("CAPN_FIRST_CONTROL_PLANE", strconv.FormatBool(in.FirstControlPlane))
	set("CAPN_KUBERNETES_VERSION", in.KubernetesVersion)
	set("CAPN_API_ENDPOINT", in.Endpoint.String())
	set("CAPN_JOIN_TOKEN", in.Token.Value())
	set("CAPN_TOKEN_TTL", in.TokenTTL.String())
	set("CAPN_CA_CERT_HASH", in.CACertHash)
	set("CAPN_CA_CERT_FILE", CACertFile)
	if in.Role == bootstrap.RoleControlPlane {
		set("CAPN_PKI_DIR", bootstrap.PKIDir)
	}
	set("CAPN_NODE_LABELS", bootstrap.NodeLabelsArg(in.Labels))
	taints := make([]string, len(in.Taints))
	for i, t := range in.Taints {
		kv := t.GetKey()
		if t.GetValue() != "" {
			kv += "=" + t.GetValue()
		}
		taints[i] = kv + ":" + t.GetEffect()
	}
	set("CAPN_NODE_TAINTS", strings.Join(taints, ","))
	args := in.Spec.GetKubeletExtraArgs()
	flags := make([]string, 0, len(args))
	for _, k := range slices.Sorted(maps.Keys(args)) {
		flags = append(flags, "--"+k+"="+args[k])
	}
	set("CAPN_KUBELET_EXTRA_ARGS", strings.Join(flags, " "))
	set("CAPN_POD_CIDRS", strings.Join(in.Network.GetPodCidrs(), ","))
	set("CAPN_SERVICE_CIDRS", strings.Join(in.Network.GetServiceCidrs(), ","))
	set("CAPN_SERVICE_DOMAIN", in.Network.GetServiceDomain())
	return b.String()
}

// shellQuote single-quotes s for POSIX sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
