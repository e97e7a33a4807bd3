package remediator

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
)

// ConditionRemediationBlocked is the condition of a pool's
// RemediationStatus: True while unhealthy machines are left alone, with the
// guard's reason and numbers; False otherwise.
const ConditionRemediationBlocked = "RemediationBlocked"

// Timing are the remediator's waits.
type Timing struct {
	// RebootTimeout: how long a rebooted machine may stay unhealthy before
	// it is replaced (default 5m).
	RebootTimeout time.Duration
	// MinHealthyPeriod: how long the machine that refilled a slot must stay
	// healthy before the slot is repaired again, and how long after a
	// successful reboot a machine is replaced rather than rebooted again
	// (default 1h, as KubeadmControlPlane).
	MinHealthyPeriod time.Duration
	// ReplaceTimeout: how long a replacement may take before its record
	// fails and stops counting in flight (default 30m).
	ReplaceTimeout time.Duration
	// HistoryLimit: records kept per pool (default 50).
	HistoryLimit int
	// Settle: how long a verdict must have been written before the
	// machine is repaired (default 3s). Failures that arrive together — a
	// rack or a zone going down — are then counted together by the circuit
	// breaker instead of the first being repaired before the others are
	// known.
	Settle time.Duration
	// Redrive: how long after a reboot record its command is sent again
	// when a reconcile finds it (default 1m, within JetStream's duplicate
	// window, so a resend is dropped, never a second reboot).
	Redrive time.Duration
}

func (t Timing) withDefaults() Timing {
	if t.RebootTimeout <= 0 {
		t.RebootTimeout = 5 * time.Minute
	}
	if t.MinHealthyPeriod <= 0 {
		t.MinHealthyPeriod = time.Hour
	}
	if t.ReplaceTimeout <= 0 {
		t.ReplaceTimeout = 30 * time.Minute
	}
	if t.HistoryLimit <= 0 {
		t.HistoryLimit = 50
	}
	if t.Redrive <= 0 {
		t.Redrive = time.Minute
	}
	if t.Settle <= 0 {
		t.Settle = 3 * time.Second
	}
	return t
}

// Action is one repair to carry out. Its record is already in the pool's
// status of the same Decision; the caller writes the status first and then
// acts, so that a crash in between leaves a record the next reconcile
// re-drives (Redrive), never an action nobody remembers.
type Action struct {
	Kind     string // ActionReboot or ActionReplace
	Pool     string
	Machine  string
	Provider string
	// At is the record's time: it names the incarnation acted on (created
	// no later than At) and makes the command id deterministic.
	At     time.Time
	Reason string
	// Redrive: the action of an earlier record, sent again in case it was
	// lost; it is idempotent.
	Redrive bool
}

// Decision is what Decide wants done for one cluster.
type Decision struct {
	Actions []Action
	// Statuses are the pools' remediation statuses to write (when they
	// differ from the ones read), in pool order.
	Statuses []*capnv1.RemediationStatus
	// RequeueAfter is when to look again although nothing changed (0: no
	// need).
	RequeueAfter time.Duration
}

