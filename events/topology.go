package events

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/schemas/keys"
)

// Streams, buckets and subject roots. Subjects carry the cluster (and the
// machine, or "_" for cluster-level facts) as their last tokens, so a
// timeline or a permission can be scoped with wildcards.
const (
	// StreamEvents keeps facts (capn.evt.<entity>.<what>.<cluster>.<object>)
	// for the audit trail and the timeline a user sees.
	StreamEvents  = "CAPN_EVENTS"
	SubjectEvents = keys.EventsRoot
	// StreamCommands is a work queue of requests to one kind of worker
	// (capn.cmd.<worker>.<verb>.<cluster>.<object>).
	StreamCommands  = "CAPN_COMMANDS"
	SubjectCommands = keys.CommandsRoot
	// StreamProviders is a work queue of provider commands
	// (capn.provider.<provider>.<kind>.<verb>.<cluster>.<object>); each
	// provider consumes capn.provider.<its name>.> through its own durable.
	StreamProviders  = "CAPN_PROVIDERS"
	SubjectProviders = keys.ProvidersRoot
	// StreamHealth keeps the latest few health reports per node and kind
	// (capn.health.<cluster>.<machine>.<kind>).
	StreamHealth  = "CAPN_HEALTH"
	SubjectHealth = keys.HealthRoot
	// StreamControlPlanes is a work queue of commands to control-plane
	// implementations (capn.controlplane.<implementation>.<verb>.<cluster>);
	// each implementation consumes capn.controlplane.<its name>.>.
	StreamControlPlanes  = "CAPN_CONTROLPLANES"
	SubjectControlPlanes = keys.ControlPlaneRoot

	BucketDesired  = "desired"
	BucketObserved = "observed"
	BucketSecrets  = "secrets"
	// ObjectBackups is the object store of the management plane's backups
	// (the backup service's; stream OBJ_backups).
	ObjectBackups = "backups"
	// ObjectEtcdSnapshots is the object store of workload clusters' etcd
	// snapshots (sealed), <cluster>/<name>: the backup service's.
	ObjectEtcdSnapshots = "etcd-snapshots"

	// ClusterObject stands in the object token of cluster-level subjects.
	ClusterObject = keys.ClusterObject
	// DuplicateWindow is how long JetStream remembers a Nats-Msg-Id.
	DuplicateWindow = 2 * time.Minute
)

// Subject joins subject tokens with dots.
func Subject(tokens ...string) string { return strings.Join(tokens, ".") }

// EventSubject is the subject of a fact (keys.Event):
// capn.evt.<entity>.<what>.<cluster>.<object>.
func EventSubject(entity, what, cluster, object string) string {
	return keys.Event(entity, what, cluster, object)
}

// DriftSubject is where provider reports drift of a machine (keys.Drift):
// capn.evt.drift.<provider>.<cluster>.<machine>.
func DriftSubject(provider, cluster, machine string) string {
	return keys.Drift(provider, cluster, machine)
}

// CommandSubject is the subject of a command to a core worker
// (keys.Command).
func CommandSubject(worker, verb, cluster, object string) string {
	return keys.Command(worker, verb, cluster, object)
}

// ProviderSubject is the subject of a command to provider p
// (keys.ProviderCommand).
func ProviderSubject(provider, kind, verb, cluster, object string) string {
	return keys.ProviderCommand(provider, kind, verb, cluster, object)
}

// HealthSubject is the subject of a health report of one node
// (keys.Health).
func HealthSubject(cluster, machine, kind string) string {
	return keys.Health(cluster, machine, kind)
}

// HealthFilters are the subjects of the health reports of kinds
// (keys.HealthHeartbeat, ...) of every node.
func HealthFilters(kinds ...string) []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = HealthSubject("*", "*", k)
	}
	return out
}

// Topology is what a deployment declares in JetStream: streams, KV buckets
// and durable consumers. Provision creates or updates all of it.
type Topology struct {
	Streams      []jetstream.StreamConfig
	Buckets      []jetstream.KeyValueConfig
	ObjectStores []jetstream.ObjectStoreConfig
	Consumers    []ConsumerSpec
}

