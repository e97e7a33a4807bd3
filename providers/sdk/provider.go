package sdk

import (
	"context"
	"errors"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Provider is what a provider implements; the SDK does all of the NATS
// work around it (see the package documentation).
//
// Methods are called concurrently from several goroutines, but never two
// at once for the same (cluster, machine): the SDK serialises the commands
// and drift checks of one machine. ctx carries the logger (zerolog.Ctx,
// with provider, cluster and machine) and is cancelled when the service
// stops or the command's delivery is abandoned; a method should then
// return promptly with an error, and the command is redelivered.
//
// Errors: ErrNotFound where documented; an error marked with [Permanent]
// can never succeed (the SDK records it, e.g. as state Failed, and does not
// retry); any other error is transient and the command is retried with
// backoff.
type Provider interface {
	// Name is the provider's name, one lower-case token (e.g. "sim"): its
	// subjects are capn.provider.<name>.> and its keys infra.<name>.*.
	Name() string
	// Capabilities are announced to the core, e.g. CapabilityStopStart and
	// CapabilityReboot (which need PowerController).
	Capabilities() []string
	// EnsureCluster creates or finds the cluster's infrastructure (network,
	// control-plane endpoint). It is idempotent: a second call returns what
	// the first made.
	EnsureCluster(ctx context.Context, cluster string, params map[string]string) (*capnv1.InfraCluster, error)
	// DeleteCluster removes the cluster's infrastructure; deleting what does
	// not exist succeeds.
	DeleteCluster(ctx context.Context, cluster string) error
	// CreateMachine creates a machine, idempotently by (cluster, machine):
	// if it exists it returns it as it is. Creation that takes time returns
	// state Creating and reports the outcome later through the Reporter
	// (see Runner); it must not block until the machine has booted.
	CreateMachine(ctx context.Context, req *capnv1.CreateMachine) (*capnv1.InfraMachine, error)
	// DeleteMachine removes a machine; deleting a missing machine succeeds.
	// It returns nil only when the machine is gone (or certainly going):
	// List must not return it afterwards.
	DeleteMachine(ctx context.Context, cluster, machine string) error
	// Describe returns what really exists for a machine, or an error
	// matching ErrNotFound.
	Describe(ctx context.Context, cluster, machine string) (*capnv1.InfraMachine, error)
	// List returns every machine that really exists for this provider, in
	// any state (Creating included): the truth drift detection and
	// adoption compare against.
	List(ctx context.Context) ([]*capnv1.InfraMachine, error)
}

// NodeAgentProvider is implemented by a provider whose machines run a node
// agent (capn-node) that fetches its own bootstrap data. Before each
// CreateMachine of such a provider the SDK asks the bootstrapper for the
// machine's bootstrap credential and sets req.BootstrapCredential; the
// provider hands it to the machine the way it hands user data (a file of
// the machine's, its environment; never its command line, which every
// local user can read) and keeps it nowhere a user can see it.
type NodeAgentProvider interface {
	Provider
	// RunsNodeAgents marks the provider; it is never called.
	RunsNodeAgents()
}

// PowerController is implemented by a provider with CapabilityStopStart
// and/or CapabilityReboot. Each call is idempotent (stopping a stopped
// machine succeeds), keeps the machine's identity (provider id, addresses,
// disk), and returns ErrNotFound for a machine that does not exist. The
// SDK writes what Describe says afterwards.
type PowerController interface {
	Stop(ctx context.Context, cluster, machine string) error
	Start(ctx context.Context, cluster, machine string) error
	Reboot(ctx context.Context, cluster, machine string) error
}

// Reporter lets a provider report state changes that happen after a command
// returned (a machine finished booting, stopped by itself, vanished). It is
// safe for concurrent use.
type Reporter interface {
	// Report writes m as the machine's observed state (compare-and-set).
	// m.Cluster and m.Machine name the machine; m.Provider is set by the
	// SDK. m.Updated orders reports: a report older than what observed KV
	// holds, or older than a delete of the machine this process handled, is
	// dropped, so a late report never resurrects or rewinds a machine. An
	// unset Updated means now. Report must not be called while the
	// provider holds a lock that its own methods take.
	Report(ctx context.Context, m *capnv1.InfraMachine) error
	// Recheck asks for a drift check of one machine soon (asynchronously,
	// coalesced): e.g. after it vanished, so that the DriftReport and the
	// Deleted state do not wait for the next periodic reconcile.
	Recheck(cluster, machine string)
}

// Env is what the SDK gives a provider's background work.
type Env struct {
	// Reporter reports asynchronous state changes.
	Reporter Reporter
	// JS is JetStream on the service's own connection.
	JS jetstream.JetStream
	// Publisher publishes events with source capn/provider-<name>.
	Publisher *events.Publisher
	// Log carries provider=<name>.
	Log zerolog.Logger
}

// Runner is implemented by a provider with background work (boot timers,
// simulated nodes, an event stream of its infrastructure). The SDK calls
// Run once in a goroutine of its own, after Adopt and before the first
// command; ctx is cancelled at shutdown and Run must then return promptly.
// An error other than ctx's stops the service.
type Runner interface {
	Run(ctx context.Context, env Env) error
}

// Adopter is implemented by a provider whose reality cannot be listed
// after a restart because it kept it only in memory and in its observed
// records (the sim provider). The SDK calls Adopt once at start, before
// Run and before any command, with every infra record of this provider in
// observed KV, whatever its state; the provider takes back what it had.
// An error stops the service. It is called again, with one record, for
// each adopt command (a restore or a move hands over a machine or a
// cluster's infrastructure, handover.go): a machine it already has is
// kept as it is.
type Adopter interface {
	Adopt(ctx context.Context, machines []*capnv1.InfraMachine, clusters []*capnv1.InfraCluster) error
}

// CommandHandler is implemented by a provider that accepts commands beyond
// the contract, such as the sim provider's vanish test hook. Commands maps
// a full event type (events.TypeProviderCommand + ".<kind>.<verb>") to its
// handler; it is read once at start. The SDK serialises the handler with
// the machine's other commands (by the subject's cluster and object) and
// acks, retries or terminates by its result as for any events.Handler.
type CommandHandler interface {
	Commands() map[string]events.Handler
}

// KubernetesVersioner is implemented by a provider whose machines run
// Kubernetes binaries of their own (CapabilityRealKubernetes): the
// versions it has, oldest first, announced in
// ProviderAnnouncement.kubernetes_versions and read at every
// announcement (binaries built after the start count). A machine of
// another version is refused at create (InfraMachine state Failed).
type KubernetesVersioner interface {
	KubernetesVersions() []string
}

// OperatingSystemer is implemented by a provider whose machines run other
// operating systems than linux: the ones it runs, announced in
// ProviderAnnouncement.operating_systems. A provider without it runs
// linux only. A machine of another os is refused at create (InfraMachine
// state Failed); the cluster-planner holds such a pool before.
type OperatingSystemer interface {
	OperatingSystems() []string
}

// OSLinux and OSWindows are the operating systems of CreateMachine.os
// (empty: linux).
const (
	OSLinux   = "linux"
	OSWindows = "windows"
)

// RunsOS reports whether p runs machines of os ("" is linux).
func RunsOS(p Provider, os string) bool {
	if os == "" {
		os = OSLinux
	}
	systems := []string{OSLinux}
	if o, ok := p.(OperatingSystemer); ok {
		systems = o.OperatingSystems()
	}
	return slices.Contains(systems, os)
}

// Capabilities a provider may announce.
const (
	CapabilityStopStart = "stop-start"
	CapabilityReboot    = "reboot"
	// CapabilityRealKubernetes: the provider's machines can run real
	// Kubernetes components (an API server behind the cluster's endpoint,
	// Nodes registered), not only capn's node agent. Tests that need a
	// real API server run only against providers that announce it; the
	// process provider does while its --kube-bin holds a kube-apiserver.
	CapabilityRealKubernetes = "real-kubernetes"
	CapabilityFailureDomains = "failure-domains"
	// CapabilityNodeAgent: the provider's machines run a node agent that
	// fetches its bootstrap data with a bootstrap credential (a
	// NodeAgentProvider; the SDK announces it). The bootstrapper mints
	// the credential with the data only for such providers; a provider
	// without it gets one minted at its first credential request.
	CapabilityNodeAgent = "node-agent"
)

// InfraMachine states: the schema's InfraState, under the names providers
// know. Set them with InfraMachine.SetStateValue, read them with
// GetStateValue.
const (
	StateCreating = capnv1.InfraCreating
	StateRunning  = capnv1.InfraRunning
	StateStopped  = capnv1.InfraStopped
	StateDeleting = capnv1.InfraDeleting
	StateDeleted  = capnv1.InfraDeleted
	StateFailed   = capnv1.InfraFailed
)

// DriftReport kinds.
const (
	DriftGone    = "Gone"
	DriftStopped = "Stopped"
	DriftChanged = "Changed"
	DriftOrphan  = "Orphan"
)

// Power actions of MachinePower.
const (
	ActionStop   = "stop"
	ActionStart  = "start"
	ActionReboot = "reboot"
)

var (
	// ErrNotFound is returned by Describe (and power calls) for a machine
	// that does not exist.
	ErrNotFound = errors.New("sdk: machine not found")
	// ErrUnsupported is a command the provider cannot do (e.g. stop
	// without PowerController); it is permanent.
	ErrUnsupported = errors.New("sdk: not supported by this provider")
)

// Permanent marks err as one that retrying cannot fix: the SDK records it
// (InfraMachine state Failed for a create) and does not retry.
func Permanent(err error) error { return events.Permanent(err) }

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool { return events.IsPermanent(err) }

// live reports whether a machine in state exists or is coming into being.
func live(state capnv1.InfraState) bool {
	return state == StateCreating || state == StateRunning || state == StateStopped
}
