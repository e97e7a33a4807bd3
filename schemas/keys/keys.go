package keys

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Kind is a key's first token: which record it is, and in which bucket.
type Kind string

// Kinds of keys, with their shape.
const (
	KindCluster     Kind = "cluster"      // desired Cluster, observed ClusterStatus: cluster.<cluster>
	KindMachine     Kind = "machine"      // desired Machine, observed MachineStatus: machine.<cluster>.<machine>
	KindInfra       Kind = "infra"        // observed InfraMachine / InfraCluster: infra.<provider>.<cluster>.<machine or _>
	KindNode        Kind = "node"         // observed NodeHealth: node.<cluster>.<machine>
	KindRemediation Kind = "remediation"  // observed RemediationStatus: remediation.<cluster>.<pool>
	KindAutoscaler  Kind = "autoscaler"   // observed AutoscalerStatus: autoscaler.<cluster>.<pool>
	KindProvider    Kind = "provider"     // observed ProviderAnnouncement: provider.<provider>
	KindSecrets     Kind = "secrets"      // observed ClusterSecretsStatus: secrets.<cluster>
	KindPKI         Kind = "pki"          // secrets ClusterPKI: pki.<cluster>
	KindKubeconfig  Kind = "kubeconfig"   // secrets AdminKubeconfig: kubeconfig.<cluster>
	KindBootstrap   Kind = "bootstrap"    // secrets BootstrapData: bootstrap.<cluster>.<machine>
	KindAddonSet    Kind = "addonset"     // desired AddonSet: addonset.<set>
	KindAddon       Kind = "addon"        // observed ClusterAddonStatus: addon.<cluster>.<set>
	KindAddonSecret Kind = "addonsecret"  // secrets AddonSecret: addonsecret.<secret>
	KindBackup      Kind = "backup"       // observed BackupScheduleStatus: backup.<name> (backup.schedule)
	KindClass       Kind = "clusterclass" // desired ClusterClass: clusterclass.<class>
	KindClassRev    Kind = "classrev"     // desired ClusterClass, one revision: classrev.<class>.<revision>
	KindRollout     Kind = "rollout"      // desired Rollout, observed RolloutStatus: rollout.<rollout>
	// KindBootstrapSecret: secrets BootstrapSecret: bootstrapsecret.<secret>
	KindBootstrapSecret Kind = "bootstrapsecret"
	KindMaintenance     Kind = "maintenance"        // observed MaintenanceRecord: maintenance.<cluster>
	KindK8sVersions     Kind = "kubernetesversions" // desired KubernetesVersions: kubernetesversions.<name>
	KindControlPlane    Kind = "controlplane"       // observed ControlPlaneRecord: controlplane.<cluster>
	// KindExternalKubeconfig: secrets ExternalKubeconfig: externalkubeconfig.<name>
	KindExternalKubeconfig Kind = "externalkubeconfig"
)

// Prefixes of every key of a kind, for caches and watchers (store.Keep,
// Subscribe, KeysUnder).
const (
	ClusterPrefix     = string(KindCluster) + "."
	MachinePrefix     = string(KindMachine) + "."
	InfraPrefix       = string(KindInfra) + "."
	NodePrefix        = string(KindNode) + "."
	RemediationPrefix = string(KindRemediation) + "."
	AutoscalerPrefix  = string(KindAutoscaler) + "."
	ProviderPrefix    = string(KindProvider) + "."
	SecretsPrefix     = string(KindSecrets) + "."
	PKIPrefix         = string(KindPKI) + "."
	KubeconfigPrefix  = string(KindKubeconfig) + "."
	BootstrapPrefix   = string(KindBootstrap) + "."
	AddonSetPrefix    = string(KindAddonSet) + "."
	AddonPrefix       = string(KindAddon) + "."
	AddonSecretPrefix = string(KindAddonSecret) + "."
	// BootstrapSecretPrefix is every bootstrap secret's key prefix.
	BootstrapSecretPrefix = string(KindBootstrapSecret) + "."
	BackupPrefix          = string(KindBackup) + "."
	ClassPrefix           = string(KindClass) + "."
	ClassRevPrefix        = string(KindClassRev) + "."
	RolloutPrefix         = string(KindRollout) + "."
	MaintenancePrefix     = string(KindMaintenance) + "."
	K8sVersionsPrefix     = string(KindK8sVersions) + "."
	ControlPlanePrefix    = string(KindControlPlane) + "."
	// ExternalKubeconfigPrefix is every registered external kubeconfig's
	// key prefix.
	ExternalKubeconfigPrefix = string(KindExternalKubeconfig) + "."
)

// ClusterObject stands in the object token of a cluster-level key or
// subject: infra.<p>.<c>._, capn.evt.cluster.<what>.<c>._.
const ClusterObject = "_"

