// Package natsconfig renders capn's NATS deployment from a declarative
// description (a [Deployment]): the nats-server configuration of every
// node of a JetStream cluster, one NATS user per capn component with the
// least it needs, their nkey seeds, TLS certificates from a local CA, and
// the environment each component runs with. Nobody edits a permission list
// by hand: the lists are derived here from capn's subjects, streams,
// buckets and durable consumers, and re-rendering keeps existing keys.
//
// # The permission model
//
// All users live in one account ([Deployment.Account], "CAPN") with
// JetStream enabled. A user may subscribe only to its own reply subjects,
// _INBOX_<user>.> (its connection must use that inbox prefix, so no user
// can read another's replies), and publish only to:
//
//   - the JetStream API calls of what it does, each scoped by stream,
//     durable consumer or KV key prefix: $JS.API.STREAM.INFO.KV_<bucket>,
//     $JS.API.DIRECT.GET.KV_<bucket>.$KV.<bucket>.<keys> (reads),
//     $JS.API.CONSUMER.CREATE.KV_<bucket>.*.$KV.<bucket>.<keys> (watches:
//     ordered consumers, with their flow control $JS.FC.KV_<bucket>.> and
//     their deletion), $JS.API.CONSUMER.CREATE.<stream>.<durable>[.<filter>],
//     $JS.API.CONSUMER.MSG.NEXT.<stream>.<durable> and
//     $JS.ACK.<stream>.<durable>.> (its durable consumers only);
//   - $KV.<bucket>.<keys> for the key spaces it owns (puts, CAS updates and
//     deletes are all publishes there);
//   - the event, command and health subjects it produces.
//
// What each component may do, in short (see [Deployment.Users] for the
// exact lists):
//
//	cluster-planner  reads desired, observed; writes desired cluster.> and machine.>,
//	                 observed cluster.>; sends capn.evt.cluster.>, capn.provider.*.cluster.>,
//	                 capn.cmd.bootstrap.cleanup.>
//	machine-manager  reads desired, observed; writes observed machine.>; sends
//	                 capn.evt.machine.> (not unhealthy/remediation), capn.cmd.bootstrap.generate.>,
//	                 capn.provider.*.machine.{create,delete}.>; consumes its two durables
//	bootstrapper     reads desired, observed, secrets; writes secrets (all of it) and
//	                 observed secrets.>; consumes capn.cmd.bootstrap.>; answers
//	                 capn.bootstrap.fetch.*.* (queue group, replies to requesters)
//	health-watcher   reads desired, observed and only kubeconfig.> of secrets; writes observed
//	                 node.>; consumes health and drift
//	remediator       reads desired, observed; writes desired machine.>, observed remediation.>;
//	                 sends machine.remediation events and provider reboots
//	gateway          reads desired, observed and only kubeconfig.> of secrets; writes desired
//	                 cluster.>; publishes capn.ingest.> and capn.health.>; timelines through
//	                 ordered consumers on CAPN_EVENTS, never through another's durable
//	provider-<p>     consumes capn.provider.<p>.> through durable provider-<p> only; reads and
//	                 writes observed infra.<p>.> and provider.<p> only; sends drift reports
//	                 (and, for a simulated provider, node heartbeats); never secrets
//	node             (node agents) publishes capn.health.*.*.*; asks capn.bootstrap.fetch.*.*
//	capn-init        creates and updates streams and buckets; reads no data
//
// No user may create streams except capn-init: services run with
// --skip-provision and the init job provisions the topology (R3) once.
//
// Known limits of subject-based permissions, accepted here: a user that
// watches a bucket may delete the (ephemeral, self-healing) watchers of
// other users of that bucket, because consumer names are random and
// nats.go deletes a watcher's consumer when it stops; and node agents
// share one user, so one machine could fetch another's bootstrap data if
// it knew its checksum (per-machine users need decentralized JWT auth).
package natsconfig
