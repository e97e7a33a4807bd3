package remediator

import (
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// recordRef is a history record with its time decoded.
type recordRef struct {
	rec *capnv1.RemediationRecord
	at  time.Time
}

func refs(st *capnv1.RemediationStatus) []recordRef {
	out := make([]recordRef, 0, len(st.GetHistory()))
	for _, r := range st.GetHistory() {
		out = append(out, recordRef{rec: proto.Clone(r).(*capnv1.RemediationRecord), at: r.GetTime().AsTime()})
	}
	return out
}

// incarnationAt is the machine named name that existed at t (created no
// later than t): the one a record made at t acted on.
func incarnationAt(ms []Machine, name string, t time.Time) (Machine, bool) {
	for _, m := range ms {
		if m.Name == name && !m.Created.After(t) {
			return m, true
		}
	}
	return Machine{}, false
}

// replacementOf is the machine that refilled the pool after a
// replacement at t: the first one created after t. The planner may give it
// another name than the machine it replaces (it creates before it removes
// the old record), so a slot is found by time, not by name. With one
// repair in flight at a time this is the replacement; a scale-up at the
// same moment could be taken for it (documented).
func replacementOf(ms []Machine, t time.Time) (Machine, bool) {
	var out Machine
	found := false
	for _, m := range ms {
		if m.Created.After(t) && (!found || m.Created.Before(out.Created) || (m.Created.Equal(out.Created) && m.Name < out.Name)) {
			out, found = m, true
		}
	}
	return out, found
}

// settle decides the outcome of an in-progress record at now, and when to
// look again while it stays in progress (zero: no time-based change).
//
//   - reboot: Succeeded once the machine is judged healthy by a verdict
//     written after the reboot; Failed when it is still unhealthy
//     rebootTimeout after it (then the ladder replaces it), or when the
//     machine is gone or being deleted.
//   - replace: in progress while the replaced machine is still there;
//     then Succeeded once its replacement (replacementOf) runs, or when
//     none comes because the pool has its replicas; Failed if the
//     replacement failed, or nothing ran within replaceTimeout.
func settle(r recordRef, p Pool, t Timing, now time.Time) (string, time.Time) {
	switch r.rec.GetAction() {
	case ActionReboot:
		m, ok := incarnationAt(p.Machines, r.rec.GetMachine(), r.at)
		switch {
		case !ok || m.Deleting:
			return OutcomeFailed, time.Time{}
		case !m.unhealthy() && m.HealthUpdated.After(r.at):
			return OutcomeSucceeded, time.Time{}
		case !now.Before(r.at.Add(t.RebootTimeout)):
			return OutcomeFailed, time.Time{}
		}
		return OutcomeInProgress, r.at.Add(t.RebootTimeout)
	case ActionReplace:
		if !now.Before(r.at.Add(t.ReplaceTimeout)) {
			return OutcomeFailed, time.Time{}
		}
		if _, ok := incarnationAt(p.Machines, r.rec.GetMachine(), r.at); ok {
			return OutcomeInProgress, r.at.Add(t.ReplaceTimeout) // the old machine is still going
		}
		if m, ok := replacementOf(p.Machines, r.at); ok {
			switch m.Phase {
			case capnv1.MachineRunning:
				return OutcomeSucceeded, time.Time{}
			case capnv1.MachineFailed:
				return OutcomeFailed, time.Time{}
			}
			return OutcomeInProgress, r.at.Add(t.ReplaceTimeout)
		}
		active := 0
		for _, m := range p.Machines {
			if !m.Deleting {
				active++
			}
		}
		if active >= p.Replicas {
			return OutcomeSucceeded, time.Time{}
		}
		return OutcomeInProgress, r.at.Add(t.ReplaceTimeout)
	}
	return OutcomeFailed, time.Time{}
}

// trim keeps the newest limit records, never dropping one in progress.
func trim(h []*capnv1.RemediationRecord, limit int) []*capnv1.RemediationRecord {
	for len(h) > limit {
		i := slices.IndexFunc(h, func(r *capnv1.RemediationRecord) bool { return r.GetOutcome() != OutcomeInProgress })
		if i < 0 {
			break
		}
		h = slices.Delete(h, i, i+1)
	}
	return h
}
