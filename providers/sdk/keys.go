package sdk

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/capn-dev/capn/events"
)

// Observed KV keys a provider owns (bucket events.BucketObserved).
const (
	// InfraRoot starts every infrastructure key: infra.<provider>.<cluster>.<machine>.
	InfraRoot = "infra"
	// AnnouncementRoot starts a provider's announcement key: provider.<name>.
	AnnouncementRoot = "provider"
	// KindMachine and KindCluster are the <kind> token of provider subjects.
	KindMachine = "machine"
	KindCluster = "cluster"
)

// Event types of the provider contract's commands.
const (
	TypeEnsureCluster = events.TypeProviderCommand + ".cluster.ensure" // EnsureClusterInfra
	TypeDeleteCluster = events.TypeProviderCommand + ".cluster.delete" // DeleteClusterInfra
	TypeCreateMachine = events.TypeProviderCommand + ".machine.create" // CreateMachine
	TypeDeleteMachine = events.TypeProviderCommand + ".machine.delete" // DeleteMachine
	TypeStopMachine   = events.TypeProviderCommand + ".machine.stop"   // MachinePower
	TypeStartMachine  = events.TypeProviderCommand + ".machine.start"  // MachinePower
	TypeRebootMachine = events.TypeProviderCommand + ".machine.reboot" // MachinePower
)

// CommandType is the event type of a provider command of kind and verb.
func CommandType(kind, verb string) string {
	return events.TypeProviderCommand + "." + kind + "." + verb
}

// InfraKey is the observed key of a machine's infrastructure:
// infra.<provider>.<cluster>.<machine>.
func InfraKey(provider, cluster, machine string) string {
	return events.Subject(InfraRoot, provider, cluster, machine)
}

// InfraClusterKey is the observed key of a cluster's infrastructure:
// infra.<provider>.<cluster>._.
func InfraClusterKey(provider, cluster string) string {
	return InfraKey(provider, cluster, events.ClusterObject)
}

// InfraPrefix is the prefix of every infra key of provider.
func InfraPrefix(provider string) string { return InfraRoot + "." + provider + "." }

// AnnouncementKey is the observed key of a provider's announcement:
// provider.<name>.
func AnnouncementKey(provider string) string {
	return events.Subject(AnnouncementRoot, provider)
}

// DriftSubject is where provider publishes drift of a machine:
// capn.evt.drift.<provider>.<cluster>.<machine> (events.DriftSubject); a
// provider's NATS user may publish under its own name only.
func DriftSubject(provider, cluster, machine string) string {
	return events.DriftSubject(provider, cluster, machine)
}

// ServiceName is the runtime service name and durable consumer of provider
// name: provider-<name>.
func ServiceName(provider string) string { return "provider-" + provider }

var (
	providerName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	objectName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,252}$`)
)

// ValidateName checks a cluster or machine name: it becomes a subject
// token and a key token, so it may hold letters, digits, '-' and '_'
// only (no '.', '*', '>' or spaces), and not be "_" (the cluster object).
func ValidateName(what, name string) error {
	if !objectName.MatchString(name) {
		return fmt.Errorf("invalid %s name %q: want letters, digits, '-' or '_', starting with a letter or digit", what, name)
	}
	return nil
}

// splitKey returns the cluster and machine of infra.<p>.<cluster>.<machine>.
func splitKey(key string) (cluster, machine string, ok bool) {
	toks := strings.Split(key, ".")
	if len(toks) != 4 || toks[0] != InfraRoot {
		return "", "", false
	}
	return toks[2], toks[3], true
}

// commandSubject holds the tokens of capn.provider.<p>.<kind>.<verb>.<cluster>.<object>.
type commandSubject struct {
	kind, verb, cluster, object string
}

func parseSubject(provider, subject string) (commandSubject, error) {
	toks := strings.Split(subject, ".")
	if len(toks) != 7 || events.Subject(toks[0], toks[1]) != events.SubjectProviders || toks[2] != provider {
		return commandSubject{}, fmt.Errorf("subject %q is not capn.provider.%s.<kind>.<verb>.<cluster>.<object>", subject, provider)
	}
	return commandSubject{kind: toks[3], verb: toks[4], cluster: toks[5], object: toks[6]}, nil
}
