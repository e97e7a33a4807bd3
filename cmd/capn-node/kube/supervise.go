package kube

import "github.com/capn-dev/capn/internal/supervise"

// The supervisor is internal/supervise, shared with the hosted control
// planes (services/controlplane-hosted); these names keep the runtime's.
type (
	// Process is one supervised child.
	Process = supervise.Process
	// Supervisor runs and restarts the children.
	Supervisor = supervise.Supervisor
	// Status of one child.
	Status = supervise.Status
)

// ErrStopped is Start after Stop.
var ErrStopped = supervise.ErrStopped