// Key is a parsed key. Provider is set for infra and provider keys,
// Cluster for all others but addonset, addonsecret, bootstrapsecret,
// externalkubeconfig, backup,
// clusterclass, classrev and rollout (which belong to no cluster), Name for
// the machine (ClusterObject for a cluster's infrastructure), the pool, the
// add-on set or secret, the backup record, the class, the rollout, or a
// class revision's "<class>.<revision>".
type Key struct {
	Kind     Kind
	Provider string
	Cluster  string
	Name     string
}

// Cluster is cluster.<cluster>.
func Cluster(cluster string) string { return join(string(KindCluster), cluster) }

// Machine is machine.<cluster>.<machine>.
func Machine(cluster, machine string) string { return join(string(KindMachine), cluster, machine) }

// Infra is infra.<provider>.<cluster>.<machine>.
func Infra(provider, cluster, machine string) string {
	return join(string(KindInfra), provider, cluster, machine)
}

// InfraCluster is infra.<provider>.<cluster>._, a cluster's infrastructure.
func InfraCluster(provider, cluster string) string { return Infra(provider, cluster, ClusterObject) }

// Node is node.<cluster>.<machine>.
func Node(cluster, machine string) string { return join(string(KindNode), cluster, machine) }

// Remediation is remediation.<cluster>.<pool>.
func Remediation(cluster, pool string) string { return join(string(KindRemediation), cluster, pool) }

// Autoscaler is autoscaler.<cluster>.<pool>: what the autoscaler-provider
// last did to the pool.
func Autoscaler(cluster, pool string) string { return join(string(KindAutoscaler), cluster, pool) }

// Provider is provider.<provider>, its announcement.
func Provider(provider string) string { return join(string(KindProvider), provider) }

// Secrets is secrets.<cluster>, the status of a cluster's secrets.
func Secrets(cluster string) string { return join(string(KindSecrets), cluster) }

// PKI is pki.<cluster>.
func PKI(cluster string) string { return join(string(KindPKI), cluster) }

// Kubeconfig is kubeconfig.<cluster>.
func Kubeconfig(cluster string) string { return join(string(KindKubeconfig), cluster) }

// Bootstrap is bootstrap.<cluster>.<machine>.
func Bootstrap(cluster, machine string) string { return join(string(KindBootstrap), cluster, machine) }

// AddonSet is addonset.<set>, an add-on set (desired).
func AddonSet(set string) string { return join(string(KindAddonSet), set) }

// Addon is addon.<cluster>.<set>, one add-on set's record on one cluster
// (observed).
func Addon(cluster, set string) string { return join(string(KindAddon), cluster, set) }

// AddonSecret is addonsecret.<secret>, a sealed add-on manifest (secrets).
func AddonSecret(secret string) string { return join(string(KindAddonSecret), secret) }

// BootstrapSecret is bootstrapsecret.<secret>, sealed named values that
// bootstrap files take their content from (secrets).
func BootstrapSecret(secret string) string { return join(string(KindBootstrapSecret), secret) }

// AddonsOf is the prefix of a cluster's add-on records: addon.<cluster>.
func AddonsOf(cluster string) string { return Addon(cluster, "") }

// Backup is backup.<name>, a record of the backup service: backup.schedule
// is the scheduled backups' state. It belongs to no cluster.
func Backup(name string) string { return join(string(KindBackup), name) }

// BackupSchedule is backup.schedule.
var BackupSchedule = Backup("schedule")

// Class is clusterclass.<class>, a cluster class at its current revision
// (desired).
func Class(class string) string { return join(string(KindClass), class) }

// ClassRev is classrev.<class>.<revision>, one revision of a class, kept
// immutable (desired).
func ClassRev(class string, revision int64) string {
	return join(string(KindClassRev), class, fmt.Sprint(revision))
}

// ClassRevsOf is the prefix of a class's revisions: classrev.<class>.
func ClassRevsOf(class string) string { return join(string(KindClassRev), class, "") }

// Rollout is rollout.<rollout>: its spec (desired) and status (observed).
func Rollout(rollout string) string { return join(string(KindRollout), rollout) }

// Maintenance is maintenance.<cluster>: the maintenance service's record
// of a cluster's windows and hibernation schedules.
func Maintenance(cluster string) string { return join(string(KindMaintenance), cluster) }

// K8sVersions is kubernetesversions.<name>, a Kubernetes version
// catalogue; auto-patch reads K8sVersionsDefault.
func K8sVersions(name string) string { return join(string(KindK8sVersions), name) }

// ControlPlane is controlplane.<cluster>: the cluster's control-plane record,
// written by its implementation.
func ControlPlane(cluster string) string { return join(string(KindControlPlane), cluster) }

