// Package sdk is the provider SDK: a provider implements the small
// [Provider] interface (plus, optionally, [PowerController], [Runner],
// [Adopter] and [CommandHandler]) and [NewService] does all of the NATS
// work, as a daemon.Service named provider-<name>:
//
//   - Commands. One durable consumer, provider-<name>, on
//     events.StreamProviders filtered to capn.provider.<name>.>. The stream
//     is a work queue, so replicas of a provider share the durable and each
//     command is handled by one of them. Commands are dispatched by event
//     type (TypeCreateMachine, ...); a command whose subject, type and data
//     disagree, or that names an invalid cluster or machine, is terminated.
//     Commands of one machine (or one cluster) never run concurrently.
//   - Idempotency. A create for a machine observed KV already records as
//     live is answered from Describe, without calling CreateMachine again;
//     the Provider contract (create idempotent by (cluster, machine),
//     delete of a missing machine succeeds) covers the rest, so a
//     redelivered or duplicated command never creates twice.
//   - Observed state. What the provider returns is written with
//     compare-and-set (store.Bucket.Mutate) to observed KV:
//     infra.<name>.<cluster>.<machine> (InfraMachine) and
//     infra.<name>.<cluster>._ (InfraCluster). A successful delete deletes
//     the key: that deletion is how the core learns the infrastructure is
//     gone. A permanent provider error ([Permanent], or a transient one on
//     the command's last delivery) is recorded as InfraMachine state Failed
//     with the error as message, which the core surfaces as a condition;
//     a transient one is retried with backoff. Records are ordered by their
//     updated time: an older write never replaces a newer one.
//   - Asynchronous state. A provider whose work takes time returns state
//     Creating and later calls [Reporter.Report] (a [Runner] gets the
//     Reporter in its [Env]).
//   - Drift. Every Options.ReconcileEvery (30s) the SDK compares List with
//     the provider's observed records, and confirms each difference under
//     the machine's lock with Describe: a live record whose machine is gone
//     becomes a DriftReport{Gone} on capn.evt.drift.<provider>.<cluster>.<machine>
//     (type events.TypeDriftReport) and state Deleted; a running one found
//     stopped, DriftReport{Stopped}; another provider id, DriftReport{Changed};
//     a machine that exists without any record, DriftReport{Orphan} — only
//     reported, never deleted. [Reporter.Recheck] checks one machine now.
//   - Announcement. provider.<name> in observed KV holds a
//     ProviderAnnouncement (name, version, capabilities, time, instance),
//     refreshed every Options.AnnounceEvery (10s) and deleted on a clean
//     shutdown. The core treats an announcement whose time is older than
//     [AnnouncementStale] (30s) as a provider that is not running ([Alive]);
//     a crashed provider leaves such a stale one behind.
//
// The SDK imports only schemas, events (with store and reconcile) and the
// service runtime; a provider needs nothing else from capn.
package sdk
