package sdk

import (
	"fmt"
	"regexp"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/schemas/keys"
)

// Observed KV keys a provider owns (bucket events.BucketObserved).
const (
	// InfraRoot starts every infrastructure key: infra.<provider>.<cluster>.<machine>.
	InfraRoot = string(keys.KindInfra)
	// AnnouncementRoot starts a provider's announcement key: provider.<name>.
	AnnouncementRoot = string(keys.KindProvider)
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
	return keys.Infra(provider, cluster, machine)
}

// InfraClusterKey is the observed key of a cluster's infrastructure:
// infra.<provider>.<cluster>._.
func InfraClusterKey(provider, cluster string) string {
	return keys.InfraCluster(provider, cluster)
}

// InfraPrefix is the prefix of every infra key of provider.
func InfraPrefix(provider string) string { return keys.InfraOf(provider) }

// AnnouncementKey is the observed key of a provider's announcement:
// provider.<name>.
func AnnouncementKey(provider string) string {
	return keys.Provider(provider)
}

// DriftSubject is where provider publishes drift of a machine:
// capn.evt.drift.<provider>.<cluster>.<machine> (events.DriftSubject); a
// provider's NATS user may publish under its own name only.
func DriftSubject(provider, cluster, machine string) string {
	return keys.Drift(provider, cluster, machine)
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

// parseSubject reads a command's subject, which must be provider's:
// capn.provider.<provider>.<kind>.<verb>.<cluster>.<object>.
func parseSubject(provider, subject string) (keys.Subject, error) {
	s, err := keys.ParseSubject(subject)
	if err != nil || s.Root != keys.ProvidersRoot || s.Provider != provider {
		return keys.Subject{}, fmt.Errorf("subject %q is not capn.provider.%s.<kind>.<verb>.<cluster>.<object>", subject, provider)
	}
	return s, nil
}
