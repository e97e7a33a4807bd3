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
//	                 capn.bootstrap.fetch.*.*, capn.bootstrap.credential.*.*.* and, with
//	                 node agents, the auth callout (queue group, replies to requesters)
//	health-watcher   reads desired, observed and only kubeconfig.> and externalkubeconfig.>
//	                 of secrets (secrets/clusterkubeconfig); writes observed
//	                 node.>; consumes health (heartbeats apart) and drift
//	remediator       reads desired, observed; writes desired machine.>, observed remediation.>;
//	                 sends machine.remediation events and provider reboots
//	addon-manager    reads desired, observed and only kubeconfig.>, externalkubeconfig.> and
//	                 addonsecret.> of secrets;
//	                 writes observed addon.>; sends capn.evt.addon.>
//	fleet-manager    reads desired, observed; writes desired cluster.> (a wave's change) and
//	                 observed rollout.>; sends capn.evt.rollout.>
//	autoscaler-provider reads desired, observed; writes desired cluster.> and machine.>
//	                 (an autoscaled pool's replicas, the delete-machine mark) and
//	                 observed autoscaler.>; sends capn.evt.autoscaler.>
//	maintenance      reads desired and only its own maintenance.> of observed; writes desired
//	                 cluster.> (auto-patch, hibernation schedules) and observed maintenance.>;
//	                 sends nothing
//	controlplane-external reads desired cluster.>, observed controlplane.> and only
//	                 externalkubeconfig.> of secrets; writes observed controlplane.>;
//	                 consumes capn.controlplane.external.> through its durable
//	gateway          reads desired, observed and only kubeconfig.> of secrets; writes desired
//	                 cluster.>, machine.>, addonset.>, clusterclass.>, classrev.>,
//	                 rollout.> and kubernetesversions.>, and secrets addonsecret.>,
//	                 bootstrapsecret.> and externalkubeconfig.> (it reads back only
//	                 kubeconfig.> and externalkubeconfig.>; nothing else of secrets); publishes capn.ingest.> and capn.health.>; timelines
//	                 through ordered consumers on CAPN_EVENTS, never through another's durable
//	provider-<p>     consumes capn.provider.<p>.> through durable provider-<p> only; reads and
//	                 writes observed infra.<p>.> and provider.<p> only; sends drift reports
//	                 (and, for a simulated provider, node heartbeats); never secrets
//	capn-init        creates and updates streams and buckets; reads no data
//
// No user may create streams except capn-init: services run with
// --skip-provision and the init job provisions the topology (R3) once.
//
// # Machines: one NATS user each, through the auth callout
//
// Node agents (capn-node, capn-npd-bridge; [Deployment.NodeAgents]) have
// no static user. Every login that is not one of the users above goes to
// the bootstrapper through nats-server's auth callout: each node's
// configuration has
//
//	authorization { auth_callout { issuer: <account key>, account: <Account>,
//	                               auth_users: [<every user's public nkey>] } }
//
// so a static user is never sent to the callout (a user missing from
// auth_users would be, and would wait for it even with the right nkey),
// and anyone else is asked of the bootstrapper (it may serve
// $SYS.REQ.USER.AUTH). The bootstrapper accepts only a machine logging in
// as machine.<cluster>.<machine> with its own bootstrap credential or
// machine secret, and places it in the account with that machine's
// subjects only: publish capn.health.<c>.<m>.> (and, before its join, its
// own capn.bootstrap.fetch.<c>.<m>), subscribe _INBOX_machine.<c>.<m>.>
// (services/bootstrapper/callout.go). The callout's answers are signed
// with an account nkey whose seed Render keeps in the bootstrapper's
// directory only (users/bootstrapper/auth-callout-issuer.nk, 0600; its env
// file names it, CAPN_AUTH_CALLOUT_ISSUER_SEED_FILE, and the account,
// CAPN_AUTH_CALLOUT_ACCOUNT).
//
// Machines get the transport only, in machines/ of the render: with TLS a
// client certificate shared by every machine (it opens the connection,
// not a login), the CA, and an env file with CAPN_NATS_URL and the TLS
// files — no nkey, no inbox prefix. capn-node logs in as its machine by
// default; capn-npd-bridge with --nats-user machine.<c>.<m>
// --nats-password-file <capn-node data dir>/capn-node/machine-secret
// --nats-inbox-prefix _INBOX_machine.<c>.<m>.
//
// A known limit of subject-based permissions, accepted here: a user that
// watches a bucket may delete the (ephemeral, self-healing) watchers of
// other users of that bucket, because consumer names are random and
// nats.go deletes a watcher's consumer when it stops.
package natsconfig
