package plan

import (
	"fmt"
	"strings"
	"time"

	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/maintenance"
	"github.com/capn-dev/capn/schemas/manifest"
)

// ChangeSpecRollout is the MaintenanceWait.change of a machine rollout
// that spec.maintenance.confineSpecRollouts holds until a window opens
// (the maintenance service's are AutoPatch and Upgrade).
const ChangeSpecRollout = "SpecRollout"

// ReasonWaitingForMaintenanceWindow: a pool (ControlPlaneReady,
// WorkersReady) or the cluster (Ready) has outdated machines whose
// replacement waits for the maintenance window
// (spec.maintenance.confineSpecRollouts).
const ReasonWaitingForMaintenanceWindow = "WaitingForMaintenanceWindow"

// setConfinement decides, from the spec and Input.Now alone (pure: the
// window rules are schemas/maintenance's, the clock is the caller's),
// whether rollouts are confined now: spec.maintenance.confineSpecRollouts
// is set and every window is closed. A confined pool starts no new
// replacement of an outdated machine; one in progress completes
// (rollingUpdate, planControlPlane). A pool whose outdated machines run
// an older Kubernetes version than the one a user's `capn upgrade` set
// (annotations.UpgradeAtOnce) is not confined: the explicit upgrade runs
// at once.
//
// The window is read from the spec rather than from the maintenance
// service's record (Input.Maintenance): the spec read in the same
// snapshot as the machines cannot disagree with them — a record lags a
// spec that just added windows and the confinement in one apply, and
// would let that apply's template change roll. The record still wakes
// the planner at the window's opening (it changes then and the planner
// watches it); RequeueAfter to the opening is the safety net.
func (p *planner) setConfinement() {
	m := p.c.GetSpec().GetMaintenance()
	if !m.GetConfineSpecRollouts() || len(m.GetWindows()) == 0 {
		return
	}
	open, next := maintenance.Open(m, p.in.Now)
	if open {
		return
	}
	p.windowOpens = next
	forced := p.c.GetMetadata().GetAnnotations()[annotations.UpgradeAtOnce]
	for _, pl := range append([]*pool{p.cp}, p.pools...) {
		pl.confined = !forcedUpgrade(pl, forced)
	}
}

// forcedUpgrade says the pool moves to the version a user's explicit
// `capn upgrade` set (forced): its version is that one and one of its
// machines runs another.
func forcedUpgrade(pl *pool, forced string) bool {
	if forced == "" || pl.version != forced {
		return false
	}
	for _, m := range pl.machines {
		if m.outdated && m.m.GetSpec().GetVersion() != forced {
			return true
		}
	}
	return false
}

// held says pl has outdated machines whose replacement waits for the
// window.
func (pl *pool) held() bool { return pl.confined && pl.anyOutdated() }

// opensAt says when the window opens, for messages.
func (p *planner) opensAt() string {
	if p.windowOpens.IsZero() {
		return "(no window opens)"
	}
	return "at " + p.windowOpens.UTC().Format(time.RFC3339)
}

// heldMessage is a held pool's note: why its outdated machines stay.
func (p *planner) heldMessage() string {
	return "replacing outdated machines waits for the maintenance window opening " + p.opensAt() + " (spec.maintenance.confineSpecRollouts)"
}

// confinedPoolHold is a worker pool's hold while the control plane's
// rollout is confined: a pool may go on creating machines (scaling is
// never held by a window) unless they would run a newer Kubernetes than
// the control plane's oldest machine — a kubelet must never be newer
// than its API server.
func (p *planner) confinedPoolHold(pl *pool) string {
	cpV, err1 := manifest.ParseVersion(p.cp.obs.minVersion)
	v, err2 := manifest.ParseVersion(pl.version)
	if err1 != nil || err2 != nil || v.Compare(cpV) > 0 {
		return "waiting for the control plane to roll out, which waits for the maintenance window opening " + p.opensAt()
	}
	return ""
}

// waiting is the MaintenanceStatus.waiting entry of the held rollouts
// (nil: none), naming the parts held and their outdated machines.
func (p *planner) waiting() *capnv1.MaintenanceWait {
	var parts []string
	for _, pl := range append([]*pool{p.cp}, p.pools...) {
		if !pl.held() || pl.blocked != "" {
			continue
		}
		what := "pool " + pl.name
		if pl.controlPlane {
			what = "control plane"
		}
		parts = append(parts, fmt.Sprintf("%s (%s outdated)", what, plural(pl.obs.outdated, "machine")))
	}
	if len(parts) == 0 {
		return nil
	}
	return &capnv1.MaintenanceWait{Change: ChangeSpecRollout,
		Message: "rolling out " + strings.Join(parts, ", ") + " waits for the maintenance window opening " + p.opensAt() + " (spec.maintenance.confineSpecRollouts)"}
}

// onlyHeld says every worker pool that is not ready waits for the window
// and nothing else (Ready's reason is then WaitingForMaintenanceWindow).
func (p *planner) onlyHeld() bool {
	for _, pl := range p.pools {
		if ok, reason, _ := p.poolReady(pl); !ok && reason != ReasonWaitingForMaintenanceWindow {
			return false
		}
	}
	return true
}
