// Package conformance is the test suite every capn infrastructure provider
// passes: one exported Run, told through Features what the provider
// supports (as watermill's pubsub tests are). It drives the provider only
// through NATS — commands on capn.provider.<name>.>, its records in
// observed KV, drift reports, heartbeats — against a real embedded
// nats-server (providers/sdk/sdktest), so it checks the contract a
// provider written in any language must keep:
//
//   - it announces itself and the capabilities it claims;
//   - create is idempotent (one machine, whatever the repeats);
//   - delete of a missing machine succeeds, delete leaves nothing behind;
//   - a machine removed behind capn's back is reported (DriftReport Gone)
//     and recorded Deleted;
//   - stop/start and reboot keep the machine's identity (provider id,
//     addresses) and disk;
//   - the provider survives its own restart without losing or duplicating
//     machines, and notices what changed while it was down;
//   - its cluster infrastructure (endpoint) is idempotent and deletes
//     cleanly;
//   - a machine and a cluster's infrastructure it is told to orphan are
//     left as they are (only its records go), and adopting their records
//     takes them back with the same identity (a restore, capn move);
//   - a whole cluster on the provider goes Ready and deletes cleanly
//     through capn's core services (a capn release: CorePrograms);
//   - on machines that run their bootstrap commands (Features.Commands):
//     files, preCommands and postCommands run, and a failing command
//     fails its machine as BootstrapCommandFailed;
//   - for a provider that runs real Kubernetes (Features.Kubernetes): the
//     seed's conformance check — a kube-local cluster of 3 control planes
//     and 2 workers applied with the capn CLI, kubectl with the kubeconfig
//     capn hands out (5 Nodes Ready, a Deployment Running), the control
//     plane scaled 3 → 5 → 3 with etcd following, a worker whose kubelet
//     stops (Kubernetes.StopKubelet, optional; its Node NotReady) repaired
//     by the remediator — rebooted or replaced — with the cluster Ready
//     again (kubernetes_kubelet.go), a worker killed and replaced, and a
//     delete that leaves nothing (kubernetes.go);
//   - for a provider whose machines are real kubeadm nodes
//     (Kubernetes.Kubeadm; RunKubernetes runs this check alone, since the
//     others give machines a fixture's bootstrap data): the same check on
//     a kubeadm cluster of 1 control plane and 2 workers with containers
//     really running — kubeadm's etcd asked with etcdctl, a Deployment of
//     the project's web server whose ClusterIP Service answers a pod on
//     one worker by ClusterIP and by DNS name from a pod on the other,
//     the workers pool scaled 2 → 3 → 2 with the removed worker drained
//     first (not the control plane: a kubeadm control plane cannot be
//     deleted yet), the kubelet and out-of-band repairs, and a delete
//     that leaves nothing (kubernetes_kubeadm.go).
package conformance

import (
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/services/daemon"
)

// Provider is the provider under test.
type Provider struct {
	// Name is the provider's name: its subjects and keys.
	Name string
	// New builds the provider's service for one test over env's state
	// (env.Dir, env.NATSURL, env.Deployment) with env.SDK as its SDK
	// options. Every call within a test is a restart: a new instance over
	// the same state.
	New func(t *testing.T, env *Env) daemon.Service
}

// Features tell the suite what the provider supports and how to act on
// its infrastructure behind capn's back.
type Features struct {
	// StopStart and Reboot: the provider announces these capabilities and
	// implements them (sdk.PowerController).
	StopStart, Reboot bool
	// RestartSafe: machines outlive a restart of the provider's service.
	RestartSafe bool
	// NodeAgent: machines run capn-node, which fetches its bootstrap data
	// over capn.bootstrap.fetch (the suite answers with a fixture and
	// publishes the cluster CA pin) and then heartbeats.
	NodeAgent bool
	// Heartbeats: a running machine's node publishes NodeHeartbeat with
	// the machine's version.
	Heartbeats bool
	// Commands: a machine's node runs its bootstrap commands with
	// /bin/sh (capn-node on a host or image with a shell). With Capn and
	// Disk, a cluster checks files, preCommands and postCommands, and a
	// failing command.
	Commands bool
	// EndpointListens: the cluster's control-plane endpoint accepts TCP
	// connections.
	EndpointListens bool
	// OutOfBandDelete removes a running machine behind capn's back (kill
	// -9 of its process, docker rm -f of its container, the sim's vanish
	// hook). nil skips the drift checks.
	OutOfBandDelete func(t *testing.T, env *Env, cluster, machine string)
	// Disk reads and writes files on a machine's disk; nil skips the disk
	// checks of stop/start and reboot.
	Disk *Disk
	// Leftovers lists what the provider still holds on the host for a
	// cluster (processes, containers, networks, directories); after a
	// delete it must be empty. nil skips those checks.
	Leftovers func(t *testing.T, env *Env, cluster string) []string
	// Capn runs capn's core services against the NATS server at natsURL
	// until the test ends (CorePrograms builds and runs the programs of
	// this module). nil skips the whole-cluster test.
	Capn func(t *testing.T, natsURL string)
	// Kubernetes runs the Kubernetes conformance check (a provider that
	// announces real-kubernetes when New is given Env.KubeBin). nil skips
	// it. It needs OutOfBandDelete, Leftovers and Disk.
	Kubernetes *Kubernetes
	// Timeout bounds each wait for the provider (default 30s).
	Timeout time.Duration
	// Parallel runs the checks in parallel (t.Parallel): for a provider
	// whose checks mostly wait on its infrastructure (docker). Each check
	// has its own server, state dir and names either way.
	Parallel bool
}