// Decide computes the repairs of one cluster. It is a pure function of the
// snapshot. For each pool:
//
//  1. settle the outcome of records in progress;
//  2. re-drive records in progress whose action may have been lost;
//  3. guard: paused cluster → nothing; more unhealthy than maxUnhealthy →
//     nothing; a control-plane machine deleting → nothing; maxInFlight
//     repairs under way → nothing more;
//  4. repair the most broken machines first (once their verdict is Settle
//     old), within maxInFlight (one for
//     the control plane), skipping machines annotated skip-remediation,
//     replacements still in their minHealthyPeriod, or whose repair would cost etcd its
//     quorum: reboot first where the provider can and a reboot may help
//     (and the machine was not rebooted within minHealthyPeriod), replace
//     otherwise — and after a reboot that did not help;
//  5. write the RemediationBlocked condition and the counts.
func Decide(s Snapshot, t Timing) Decision {
	t = t.withDefaults()
	var d Decision
	next := time.Time{}
	wake := func(at time.Time) {
		if at.After(s.Now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	for _, p := range s.Pools {
		st, acts := decidePool(s, p, t, wake)
		d.Actions = append(d.Actions, acts...)
		d.Statuses = append(d.Statuses, st)
	}
	if !next.IsZero() {
		d.RequeueAfter = next.Sub(s.Now)
	}
	return d
}

func decidePool(s Snapshot, p Pool, t Timing, wake func(time.Time)) (*capnv1.RemediationStatus, []Action) {
	now := s.Now
	st := &capnv1.RemediationStatus{Cluster: s.Cluster, Pool: p.Name}
	if p.Status != nil {
		st = proto.Clone(p.Status).(*capnv1.RemediationStatus)
	}
	st.Cluster, st.Pool = s.Cluster, p.Name

	// 1. Settle records in progress.
	history := refs(st)
	var inProgress []recordRef
	for _, r := range history {
		if r.rec.GetOutcome() != OutcomeInProgress {
			continue
		}
		outcome, at := settle(r, p, t, now)
		r.rec.Outcome = outcome
		if outcome == OutcomeInProgress {
			inProgress = append(inProgress, r)
			wake(at)
		}
	}

	// 2. Re-drive what may have been lost (never while paused).
	var acts []Action
	busy := map[string]bool{}
	for _, r := range inProgress {
		busy[r.rec.GetMachine()] = true
		if s.Paused {
			continue
		}
		m, ok := incarnationAt(p.Machines, r.rec.GetMachine(), r.at)
		switch {
		case !ok:
		case r.rec.GetAction() == ActionReplace && !m.Deleting:
			acts = append(acts, Action{Kind: ActionReplace, Pool: p.Name, Machine: m.Name, Provider: m.Provider, At: r.at, Reason: r.rec.GetReason(), Redrive: true})
		case r.rec.GetAction() == ActionReboot && now.Sub(r.at) < t.Redrive:
			acts = append(acts, Action{Kind: ActionReboot, Pool: p.Name, Machine: m.Name, Provider: m.Provider, At: r.at, Reason: r.rec.GetReason(), Redrive: true})
		}
	}

	// 3. Guards of the whole pool.
	counts := count(p, inProgress)
	var candidates []Machine
	var skipped []string
	for _, m := range p.Machines {
		if m.Deleting || len(m.Reasons) == 0 || m.Phase == capnv1.MachineFailed || busy[m.Name] {
			continue // failed machines are the planner's to replace
		}
		if m.Skip {
			skipped = append(skipped, m.Name)
			continue
		}
		if settled := m.HealthUpdated.Add(t.Settle); now.Before(settled) {
			wake(settled) // counted unhealthy, repaired once the burst is known
			continue
		}
		candidates = append(candidates, m)
	}
	slices.SortFunc(candidates, mostBrokenFirst)
	okBreaker, breakerMsg := breaker(counts, p.Policy.MaxUnhealthy)
	maxInFlight := p.Policy.MaxInFlight
	if p.ControlPlane {
		maxInFlight = 1 // KubeadmControlPlane: one remediation at a time
	}
	reason, msg := NotBlocked, breakerMsg+fmt.Sprintf("; %d of at most %d repairs in flight", counts.InFlight, maxInFlight)
	var newRecords []*capnv1.RemediationRecord
	switch {
	case len(candidates) == 0 && len(skipped) > 0:
		reason, msg = BlockedSkipped, fmt.Sprintf("unhealthy machines annotated %s: %s", AnnotationSkipRemediation, strings.Join(skipped, ", "))
	case len(candidates) == 0:
	case s.Paused:
		reason, msg = BlockedPaused, fmt.Sprintf("the cluster is paused; %s", breakerMsg)
	case !okBreaker:
		reason, msg = BlockedTooManyUnhealthy, breakerMsg
	case p.ControlPlane && cpDeleting(p, inProgress):
		reason, msg = BlockedControlPlaneBusy, "a control-plane machine is being deleted: one control-plane change at a time"
	default:
		ok, inFlightMsg := inFlight(counts, maxInFlight)
		if !ok {
			reason, msg = BlockedMaxInFlight, inFlightMsg
			break
		}
		// 4. Repair the most broken first.
		slots := maxInFlight - counts.InFlight
		var held []string
		heldReason := ""
		for _, m := range candidates {
			if slots == 0 {
				break
			}
			if until, why := minHealthy(m, p, history, t.MinHealthyPeriod, now); !until.IsZero() {
				wake(until)
				held, heldReason = append(held, why), cmpReason(heldReason, BlockedMinHealthyPeriod)
				continue
			}
			if p.ControlPlane {
				if ok, why := quorum(p.Machines, m.Name, s.ControlPlaneInitialized); !ok {
					held, heldReason = append(held, why), cmpReason(heldReason, BlockedControlPlaneQuorum)
					continue
				}
			}
			a := Action{Kind: ladder(m, history, t, now), Pool: p.Name, Machine: m.Name, Provider: m.Provider, At: now, Reason: summary(m)}
			acts = append(acts, a)
			newRecords = append(newRecords, &capnv1.RemediationRecord{Machine: m.Name, Action: a.Kind, Reason: a.Reason, Time: timestamppb.New(now), Outcome: OutcomeInProgress})
			slots--
			counts.InFlight++
			if a.Kind == ActionReboot {
				wake(now.Add(t.RebootTimeout))
			}
		}
		if len(newRecords) == 0 && len(held) > 0 {
			reason, msg = heldReason, strings.Join(held, "; ")
		}
	}
	if len(inProgress) > 0 || len(newRecords) > 0 {
		wake(now.Add(progressResync))
	}

	// 5. Status.
	hist := make([]*capnv1.RemediationRecord, 0, len(history)+len(newRecords))
	for _, r := range history {
		hist = append(hist, r.rec)
	}
	st.History = trim(append(hist, newRecords...), t.HistoryLimit)
	st.InFlight, st.Unhealthy, st.Total = int32(counts.InFlight), int32(counts.Unhealthy), int32(counts.Total)
	status := capnv1.ConditionFalse
	if reason != NotBlocked {
		status = capnv1.ConditionTrue
	}
	setCondition(st, ConditionRemediationBlocked, status, reason, msg, now)
	return st, acts
}

// progressResync bounds the wait for a repair's progress when no event
// wakes the remediator.
const progressResync = 30 * time.Second

// ladder picks the repair: reboot when the provider can, a reboot may help
// and this machine was not rebooted within minHealthyPeriod (a reboot that
// failed, or helped only briefly, escalates to a replacement); replace
// otherwise.
func ladder(m Machine, history []recordRef, t Timing, now time.Time) string {
	if !m.CanReboot || !rebootable(m) {
		return ActionReplace
	}
	for _, r := range slices.Backward(history) {
		if r.rec.GetMachine() != m.Name || r.rec.GetAction() != ActionReboot || r.at.Before(m.Created) {
			continue
		}
		if r.rec.GetOutcome() == OutcomeSucceeded && !now.Before(r.at.Add(t.MinHealthyPeriod)) {
			return ActionReboot
		}
		return ActionReplace
	}
	return ActionReboot
}

// cpDeleting: a control-plane machine is being deleted (KubeadmControlPlane
// remediates only when none is), other than by a replacement of ours that
// is already counted in flight.
func cpDeleting(p Pool, inProgress []recordRef) bool {
	for _, m := range p.Machines {
		if !m.Deleting {
			continue
		}
		ours := slices.ContainsFunc(inProgress, func(r recordRef) bool {
			return r.rec.GetAction() == ActionReplace && r.rec.GetMachine() == m.Name && !m.Created.After(r.at)
		})
		if !ours {
			return true
		}
	}
	return false
}

// summary is a record's reason: the machine's unhealthy reasons.
func summary(m Machine) string {
	parts := make([]string, 0, len(m.Reasons))
	for _, r := range m.Reasons {
		parts = append(parts, r.GetType()+": "+r.GetMessage())
	}
	return strings.Join(parts, "; ")
}

// cmpReason keeps the first reason given.
func cmpReason(cur, r string) string {
	if cur == "" {
		return r
	}
	return cur
}

// setCondition sets a condition by the one rule (conditions.Set).
func setCondition(st *capnv1.RemediationStatus, typ string, status capnv1.ConditionStatus, reason, msg string, now time.Time) {
	conditions.Set(&st.Conditions, conditions.New(typ, status, reason, msg), now)
}
