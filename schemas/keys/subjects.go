package keys

import (
	"fmt"
	"strings"
)

// Subject roots: the streams' subjects and the bootstrap request-reply.
const (
	// EventsRoot: facts, capn.evt.<entity>.<what>.<cluster>.<object>.
	EventsRoot = "capn.evt"
	// CommandsRoot: commands to core workers,
	// capn.cmd.<worker>.<verb>.<cluster>.<object>.
	CommandsRoot = "capn.cmd"
	// ProvidersRoot: provider commands,
	// capn.provider.<provider>.<kind>.<verb>.<cluster>.<object>.
	ProvidersRoot = "capn.provider"
	// HealthRoot: node health reports, capn.health.<cluster>.<machine>.<kind>.
	HealthRoot = "capn.health"
	// BootstrapFetchRoot: a machine's bootstrap data request,
	// capn.bootstrap.fetch.<cluster>.<machine>.
	BootstrapFetchRoot = "capn.bootstrap.fetch"
	// BootstrapCredentialRoot: a provider's request for a machine's
	// credential, capn.bootstrap.credential.<provider>.<cluster>.<machine>.
	BootstrapCredentialRoot = "capn.bootstrap.credential"
	// BootstrapHostedRoot: the hosted control-plane service's request for
	// a hosted cluster's control-plane PKI (CAs with their keys and the
	// service-account key pair), capn.bootstrap.hosted.<cluster>; the
	// bootstrapper answers it sealed to the requester's key.
	BootstrapHostedRoot = "capn.bootstrap.hosted"
	// BackupRoot: requests to the backup service (core request-reply):
	// capn.backup.create, capn.backup.restore.
	BackupRoot = "capn.backup"
	// EtcdRoot: the backup service's commands to a control-plane
	// machine's node agent (core request-reply),
	// capn.etcd.<cluster>.<machine>.<op>.
	EtcdRoot = "capn.etcd"
	// PKIRoot: the backup service's certificates commands to a machine's
	// node agent (core request-reply; CA rotation phases, leaf expiry),
	// capn.pki.<cluster>.<machine>.<op>.
	PKIRoot = "capn.pki"
	// IngestRoot: the gateway's ingest stream, capn.ingest.<event type's
	// tokens> (any number of them: not parsed here).
	IngestRoot = "capn.ingest"
	// ControlPlaneRoot: commands to a control-plane implementation,
	// capn.controlplane.<implementation>.<verb>.<cluster>
	// (controlplane.proto).
	ControlPlaneRoot = "capn.controlplane"
)

// Control-plane command verbs (ControlPlaneCommand).
const (
	ControlPlaneEnsure = "ensure"
	ControlPlaneDelete = "delete"
)

// ControlPlaneCommand is the subject of a command to a control-plane
// implementation: capn.controlplane.<implementation>.<verb>.<cluster>.
func ControlPlaneCommand(implementation, verb, cluster string) string {
	return join(ControlPlaneRoot, implementation, verb, cluster)
}

// BootstrapHosted is capn.bootstrap.hosted.<cluster>: the request for a
// hosted cluster's control-plane PKI.
func BootstrapHosted(cluster string) string { return join(BootstrapHostedRoot, cluster) }

// EntityDrift is the entity of drift reports, the one fact whose <what>
// token is the provider: capn.evt.drift.<provider>.<cluster>.<machine>.
const EntityDrift = "drift"

// Event is the subject of a fact: capn.evt.<entity>.<what>.<cluster>.<object>.
func Event(entity, what, cluster, object string) string {
	return join(EventsRoot, entity, what, cluster, object)
}

// Drift is where provider reports drift of a machine:
// capn.evt.drift.<provider>.<cluster>.<machine>. The provider is in the
// subject so that NATS permissions let each provider publish its own
// reports only, and the shape of every fact is kept for timelines.
func Drift(provider, cluster, machine string) string {
	return Event(EntityDrift, provider, cluster, machine)
}

// Command is the subject of a command to a core worker:
// capn.cmd.<worker>.<verb>.<cluster>.<object>.
func Command(worker, verb, cluster, object string) string {
	return join(CommandsRoot, worker, verb, cluster, object)
}

// ProviderCommand is the subject of a command to provider p:
// capn.provider.<provider>.<kind>.<verb>.<cluster>.<object>.
func ProviderCommand(provider, kind, verb, cluster, object string) string {
	return join(ProvidersRoot, provider, kind, verb, cluster, object)
}

// The kinds of health report, the last token of a Health subject.
const (
	HealthHeartbeat  = "heartbeat"
	HealthConditions = "conditions"
	HealthProblem    = "problem"
)

// Health is the subject of a health report of one node:
// capn.health.<cluster>.<machine>.<kind>.
func Health(cluster, machine, kind string) string {
	return join(HealthRoot, cluster, machine, kind)
}

// BootstrapFetch is capn.bootstrap.fetch.<cluster>.<machine>.
func BootstrapFetch(cluster, machine string) string {
	return join(BootstrapFetchRoot, cluster, machine)
}

