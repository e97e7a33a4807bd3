package api

// Lifecycle hook phases: when a deleting machine waits for its hooks.
// They match Cluster API's pre-drain and pre-terminate delete hooks.
const (
	// HookPreDrain holds a deleting machine before its Node is drained.
	HookPreDrain = "pre-drain"
	// HookPreTerminate holds a deleting machine after its Node is
	// drained and deleted, before its infrastructure is deleted.
	HookPreTerminate = "pre-terminate"
)

// HookPhases lists the phases a hook may name, in the order a deletion
// reaches them.
var HookPhases = []string{HookPreDrain, HookPreTerminate}

// Query parameters of DELETE /v1/clusters/{name}/machines/{machine}/hooks/{phase}/{hook}.
const (
	// ParamHolder is who releases the hook (default: the token's name).
	ParamHolder = "holder"
	// ParamForce=true releases a hook whoever holds it.
	ParamForce = "force"
)

// HookRequest is the body of POST
// /v1/clusters/{name}/machines/{machine}/hooks: hold the machine's
// deletion at Phase until Holder releases hook Name.
type HookRequest struct {
	// Phase is pre-drain or pre-terminate.
	Phase string `json:"phase"`
	// Name is the hook's name, unique per machine and phase: at most 63
	// characters, letters, digits, '-', '_' and '.', starting and ending
	// with a letter or digit (a Kubernetes annotation name).
	Name string `json:"name"`
	// Holder is who holds the hook (the annotation's value); empty: the
	// token's name.
	Holder string `json:"holder,omitempty"`
}

// Hook is one lifecycle hook on a machine.
type Hook struct {
	Machine string `json:"machine"`
	Phase   string `json:"phase"`
	Name    string `json:"name"`
	Holder  string `json:"holder"`
	// Annotation is the machine annotation that is the hook:
	// pre-drain.delete.hook.machine.capn.dev/<name> or
	// pre-terminate.delete.hook.machine.capn.dev/<name>.
	Annotation string `json:"annotation"`
	// Holding is true while the machine is being deleted and waits for
	// the hooks of this phase (its condition PreDrainDeleteHookSucceeded
	// or PreTerminateDeleteHookSucceeded is False, WaitingExternalHook).
	Holding bool `json:"holding,omitempty"`
	// MachinePhase is the machine's observed phase (Running, Deleting, …).
	MachinePhase string `json:"machinePhase,omitempty"`
}

// HookList is the body of GET /v1/clusters/{name}/hooks, sorted by
// machine, phase and name.
type HookList struct {
	Items []Hook `json:"items"`
}