// DefaultTopology is capn's own topology with every stream and bucket
// replicated replicas times (1 for capn dev, 3 on a JetStream cluster).
func DefaultTopology(replicas int) Topology {
	if replicas < 1 {
		replicas = 1
	}
	return Topology{
		Streams: []jetstream.StreamConfig{
			{
				Name: StreamEvents, Subjects: []string{SubjectEvents + ".>"},
				Description: "capn facts: audit trail and timelines",
				Retention:   jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Replicas: replicas,
				MaxAge: 7 * 24 * time.Hour, MaxBytes: 1 << 30, Duplicates: DuplicateWindow,
				Discard: jetstream.DiscardOld,
			},
			{
				Name: StreamCommands, Subjects: []string{SubjectCommands + ".>"},
				Description: "capn commands to core workers",
				Retention:   jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Replicas: replicas,
				MaxAge: 24 * time.Hour, Duplicates: DuplicateWindow,
			},
			{
				Name: StreamProviders, Subjects: []string{SubjectProviders + ".>"},
				Description: "capn commands to infrastructure providers",
				Retention:   jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Replicas: replicas,
				MaxAge: 24 * time.Hour, Duplicates: DuplicateWindow,
			},
			{
				Name: StreamControlPlanes, Subjects: []string{SubjectControlPlanes + ".>"},
				Description: "capn commands to control-plane implementations",
				Retention:   jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Replicas: replicas,
				MaxAge: 24 * time.Hour, Duplicates: DuplicateWindow,
			},
			{
				Name: StreamHealth, Subjects: []string{SubjectHealth + ".>"},
				Description: "node health reports: latest few per node and kind",
				Retention:   jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Replicas: replicas,
				MaxMsgsPerSubject: 5, MaxAge: 24 * time.Hour, Duplicates: DuplicateWindow,
				Discard: jetstream.DiscardOld,
			},
		},
		Buckets: []jetstream.KeyValueConfig{
			{Bucket: BucketDesired, Description: "user intent: clusters and desired machines", History: 5, Storage: jetstream.FileStorage, Replicas: replicas},
			// History 1 lets per-key TTLs (provider leases) apply unclamped.
			{Bucket: BucketObserved, Description: "what is: status, infrastructure, node health", History: 1, Storage: jetstream.FileStorage, Replicas: replicas, LimitMarkerTTL: time.Minute},
			{Bucket: BucketSecrets, Description: "sealed PKI, kubeconfigs and bootstrap data", History: 1, Storage: jetstream.FileStorage, Replicas: replicas},
		},
		ObjectStores: []jetstream.ObjectStoreConfig{
			{Bucket: ObjectBackups, Description: "backups of desired, observed and secrets (sealed); the backup service keeps the newest few", Storage: jetstream.FileStorage, Replicas: replicas},
			{Bucket: ObjectEtcdSnapshots, Description: "workload clusters' etcd snapshots (sealed), <cluster>/<name>; the backup service keeps each cluster's newest few", Storage: jetstream.FileStorage, Replicas: replicas},
		},
	}
}

// Provision creates or updates every stream, bucket and consumer in t. It
// is idempotent: every service may call it at start with the parts it uses.
func Provision(ctx context.Context, js jetstream.JetStream, t Topology) error {
	ctx, cancel := withDefaultTimeout(ctx, 30*time.Second)
	defer cancel()
	var errs []error
	for _, sc := range t.Streams {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			errs = append(errs, fmt.Errorf("stream %s: %w", sc.Name, err))
		}
	}
	for _, kc := range t.Buckets {
		if _, err := js.CreateOrUpdateKeyValue(ctx, kc); err != nil {
			errs = append(errs, fmt.Errorf("bucket %s: %w", kc.Bucket, err))
		}
	}
	for _, oc := range t.ObjectStores {
		if _, err := js.CreateOrUpdateObjectStore(ctx, oc); err != nil {
			errs = append(errs, fmt.Errorf("object store %s: %w", oc.Bucket, err))
		}
	}
	for _, cs := range t.Consumers {
		if _, err := EnsureConsumer(ctx, js, cs); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