// BootstrapCredential is capn.bootstrap.credential.<provider>.<cluster>.<machine>.
func BootstrapCredential(provider, cluster, machine string) string {
	return join(BootstrapCredentialRoot, provider, cluster, machine)
}

// BackupRequest is capn.backup.<verb> (create, restore).
func BackupRequest(verb string) string { return join(BackupRoot, verb) }

// EtcdCommand is capn.etcd.<cluster>.<machine>.<op>: an etcd snapshot or
// restore step asked of machine's node agent.
func EtcdCommand(cluster, machine, op string) string { return join(EtcdRoot, cluster, machine, op) }

// PKICommand is capn.pki.<cluster>.<machine>.<op>: a CA rotation phase
// or a leaf check asked of machine's node agent. The command of a phase
// carries the signing CA's key: only that machine may read it.
func PKICommand(cluster, machine, op string) string { return join(PKIRoot, cluster, machine, op) }

// CARotationStatus is backup.ca-<cluster> (observed): the cluster's CA
// rotation as an operator sees it.
func CARotationStatus(cluster string) string { return Backup("ca-" + cluster) }

// CertificatesStatus is backup.certs-<cluster> (observed): the cluster's
// leaf certificates' earliest expiry.
func CertificatesStatus(cluster string) string { return Backup("certs-" + cluster) }

// EtcdSnapshotStatus is backup.etcd-<cluster> (observed): the cluster's
// scheduled etcd snapshots' state.
func EtcdSnapshotStatus(cluster string) string { return Backup("etcd-" + cluster) }

// Subject is a parsed subject. Object is the machine, or ClusterObject.
// By root:
//
//	capn.evt.<Entity>.<Verb>.<Cluster>.<Object>           Provider = Verb for drift
//	capn.cmd.<Entity>.<Verb>.<Cluster>.<Object>           Entity is the worker
//	capn.provider.<Provider>.<Entity>.<Verb>.<Cluster>.<Object>
//	capn.health.<Cluster>.<Object>.<Entity>               Entity is the report's kind
//	capn.bootstrap.fetch.<Cluster>.<Object>
//	capn.bootstrap.credential.<Provider>.<Cluster>.<Object>
//	capn.controlplane.<Entity>.<Verb>.<Cluster>              Entity is the implementation
type Subject struct {
	Root     string
	Provider string
	Entity   string
	Verb     string
	Cluster  string
	Object   string
}

// subjectShapes: the tokens after each root.
var subjectShapes = map[string]int{
	EventsRoot: 4, CommandsRoot: 4, ProvidersRoot: 5, HealthRoot: 3,
	BootstrapFetchRoot: 2, BootstrapCredentialRoot: 3, ControlPlaneRoot: 3,
}

// ParseSubject reads a subject back. One of another shape (unknown root,
// wrong number of tokens, an empty token or a wildcard) is refused.
func ParseSubject(subject string) (Subject, error) {
	// The error is made only when there is one: every consumer parses
	// the subject of every message it handles.
	bad := func() error { return fmt.Errorf("subject %q: %w", subject, ErrMalformed) }
	for root, n := range subjectShapes {
		rest, ok := strings.CutPrefix(subject, root+".")
		if !ok {
			continue
		}
		t := strings.Split(rest, ".")
		if len(t) != n || !tokens(t) {
			return Subject{}, bad()
		}
		s := Subject{Root: root}
		switch root {
		case EventsRoot, CommandsRoot:
			s.Entity, s.Verb, s.Cluster, s.Object = t[0], t[1], t[2], t[3]
			if root == EventsRoot && s.Entity == EntityDrift {
				s.Provider = s.Verb
			}
		case ProvidersRoot:
			s.Provider, s.Entity, s.Verb, s.Cluster, s.Object = t[0], t[1], t[2], t[3], t[4]
		case HealthRoot:
			s.Cluster, s.Object, s.Entity = t[0], t[1], t[2]
		case BootstrapFetchRoot:
			s.Cluster, s.Object = t[0], t[1]
		case BootstrapCredentialRoot:
			s.Provider, s.Cluster, s.Object = t[0], t[1], t[2]
		case ControlPlaneRoot:
			s.Entity, s.Verb, s.Cluster = t[0], t[1], t[2]
		}
		return s, nil
	}
	return Subject{}, bad()
}

// String is the subject s describes.
func (s Subject) String() string {
	switch s.Root {
	case EventsRoot:
		return Event(s.Entity, s.Verb, s.Cluster, s.Object)
	case CommandsRoot:
		return Command(s.Entity, s.Verb, s.Cluster, s.Object)
	case ProvidersRoot:
		return ProviderCommand(s.Provider, s.Entity, s.Verb, s.Cluster, s.Object)
	case HealthRoot:
		return Health(s.Cluster, s.Object, s.Entity)
	case BootstrapFetchRoot:
		return BootstrapFetch(s.Cluster, s.Object)
	case BootstrapCredentialRoot:
		return BootstrapCredential(s.Provider, s.Cluster, s.Object)
	case ControlPlaneRoot:
		return ControlPlaneCommand(s.Entity, s.Verb, s.Cluster)
	}
	return ""
}
