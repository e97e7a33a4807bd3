// Package annotations names the machine annotations that more than one
// component reads or writes: the planner, the machine-manager, the
// health-watcher, the gateway and external holders of lifecycle hooks.
// They follow Cluster API's (machine.cluster.x-k8s.io/exclude-node-draining,
// pre-drain.delete.hook.machine.cluster.x-k8s.io/<name>, …) in capn's
// domain.
package annotations

import (
	"slices"
	"strings"
)

const (
	// ExcludeNodeDraining on a machine skips the drain of its Node when
	// the machine is deleted. The planner sets it on every machine of a
	// cluster being deleted (nothing is left to reschedule onto).
	ExcludeNodeDraining = "capn.dev/exclude-node-draining"

	// DeleteMachine on a machine makes it the first its pool removes when
	// the pool scales down (Cluster API's cluster.x-k8s.io/delete-machine);
	// it does not by itself delete the machine. The autoscaler-provider
	// sets it on the machines the cluster autoscaler names before it
	// lowers the pool's replicas by their number, so the planner deletes
	// those machines and no other; users set it before capn scale.
	DeleteMachine = "capn.dev/delete-machine"

	// PreDrainHookPrefix + <hook name> (value: the holder) holds a
	// deleting machine before its Node is drained, until the holder
	// removes the annotation.
	PreDrainHookPrefix = "pre-drain.delete.hook.machine.capn.dev/"
	// PreTerminateHookPrefix + <hook name> (value: the holder) holds a
	// deleting machine after its Node is drained and deleted, before its
	// infrastructure is deleted.
	PreTerminateHookPrefix = "pre-terminate.delete.hook.machine.capn.dev/"

	// UpgradeAtOnce on a cluster is the Kubernetes version a user's
	// `capn upgrade` (without --respect-window) set: the gateway writes
	// it. The cluster-planner does not confine the rollout to that
	// version to the maintenance windows
	// (spec.maintenance.confineSpecRollouts): an explicit upgrade runs at
	// once. It is inert once the machines run that version.
	UpgradeAtOnce = "capn.dev/upgrade-at-once"
)

// Hooks are the names of the hooks with prefix in annotations, sorted.
func Hooks(annotations map[string]string, prefix string) []string {
	var names []string
	for k := range annotations {
		if name, ok := strings.CutPrefix(k, prefix); ok && name != "" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// IsHook reports whether key is a lifecycle hook annotation (either
// prefix). The planner keeps these when it rewrites a machine's
// annotations: their holders own them.
func IsHook(key string) bool {
	return strings.HasPrefix(key, PreDrainHookPrefix) || strings.HasPrefix(key, PreTerminateHookPrefix)
}

// IsHeld reports whether key is an annotation that its setter holds and
// the planner never takes off when it rewrites a machine's annotations: a
// lifecycle hook, or DeleteMachine (set by the autoscaler-provider or a
// user, between the planner's read and its write).
func IsHeld(key string) bool { return IsHook(key) || key == DeleteMachine }

// Condition types that cross services during a machine's deletion.
const (
	// EtcdMemberRemoved is reported by a leaving control-plane machine's
	// own agent (capn-node) on its health subject once its etcd member
	// is removed (True), or why it is not yet (False, e.g. reason
	// QuorumAtRisk); the health-watcher merges it into the machine's
	// NodeHealth and the machine-manager waits for it before deleting
	// the infrastructure.
	CondEtcdMemberRemoved = "EtcdMemberRemoved"
)

// The condition a machine's agent (capn-node) reports about its bootstrap
// commands — the files written, the preCommands, the join and the
// postCommands — on its health subject; the health-watcher merges it into
// the machine's NodeHealth, and the machine-manager shows it on the
// machine and fails the machine when it is False.
const (
	CondBootstrapCommands = "BootstrapCommands"

	// Its reasons. Running (Unknown): a command runs (the message names
	// it). Succeeded (True): every command ran; the message holds the
	// last lines of the last one's output. CommandFailed and
	// CommandTimedOut (False): the message names the command, its exit
	// code or timeout and the tail of its stderr. CommandsNotRun (False):
	// the commands could not be run at all (no shell, a bootstrap format
	// the agent cannot run).
	ReasonCommandsRunning   = "Running"
	ReasonCommandsSucceeded = "Succeeded"
	ReasonCommandFailed     = "CommandFailed"
	ReasonCommandTimedOut   = "CommandTimedOut"
	ReasonCommandsNotRun    = "CommandsNotRun"
)

// ReasonBootstrapSecretNotFound is the reason of a machine's
// BootstrapReady condition (False) while its bootstrap data waits for a
// bootstrap secret, or a key of one, that a file's secretRef names (the
// message names the file, the secret and the key). The bootstrapper says
// it (event bootstrap.waiting); the machine-manager waits without a
// timeout and asks again until the secret exists.
const ReasonBootstrapSecretNotFound = "BootstrapSecretNotFound"
