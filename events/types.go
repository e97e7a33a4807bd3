package events

// CloudEvents types capn publishes and understands. Types are reverse-DNS
// names under dev.capn; the data's protobuf message is named by dataschema.
const (
	// Commands (CAPN_COMMANDS).
	TypeGenerateBootstrap    = "dev.capn.bootstrap.generate"    // GenerateBootstrap
	TypeDeleteClusterSecrets = "dev.capn.bootstrap.cleanup"     // DeleteClusterSecrets
	TypeBootstrapReady       = "dev.capn.bootstrap.ready"       // BootstrapReady
	TypeBootstrapFailed      = "dev.capn.bootstrap.failed"      // BootstrapFailed
	TypeBootstrapWaiting     = "dev.capn.bootstrap.waiting"     // BootstrapWaiting
	TypeMachineEvent         = "dev.capn.machine"               // MachineEvent, suffixed .<what>
	TypeClusterEvent         = "dev.capn.cluster"               // ClusterEvent, suffixed .<what>
	TypeAddonEvent           = "dev.capn.addon"                 // AddonEvent, suffixed .<what>
	TypeMachineUnhealthy     = "dev.capn.machine.unhealthy"     // MachineUnhealthy
	TypeNodeHeartbeat        = "dev.capn.health.heartbeat"      // NodeHeartbeat
	TypeNodeConditions       = "dev.capn.health.conditions"     // NodeConditions
	TypeProblemEvent         = "dev.capn.health.problem"        // ProblemEvent
	TypeDriftReport          = "dev.capn.provider.drift"        // DriftReport
	TypeProviderCommand      = "dev.capn.provider.command"      // provider contract messages, suffixed .<kind>.<verb>
	TypeProviderAnnouncement = "dev.capn.provider.announcement" // ProviderAnnouncement
	// TypeControlPlaneCommand is a ControlPlaneCommand to a control-plane
	// implementation (CAPN_CONTROLPLANES), suffixed .<verb> (ensure, delete).
	TypeControlPlaneCommand = "dev.capn.controlplane.command"
)
