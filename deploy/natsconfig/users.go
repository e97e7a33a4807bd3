package natsconfig

import (
	"fmt"
	"slices"
	"strings"

	"github.com/capn-dev/capn/events"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// Component (user) names. Each core component's user has the name of the
// runtime service it runs as; a provider's is provider-<name>.
const (
	ClusterPlanner = "cluster-planner"
	MachineManager = "machine-manager"
	Bootstrapper   = "bootstrapper"
	HealthWatcher  = "health-watcher"
	Remediator     = "remediator"
	AddonManager   = "addon-manager"
	// FleetManager runs rollouts (services/fleet-manager).
	FleetManager = "fleet-manager"
	Gateway      = "gateway"
	// AutoscalerProvider serves the cluster autoscaler's externalgrpc API.
	AutoscalerProvider = "autoscaler-provider"
	// Backup takes and restores backups (services/backup).
	Backup = "backup"
	// Maintenance applies auto-patches and pending upgrades in maintenance
	// windows, and hibernation schedules (services/maintenance).
	Maintenance = "maintenance"
	// ControlPlaneExternal is the external control-plane implementation
	// (services/controlplane-external).
	ControlPlaneExternal = "controlplane-external"
	// ControlPlaneHosted runs hosted control planes
	// (services/controlplane-hosted).
	ControlPlaneHosted = "controlplane-hosted"
	// Init provisions streams and buckets, and may do nothing else.
	Init = "capn-init"
)

// Subjects and names that capn's services use and events does not export.
// They mirror the services' own definitions; tests/cluster runs every
// service under the rendered permissions and checks that every durable
// consumer on the server is one declared here.
const (
	// SubjectIngest is the gateway's ingest stream's subjects (gateway.SubjectIngest).
	SubjectIngest = keys.IngestRoot
	// SubjectBootstrapFetch is the root of the bootstrap fetch requests
	// (bootstrapper.FetchSubjectRoot): capn.bootstrap.fetch.<cluster>.<machine>.
	SubjectBootstrapFetch = keys.BootstrapFetchRoot
	// SubjectBootstrapCredential is the root of the providers' requests for
	// their machines' bootstrap credentials (bootstrapper.CredentialSubjectRoot):
	// capn.bootstrap.credential.<provider>.<cluster>.<machine>.
	SubjectBootstrapCredential = keys.BootstrapCredentialRoot
	// SubjectBootstrapHosted is the root of the hosted control-plane
	// service's requests for a hosted cluster's PKI
	// (bootstrapper.HostedSubjectRoot): capn.bootstrap.hosted.<cluster>.
	SubjectBootstrapHosted = keys.BootstrapHostedRoot
	// SubjectBackup is the root of the backup service's requests
	// (keys.BackupRoot): capn.backup.create, capn.backup.restore and the
	// etcd snapshots' etcd-snapshot, etcd-list, etcd-restore.
	SubjectBackup = keys.BackupRoot
	// SubjectEtcd is the root of the backup service's etcd commands to a
	// machine's node agent (keys.EtcdRoot): capn.etcd.<cluster>.<machine>.<op>.
	SubjectEtcd = keys.EtcdRoot
	// SubjectPKI is the root of the backup service's certificates commands
	// to a machine's node agent (keys.PKIRoot): capn.pki.<cluster>.<machine>.<op>.
	SubjectPKI = keys.PKIRoot
	// SubjectAuthCallout is where the server asks the bootstrapper to log
	// a machine in (bootstrapper.CalloutSubject): node agents have no
	// static user, each logs in as its own machine (keys.MachineUser).
	SubjectAuthCallout = "$SYS.REQ.USER.AUTH"
)

// ProviderUser is the user, runtime service and durable consumer name of
// provider p (sdk.ServiceName).
func ProviderUser(p string) string { return "provider-" + p }

// InboxPrefix is the reply-subject prefix user's connections must use
// (nats.CustomInboxPrefix; CAPN_NATS_INBOX_PREFIX): _INBOX_<user>.
func InboxPrefix(user string) string { return "_INBOX_" + user }

// Durable is a durable consumer a component creates and consumes.
type Durable struct {
	Stream, Name string
	// Filters are the consumer's filter subjects.
	Filters []string
}

// Durables are every durable consumer of d, each with the user that owns it.
func (d Deployment) Durables() map[string][]Durable {
	ev := func(s ...string) string { return events.Subject(append([]string{events.SubjectEvents}, s...)...) }
	out := map[string][]Durable{
		Bootstrapper: {{Stream: events.StreamCommands, Name: Bootstrapper, Filters: []string{events.SubjectCommands + ".bootstrap.>"}}},
		MachineManager: {
			{Stream: events.StreamEvents, Name: MachineManager + "-bootstrap", Filters: []string{ev("bootstrap", "ready", ">"), ev("bootstrap", "failed", ">"), ev("bootstrap", "waiting", ">")}},
		},
		HealthWatcher: {
			{Stream: events.StreamHealth, Name: HealthWatcher + "-health", Filters: events.HealthFilters(keys.HealthConditions, keys.HealthProblem)},
			{Stream: events.StreamHealth, Name: HealthWatcher + "-heartbeats", Filters: events.HealthFilters(keys.HealthHeartbeat)},
			{Stream: events.StreamEvents, Name: HealthWatcher + "-drift", Filters: []string{events.DriftSubject("*", "*", "*")}},
		},
		Remediator: {{Stream: events.StreamEvents, Name: Remediator + "-unhealthy", Filters: []string{ev("machine", "unhealthy", "*", "*")}}},
		ControlPlaneExternal: {{Stream: events.StreamControlPlanes, Name: ControlPlaneExternal,
			Filters: []string{events.Subject(events.SubjectControlPlanes, "external", ">")}}},
		ControlPlaneHosted: {{Stream: events.StreamControlPlanes, Name: ControlPlaneHosted,
			Filters: []string{events.Subject(events.SubjectControlPlanes, capnv1.ControlPlaneHosted, ">")}}},
	}
	for _, p := range d.Providers {
		u := ProviderUser(p.Name)
		out[u] = []Durable{{Stream: events.StreamProviders, Name: u, Filters: []string{events.Subject(events.SubjectProviders, p.Name, ">")}}}
	}
	return out
}

// Permissions are one user's NATS authorization. An empty allow list
// allows nothing (the renderer writes it as an explicit deny of ">").
type Permissions struct {
	PublishAllow, PublishDeny, SubscribeAllow []string
	// Responses allows publishing one reply to each request received
	// (allow_responses), for a user that answers requests.
	Responses bool
}

// User is one NATS user of the deployment.
type User struct {
	// Name is the component (and runtime service) name.
	Name string
	// Role says in one line what the user is for.
	Role string
	// Inbox is the inbox prefix its connections must use.
	Inbox string
	Perms Permissions
}

// Users are every NATS user of d, in a fixed order: the core components,
// the gateway, the providers (in d's order) and the init job. Node agents
// have none: each logs in as its machine through the bootstrapper's auth
// callout (with NodeAgents).
func (d Deployment) Users() []User {
	durables := d.Durables()
	var users []User
	add := func(name, role string, f func(g *grants)) {
		g := &grants{}
		for _, c := range durables[name] {
			g.consume(c)
		}
		f(g)
		users = append(users, User{Name: name, Role: role, Inbox: InboxPrefix(name), Perms: g.permissions(InboxPrefix(name))})
	}
	ev := func(s ...string) string { return events.Subject(append([]string{events.SubjectEvents}, s...)...) }
	des, obs, sec := events.BucketDesired, events.BucketObserved, events.BucketSecrets

	add(ClusterPlanner, "plans machines and rolls clusters out", func(g *grants) {
		g.read(des, ">")
		g.read(obs, ">")
		g.write(des, "cluster.>") // removes a deleted cluster's key
		g.write(des, "machine.>")
		g.write(obs, "cluster.>")
		// The machines control plane's record (the planner is that
		// implementation), and the commands to the other implementations.
		g.write(obs, "controlplane.>")
		g.publish(ev("cluster", ">"), events.Subject(events.SubjectProviders, "*", "cluster", ">"),
			events.Subject(events.SubjectCommands, "bootstrap", "cleanup", ">"),
			events.Subject(events.SubjectControlPlanes, ">"))
	})
	add(MachineManager, "drives each machine's life: bootstrap, provider create and delete", func(g *grants) {
		g.read(des, ">")
		g.read(obs, ">")
		g.write(obs, "machine.>")
		g.publish(ev("machine", ">"), events.Subject(events.SubjectCommands, "bootstrap", "generate", ">"),
			events.Subject(events.SubjectProviders, "*", "machine", "create", ">"),
			events.Subject(events.SubjectProviders, "*", "machine", "delete", ">"),
			// A machine deleted with the Orphan policy is let go of.
			events.Subject(events.SubjectProviders, "*", "machine", "orphan", ">"),
			// Hibernation powers machines off and on.
			events.Subject(events.SubjectProviders, "*", "machine", "stop", ">"),
			events.Subject(events.SubjectProviders, "*", "machine", "start", ">"))
		// Facts that belong to the health-watcher, the remediator and the
		// gateway (hooks added or released).
		g.deny(ev("machine", "unhealthy", ">"), ev("machine", "remediation", ">"), ev("machine", "hook", ">"))
	})
	add(Bootstrapper, "owns PKI, kubeconfigs and bootstrap data (the secrets bucket)", func(g *grants) {
		g.read(des, ">")
		g.read(obs, ">")
		g.write(sec, ">")
		g.write(obs, "secrets.>")
		// It reads controlplane.<c> (obs >): a hosted or external control
		// plane's endpoint and CA for the workers' bootstrap.
		g.publish(ev("bootstrap", ">"))
		g.serve(events.Subject(SubjectBootstrapFetch, "*", "*"), events.Subject(SubjectBootstrapCredential, "*", "*", "*"))
		g.serve(events.Subject(SubjectBootstrapHosted, "*")) // the hosted control planes' PKI (type hosted only)
		if d.NodeAgents {
			g.serve(SubjectAuthCallout) // machines log in as themselves (auth callout)
		}
	})
	add(HealthWatcher, "judges node health from heartbeats, conditions, drift and workload clusters' Nodes", func(g *grants) {
		g.read(des, ">")
		g.read(obs, ">")
		g.read(sec, "kubeconfig.>") // sealed; it holds the key to read real-kubernetes clusters' Nodes
		// External clusters' Nodes: with the kubeconfig the user registered
		// (secrets/clusterkubeconfig), never its other keys.
		g.read(sec, "externalkubeconfig.>")
		g.write(obs, "node.>")
		g.publish(ev("machine", "unhealthy", ">"))
	})
	add(Remediator, "repairs or replaces unhealthy machines", func(g *grants) {
		g.read(des, ">")
		g.read(obs, ">")
		g.write(des, "machine.>") // a machine's deletion timestamp
		g.write(obs, "remediation.>")
		g.publish(ev("machine", "remediation", ">"), events.Subject(events.SubjectProviders, "*", "machine", "reboot", ">"))
	})
	add(AddonManager, "applies add-on sets to workload clusters and records each set's outcome per cluster", func(g *grants) {
		g.read(des, ">")
		g.read(obs, ">")
		// Sealed; it holds the key: the admin kubeconfigs to reach workload
		// API servers, and the add-on secrets sets name. Never PKI or
		// bootstrap data.
		g.read(sec, "kubeconfig.>")
		g.read(sec, "externalkubeconfig.>") // external clusters' API servers
		g.read(sec, "addonsecret.>")
		g.write(obs, "addon.>")
		g.publish(ev("addon", ">"))
	})
	add(FleetManager, "runs rollouts: moves the clusters of each wave to the change and records the rollout's status", func(g *grants) {
		g.read(des, ">")
		g.read(obs, ">")
		// The change, written to the desired clusters of the current wave
		// (a compare-and-set); never a class, a rollout or a machine.
		g.write(des, "cluster.>")
		g.write(obs, "rollout.>")
		g.publish(ev("rollout", ">"))
	})
	add(AutoscalerProvider, "the cluster autoscaler's cloud provider: sizes autoscaled pools", func(g *grants) {
		// Its caches watch two prefixes of each bucket (one watcher, several
		// filters), which only a grant of the whole bucket allows.
		g.read(des, ">")
		g.read(obs, ">")
		// A pool's replicas (the same compare-and-set write as the API's)
		// and the delete-machine mark of the machines the autoscaler names.
		g.write(des, "cluster.>")
		g.write(des, "machine.>")
		g.write(obs, "autoscaler.>")
		g.publish(ev("autoscaler", ">"))
	})
	add(Gateway, "the HTTP API: writes desired clusters and add-on sets, serves state, timelines, kubeconfigs, ingest", func(g *grants) {
		g.read(des, ">")
		g.read(obs, ">")
		g.read(sec, "kubeconfig.>") // sealed; the gateway holds the key to serve them
		g.write(des, "cluster.>")
		g.write(des, "addonset.>")
		// Cluster classes, their immutable revisions and rollouts.
		g.write(des, "clusterclass.>")
		g.write(des, "classrev.>")
		g.write(des, "rollout.>")
		g.write(des, "kubernetesversions.>") // the auto-patch catalogue
		// Add-on secrets (capn addon-secret) and bootstrap secrets (capn
		// bootstrap-secret): sealed with the key it holds, written and
		// deleted only; no other key of secrets.
		g.write(sec, "addonsecret.>")
		g.write(sec, "bootstrapsecret.>")
		// External clusters' kubeconfigs (capn external-kubeconfig):
		// written, deleted, and read back to show what they are (never
		// their credentials).
		g.read(sec, "externalkubeconfig.>")
		g.write(sec, "externalkubeconfig.>")
		// A second writer of desired machines: lifecycle hook annotations
		// and deletion_timestamp (capn hook, capn delete machine), each a
		// compare-and-set; the planner owns the rest of the record.
		g.write(des, "machine.>")
		g.publish(SubjectIngest+".>", events.SubjectHealth+".>", ev("machine", "hook", ">"))
		g.ordered(events.StreamEvents, ev("*", "*", "*", "*"), durablesOn(durables, events.StreamEvents))
		// Backups and restores are the backup service's: the gateway asks
		// it, and moves files between HTTP and the backups object store.
		g.publish(events.Subject(SubjectBackup, "*"))
		g.objects(events.ObjectBackups)
	})
	add(Backup, "takes backups (each bucket read at one point, secrets sealed) and restores them; hands infrastructure to providers to adopt", func(g *grants) {
		for _, b := range []string{des, obs, sec} {
			g.snapshot(b)
		}
		g.write(des, ">")
		g.write(sec, ">")
		// Every observed record but the providers' (infra.*, provider.*):
		// a provider writes back what it adopts.
		for _, k := range []string{"cluster.>", "machine.>", "node.>", "remediation.>", "autoscaler.>", "secrets.>", "addon.>", "backup.>", "rollout.>", "maintenance.>", "controlplane.>"} {
			g.write(obs, k)
		}
		// Adoption only: never a create, a delete or an orphan.
		g.publish(events.Subject(events.SubjectProviders, "*", "machine", "adopt", ">"),
			events.Subject(events.SubjectProviders, "*", "cluster", "adopt", ">"))
		g.objects(events.ObjectBackups)
		g.serve(events.Subject(SubjectBackup, "create"), events.Subject(SubjectBackup, "restore"))
		// Workload clusters' etcd snapshots: commands to the control-plane
		// machines' node agents (each subscribes only its own), the sealed
		// snapshots in their own object store, and the requests for them.
		g.publish(events.Subject(SubjectEtcd, "*", "*", "*"))
		g.objects(events.ObjectEtcdSnapshots)
		g.serve(events.Subject(SubjectBackup, "etcd-snapshot"), events.Subject(SubjectBackup, "etcd-list"), events.Subject(SubjectBackup, "etcd-restore"))
		// Cluster CA rotation and leaf expiry: commands to every machine's
		// node agent (each subscribes only its own) and the request.
		g.publish(events.Subject(SubjectPKI, "*", "*", "*"), ev("certificates", ">"))
		g.serve(events.Subject(SubjectBackup, "rotate-ca"))
	})
	add(Maintenance, "applies auto-patches and pending upgrades in maintenance windows, and hibernation schedules", func(g *grants) {
		// Its cache watches two prefixes of desired (cluster.>,
		// kubernetesversions.>), which only a grant of the whole bucket
		// allows; of observed only its own records, of secrets nothing.
		g.read(des, ">")
		// A cluster's kubernetes_version, its pools' versions that follow
		// it, spec.maintenance.pending_version and spec.hibernated: the same
		// compare-and-set write as the API's.
		g.write(des, "cluster.>")
		g.write(obs, "maintenance.>")
	})
	add(ControlPlaneExternal, "the external control-plane implementation: checks external API servers, prepares them for workers to join, writes their control-plane records", func(g *grants) {
		g.read(des, "cluster.>")
		g.write(obs, "controlplane.>")
		// Sealed; it holds the key: the registered kubeconfigs only, never
		// PKI, admin kubeconfigs or bootstrap data.
		g.read(sec, "externalkubeconfig.>")
	})
	add(ControlPlaneHosted, "runs hosted control planes (etcd and the Kubernetes components as processes) and writes their records", func(g *grants) {
		g.read(des, ">")
		// The control-plane records: its own clusters' (a compare-and-set;
		// the key space is shared with the other implementations).
		g.read(obs, "controlplane.>")
		g.write(obs, "controlplane.>")
		// A hosted cluster's CAs and keys, from the bootstrapper, sealed to
		// a key of its own: never a read of the secrets bucket.
		g.publish(events.Subject(SubjectBootstrapHosted, "*"))
	})
	for _, p := range d.Providers {
		add(ProviderUser(p.Name), "infrastructure provider "+p.Name, func(g *grants) {
			g.write(obs, events.Subject("infra", p.Name, ">"))
			g.write(obs, events.Subject("provider", p.Name))
			for _, k := range p.ObservedReads {
				g.read(obs, k)
			}
			g.publish(events.DriftSubject(p.Name, "*", "*")) // its own drift reports only
			// Its lists' consumers expire on their own (the SDK creates them
			// by name and never deletes one): no consumer of KV_observed,
			// another component's watch included, can be deleted by it.
			g.noConsumerDeletes(obs)
			// Its own machines' bootstrap credentials, to hand them as user data.
			g.publish(events.Subject(SubjectBootstrapCredential, p.Name, "*", "*"))
			if p.Heartbeats {
				g.publish(events.HealthSubject("*", "*", keys.HealthHeartbeat))
			}
		})
	}
	add(Init, "provisions streams and buckets; reads no data", func(g *grants) {
		g.publish("$JS.API.INFO", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST",
			"$JS.API.STREAM.INFO.*", "$JS.API.STREAM.CREATE.*", "$JS.API.STREAM.UPDATE.*")
	})
	return users
}

// User returns the user called name.
func (d Deployment) User(name string) (User, error) {
	for _, u := range d.Users() {
		if u.Name == name {
			return u, nil
		}
	}
	return User{}, fmt.Errorf("natsconfig: no user %q in the deployment", name)
}

func durablesOn(all map[string][]Durable, stream string) []Durable {
	var out []Durable
	for _, ds := range all {
		for _, c := range ds {
			if c.Stream == stream {
				out = append(out, c)
			}
		}
	}
	slices.SortFunc(out, func(a, b Durable) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// grants collects one user's subjects.
type grants struct {
	pub, denied, sub []string
	responses        bool
}

const jsAPI = "$JS.API"

func api(tokens ...string) string { return events.Subject(append([]string{jsAPI}, tokens...)...) }

func kvStream(bucket string) string { return "KV_" + bucket }

// kvSubject is $KV.<bucket>.<keys>; keys is a key or a NATS pattern of keys.
func kvSubject(bucket, keys string) string { return events.Subject("$KV", bucket, keys) }

func (g *grants) publish(subjects ...string) { g.pub = append(g.pub, subjects...) }
func (g *grants) deny(subjects ...string)    { g.denied = append(g.denied, subjects...) }

// read lets the user bind bucket, get keys and watch them: direct gets
// name the key in the subject, and a watcher's ordered consumer names its
// filter, so both are scoped to keys. Stopping a watcher deletes its
// consumer (nats.go waits for the answer), which cannot be scoped: the
// consumer's name is random.
func (g *grants) read(bucket, keys string) {
	s := kvStream(bucket)
	g.pub = append(g.pub,
		api("STREAM", "INFO", s),
		api("DIRECT", "GET", s, kvSubject(bucket, keys)),
		api("CONSUMER", "CREATE", s, "*", kvSubject(bucket, keys)),
		api("CONSUMER", "DELETE", s, "*"),
		events.Subject("$JS", "FC", s, ">"),
	)
	if keys == ">" {
		// A watch of several filters names none in its subject.
		g.pub = append(g.pub, api("CONSUMER", "CREATE", s, "*"))
	}
}

// snapshot lets the user read bucket at one point: a direct-get batch
// over the whole stream, whose subject names no key (store.ReadSnapshots).
func (g *grants) snapshot(bucket string) {
	s := kvStream(bucket)
	g.pub = append(g.pub, api("STREAM", "INFO", s), api("DIRECT", "GET", s))
}

// objects lets the user put, get, list and delete objects of object store
// bucket (stream OBJ_<bucket>): its chunks and metadata subjects, direct
// gets of metadata, the ordered consumers that read chunks and list, and
// the purge of a deleted object's chunks.
func (g *grants) objects(bucket string) {
	s := "OBJ_" + bucket
	g.pub = append(g.pub,
		events.Subject("$O", bucket, ">"),
		api("STREAM", "INFO", s),
		api("STREAM", "PURGE", s),
		api("STREAM", "MSG", "GET", s),
		api("DIRECT", "GET", s, ">"),
		api("CONSUMER", "CREATE", s, ">"),
		api("CONSUMER", "INFO", s, ">"),
		api("CONSUMER", "DELETE", s, ">"),
		events.Subject("$JS", "FC", s, ">"),
	)
}

// noConsumerDeletes takes back the consumer deletes read granted on bucket
// (a consumer's name is one random token: a grant to delete one's own is a
// grant to delete anyone's), for a user whose consumers of it expire by
// themselves.
func (g *grants) noConsumerDeletes(bucket string) {
	del := api("CONSUMER", "DELETE", kvStream(bucket), "*")
	g.pub = slices.DeleteFunc(g.pub, func(s string) bool { return s == del })
}

// write lets the user read keys and put, update and delete them.
func (g *grants) write(bucket, keys string) {
	g.read(bucket, keys)
	g.pub = append(g.pub, kvSubject(bucket, keys))
}

// consume lets the user create (or update) and consume durable c, and
// nothing else on its stream. A single filter is part of the create
// subject, so the durable cannot be re-pointed at other subjects.
func (g *grants) consume(c Durable) {
	create := api("CONSUMER", "CREATE", c.Stream, c.Name)
	if len(c.Filters) == 1 {
		create = events.Subject(create, c.Filters[0])
	}
	g.pub = append(g.pub, create,
		api("CONSUMER", "INFO", c.Stream, c.Name),
		api("CONSUMER", "MSG", "NEXT", c.Stream, c.Name),
		events.Subject("$JS", "ACK", c.Stream, c.Name, ">"),
	)
}

// serve lets the user answer requests on subjects (one reply each).
func (g *grants) serve(subjects ...string) {
	g.sub = append(g.sub, subjects...)
	g.responses = true
}

// ordered lets the user read stream through ordered consumers (random
// names) of filter, and denies every durable of the stream: creating,
// pulling from or deleting them would steal or break another's work.
func (g *grants) ordered(stream, filter string, durables []Durable) {
	g.pub = append(g.pub,
		api("CONSUMER", "CREATE", stream, "*", filter),
		api("CONSUMER", "INFO", stream, "*"),
		api("CONSUMER", "MSG", "NEXT", stream, "*"),
		api("CONSUMER", "DELETE", stream, "*"),
	)
	for _, c := range durables {
		g.denied = append(g.denied,
			api("CONSUMER", "CREATE", stream, c.Name),
			api("CONSUMER", "CREATE", stream, c.Name, ">"),
			api("CONSUMER", "INFO", stream, c.Name),
			api("CONSUMER", "MSG", "NEXT", stream, c.Name),
			api("CONSUMER", "DELETE", stream, c.Name),
		)
	}
}

func (g *grants) permissions(inbox string) Permissions {
	return Permissions{
		PublishAllow:   minimal(g.pub),
		PublishDeny:    minimal(g.denied),
		SubscribeAllow: minimal(append([]string{inbox + ".>"}, g.sub...)),
		Responses:      g.responses,
	}
}

// minimal sorts subjects and drops those another one covers.
func minimal(subjects []string) []string {
	var out []string
	for i, s := range subjects {
		covered := false
		for j, o := range subjects {
			if i != j && covers(o, s) && (!covers(s, o) || j < i) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// covers tells whether every subject that pattern q matches, pattern p
// matches too ('*' one token, '>' one or more at the end).
func covers(p, q string) bool {
	pt, qt := strings.Split(p, "."), strings.Split(q, ".")
	for i, t := range pt {
		if t == ">" {
			return len(qt) > i
		}
		if i >= len(qt) || qt[i] == ">" {
			return false
		}
		if t != "*" && t != qt[i] {
			return false
		}
	}
	return len(pt) == len(qt)
}