// ExternalKubeconfig is externalkubeconfig.<name>, the sealed kubeconfig
// of an external cluster a cluster's external control plane names
// (secrets; capn external-kubeconfig).
func ExternalKubeconfig(name string) string { return join(string(KindExternalKubeconfig), name) }

// K8sVersionsDefault is kubernetesversions.default, the catalogue
// auto-patch picks versions from.
var K8sVersionsDefault = K8sVersions("default")

// MachinesOf is the prefix of a cluster's machine keys: machine.<cluster>.
func MachinesOf(cluster string) string { return Machine(cluster, "") }

// NodesOf is the prefix of a cluster's node keys: node.<cluster>.
func NodesOf(cluster string) string { return Node(cluster, "") }

// RemediationsOf is the prefix of a cluster's remediation keys.
func RemediationsOf(cluster string) string { return Remediation(cluster, "") }

// BootstrapsOf is the prefix of a cluster's bootstrap data keys.
func BootstrapsOf(cluster string) string { return Bootstrap(cluster, "") }

// InfraOf is the prefix of every infra key of a provider: infra.<provider>.
func InfraOf(provider string) string { return join(string(KindInfra), provider, "") }

// Kinds is every kind of key, sorted.
func Kinds() []Kind {
	return slices.Sorted(maps.Keys(shapes))
}

// shapes: the tokens after the kind, by kind.
var shapes = map[Kind]int{
	KindCluster: 1, KindMachine: 2, KindInfra: 3, KindNode: 2, KindRemediation: 2, KindAutoscaler: 2,
	KindProvider: 1, KindSecrets: 1, KindPKI: 1, KindKubeconfig: 1, KindBootstrap: 2,
	KindAddonSet: 1, KindAddon: 2, KindAddonSecret: 1, KindBootstrapSecret: 1,
	KindBackup: 1, KindClass: 1, KindClassRev: 2, KindRollout: 1, KindMaintenance: 1, KindK8sVersions: 1,
	KindControlPlane: 1, KindExternalKubeconfig: 1,
}

// ErrMalformed is wrapped by every error of Parse and ParseSubject.
var ErrMalformed = errors.New("malformed")

// Parse reads a key back: its kind and names. A key of another shape
// (unknown kind, wrong number of tokens, an empty token) is refused.
func Parse(key string) (Key, error) {
	toks := strings.Split(key, ".")
	kind := Kind(toks[0])
	n, ok := shapes[kind]
	if !ok || len(toks) != n+1 || !tokens(toks[1:]) {
		return Key{}, fmt.Errorf("key %q: %w", key, ErrMalformed)
	}
	k := Key{Kind: kind}
	switch kind {
	case KindProvider:
		k.Provider = toks[1]
	case KindAddonSet, KindAddonSecret, KindBootstrapSecret, KindBackup, KindClass, KindRollout, KindK8sVersions, KindExternalKubeconfig:
		k.Name = toks[1]
	case KindClassRev:
		// Name is "<class>.<revision>".
		k.Name = toks[1] + "." + toks[2]
	case KindInfra:
		k.Provider, k.Cluster, k.Name = toks[1], toks[2], toks[3]
	default:
		k.Cluster = toks[1]
		if n == 2 {
			k.Name = toks[2]
		}
	}
	return k, nil
}

// String is the key k describes.
func (k Key) String() string {
	switch k.Kind {
	case KindProvider:
		return join(string(k.Kind), k.Provider)
	case KindBackup, KindClass, KindRollout, KindClassRev, KindK8sVersions:
		return join(string(k.Kind), k.Name)
	case KindInfra:
		return join(string(k.Kind), k.Provider, k.Cluster, k.Name)
	case KindAddonSet, KindAddonSecret, KindBootstrapSecret, KindExternalKubeconfig:
		return join(string(k.Kind), k.Name)
	}
	if shapes[k.Kind] == 2 {
		return join(string(k.Kind), k.Cluster, k.Name)
	}
	return join(string(k.Kind), k.Cluster)
}

// Machine reports whether k is one machine's (a machine, node, bootstrap
// or machine infra key); its cluster and name are k.Cluster and k.Name.
func (k Key) Machine() bool {
	switch k.Kind {
	case KindMachine, KindNode, KindBootstrap:
		return true
	case KindInfra:
		return k.Name != ClusterObject
	}
	return false
}

// ClusterOf is the cluster a key belongs to, for watchers that queue
// clusters: "" for a provider's announcement, an add-on set or secret, a
// backup record, or a malformed key.
func ClusterOf(key string) string {
	k, err := Parse(key)
	if err != nil {
		return ""
	}
	return k.Cluster
}

func join(toks ...string) string { return strings.Join(toks, ".") }

// tokens reports whether every token is a name: not empty, no wildcard.
func tokens(toks []string) bool {
	for _, t := range toks {
		if t == "" || strings.ContainsAny(t, "*> \t\r\n") {
			return false
		}
	}
	return true
}