// Disk is file access to a machine's disk (its data dir, its container's
// filesystem).
type Disk struct {
	Write func(t *testing.T, env *Env, cluster, machine, path string, data []byte)
	// Read returns ok false when the file does not exist.
	Read func(t *testing.T, env *Env, cluster, machine, path string) (data []byte, ok bool)
}

// SDKOptions are the SDK options the suite runs a provider with: a drift
// reconcile every 300ms and an announcement every 200ms, so that the
// suite's waits stay short.
func SDKOptions() sdk.Options {
	return sdk.Options{ReconcileEvery: 300 * time.Millisecond, AnnounceEvery: 200 * time.Millisecond, Instance: "conformance"}
}

// Run runs the suite against p. Each check is a subtest with a fresh
// server, state dir and cluster name.
func Run(t *testing.T, p Provider, f Features) {
	if p.Name == "" || p.New == nil {
		t.Fatal("conformance: Provider needs Name and New")
	}
	if f.Timeout == 0 {
		f.Timeout = 30 * time.Second
	}
	s := &suite{p: p, f: f}
	checks := []struct {
		name string
		run  func(*testing.T, *Env)
		skip string
	}{
		{"Announces", s.announces, ""},
		{"CreateIsIdempotent", s.createIsIdempotent, ""},
		{"DeleteOfAMissingMachineSucceeds", s.deleteMissing, ""},
		{"DeleteLeavesNothing", s.deleteLeavesNothing, ""},
		{"OutOfBandDeleteIsDrift", s.outOfBandDelete, when(f.OutOfBandDelete == nil, "no OutOfBandDelete")},
		{"StopStartKeepsIdentityAndDisk", s.stopStart, when(!f.StopStart, "no StopStart")},
		{"RebootKeepsIdentityAndDisk", s.reboot, when(!f.Reboot, "no Reboot")},
		{"SurvivesItsRestart", s.restart, when(!f.RestartSafe, "not RestartSafe")},
		{"ClusterInfrastructure", s.clusterInfra, ""},
		{"HandsOverWithoutTouching", s.handover, ""},
		{"ClusterThroughCapn", s.throughCapn, when(f.Capn == nil, "no Capn: give Features.Capn (e.g. CorePrograms(t))")},
		{"BootstrapCommands", s.bootstrapCommands, when(!f.Commands || f.Capn == nil || f.Disk == nil, "needs Commands, Capn and Disk")},
		{"Kubernetes", s.kubernetes, when(f.Kubernetes == nil, "no Kubernetes: for a provider whose machines run real Kubernetes (real-kubernetes)")},
		{"KubernetesVersions", s.kubernetesVersions, kubeLocalOnly(f)},
		{"KubernetesDay2", s.kubernetesDay2, kubeLocalOnly(f)},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if c.skip != "" {
				t.Skip(c.skip)
			}
			if f.Parallel {
				t.Parallel()
			}
			c.run(t, s.newEnv(t))
		})
	}
}

// kubeLocalOnly is why a check of kube-local clusters is skipped, if it is.
func kubeLocalOnly(f Features) string {
	switch {
	case f.Kubernetes == nil:
		return "no Kubernetes: for a provider whose machines run real Kubernetes (real-kubernetes)"
	case f.Kubernetes.Kubeadm != nil:
		return "kube-local clusters only: Kubernetes.Kubeadm is set (the provider's machines are kubeadm nodes)"
	}
	return ""
}

// RunKubernetes runs the suite's Kubernetes check alone, in t: for a
// provider mode whose every machine is a kubeadm node
// (f.Kubernetes.Kubeadm), which the suite's other checks cannot use —
// they give machines a fixture's bootstrap data.
func RunKubernetes(t *testing.T, p Provider, f Features) {
	if p.Name == "" || p.New == nil {
		t.Fatal("conformance: Provider needs Name and New")
	}
	if f.Kubernetes == nil {
		t.Fatal("conformance: RunKubernetes needs Features.Kubernetes")
	}
	if f.Timeout == 0 {
		f.Timeout = 30 * time.Second
	}
	s := &suite{p: p, f: f}
	s.kubernetes(t, s.newEnv(t))
}

func when(cond bool, reason string) string {
	if cond {
		return reason
	}
	return ""
}

type suite struct {
	p Provider
	f Features
}

// uniqueName is a name unique to this test run: docker objects and host
// processes outlive a test's temporary directories.
func uniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
