package maintenance

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/maintenance"
	"github.com/capn-dev/capn/schemas/manifest"
)

// Changes held for a window (MaintenanceWait.change).
const (
	ChangeAutoPatch = "AutoPatch"
	ChangeUpgrade   = "Upgrade"
)

// Input is what Decide decides from: one cluster, the service's record
// of it (nil: none yet), the Kubernetes version catalogue (nil: none)
// and the time.
type Input struct {
	Cluster   *capnv1.Cluster
	Record    *capnv1.MaintenanceRecord
	Catalogue *capnv1.KubernetesVersions
	Now       time.Time
}

// Output is what Decide wants done.
type Output struct {
	// Version, if set, is the new spec.kubernetes_version (Change says
	// why); pools whose version equals From move with it.
	Version, From, Change string
	// ClearPending clears spec.maintenance.pending_version.
	ClearPending bool
	// SetHibernated, if set, is the new spec.hibernated.
	SetHibernated *bool
	// Record is the record to store, as it reads once the changes above
	// are made (nil: the cluster needs none).
	Record *capnv1.MaintenanceRecord
	// Recheck is the next instant the answer changes by itself (zero:
	// never).
	Recheck time.Time
}

// SpecChange says whether o changes the cluster's spec.
func (o Output) SpecChange() bool { return o.Version != "" || o.ClearPending || o.SetHibernated != nil }

// Apply makes o's spec changes to c and reports whether it changed
// anything; it bumps the generation as the gateway does for a spec
// change.
func (o Output) Apply(c *capnv1.Cluster) bool {
	s := c.GetSpec()
	if s == nil || !o.SpecChange() {
		return false
	}
	if o.Version != "" && s.KubernetesVersion == o.From {
		s.KubernetesVersion = o.Version
		for _, p := range s.WorkerPools {
			if p.GetVersion() == o.From {
				p.Version = o.Version
			}
		}
	}
	if o.ClearPending && s.Maintenance != nil {
		s.Maintenance.PendingVersion = ""
	}
	if o.SetHibernated != nil {
		s.Hibernated = *o.SetHibernated
	}
	if c.Metadata == nil {
		c.Metadata = &capnv1.ObjectMeta{}
	}
	c.Metadata.Generation = max(c.Metadata.Generation, 1) + 1
	return true
}

// Decide is the maintenance rule, pure: auto-patch and a pending upgrade
// wait for the cluster's window (always open without windows) and are
// applied in it; the hibernation schedules set spec.hibernated at their
// transitions, once each, so that a user's change in between holds until
// the next one (maintenance.Schedules.Decide). A paused or deleting
// cluster gets its record, never a change.
func Decide(in Input) Output {
	spec := in.Cluster.GetSpec()
	frozen := spec.GetPaused() || in.Cluster.GetMetadata().GetDeletionTimestamp() != nil
	var out Output
	rec := &capnv1.MaintenanceRecord{}
	recheck := func(t time.Time) {
		if !t.IsZero() && (out.Recheck.IsZero() || t.Before(out.Recheck)) {
			out.Recheck = t
		}
	}

	if m := spec.GetMaintenance(); m != nil {
		st := &capnv1.MaintenanceStatus{
			LastApplied:     in.Record.GetMaintenance().GetLastApplied(),
			LastAppliedTime: in.Record.GetMaintenance().GetLastAppliedTime(),
		}
		rec.Maintenance = st
		ws, errs := maintenance.ParseWindows(m)
		if len(errs) == 0 {
			open, next := ws.State(in.Now)
			st.WindowOpen = open
			if open && !next.IsZero() {
				st.WindowCloses = timestamppb.New(next)
			} else if !open {
				st.NextWindowOpen = timestamppb.New(next)
			}
			recheck(next)
			cur := spec.GetKubernetesVersion()
			want, change := wanted(m, cur, in.Catalogue)
			if pending := m.GetPendingVersion(); pending != "" && !newer(pending, cur) {
				// Reached already (an upgrade of its own, or applied).
				out.ClearPending = !frozen
			}
			switch {
			case want == "":
			case open && !frozen:
				out.Version, out.From, out.Change = want, cur, change
				if pending := m.GetPendingVersion(); pending != "" && !newer(pending, want) {
					out.ClearPending = true
				}
				st.LastApplied = fmt.Sprintf("%s %s → %s", change, cur, want)
				st.LastAppliedTime = timestamppb.New(in.Now)
			default:
				why := "waits for the maintenance window opening " + stamp(next)
				if frozen {
					why = "waits: the cluster is paused or being deleted"
				}
				st.Waiting = append(st.Waiting, &capnv1.MaintenanceWait{Change: change, From: cur, To: want, Message: why})
			}
		}
	}

	if h := spec.GetHibernation(); len(h.GetSchedules()) > 0 {
		ss, errs := maintenance.ParseSchedules(h)
		if len(errs) == 0 {
			var seen time.Time
			if t := in.Record.GetSeenTransition(); t != nil {
				seen = t.AsTime()
			}
			d := ss.Decide(spec.GetHibernated(), seen, in.Now)
			st := &capnv1.HibernationStatus{Override: d.Override}
			switch {
			case d.Set && frozen:
				// Applied once unfrozen: seen stays where it was.
				st.Message = "a scheduled transition waits: the cluster is paused or being deleted"
			case d.Set:
				v := d.Hibernate
				out.SetHibernated = &v
				rec.SeenTransition = timestamppb.New(d.Seen)
			default:
				if !d.Seen.IsZero() {
					rec.SeenTransition = timestamppb.New(d.Seen)
				}
			}
			if rec.SeenTransition != nil {
				st.LastTransition = rec.SeenTransition
			} else if in.Record.GetSeenTransition() != nil {
				rec.SeenTransition = in.Record.GetSeenTransition()
				st.LastTransition = rec.SeenTransition
			}
			if !d.Next.IsZero() {
				st.NextTransition, st.NextHibernates = timestamppb.New(d.Next.At), d.Next.Hibernate
				recheck(d.Next.At)
			}
			verb := "wakes"
			if d.Next.Hibernate {
				verb = "hibernates"
			}
			switch {
			case st.Message != "":
			case d.Override && spec.GetHibernated():
				st.Message = "hibernated by hand against the schedule, until it " + verb + " " + stamp(d.Next.At)
			case d.Override:
				st.Message = "woken by hand against the schedule, until it " + verb + " " + stamp(d.Next.At)
			case !d.Next.IsZero():
				st.Message = "the schedule " + verb + " the cluster " + stamp(d.Next.At)
			}
			rec.Hibernation = st
		}
	}
	if rec.Maintenance == nil && rec.Hibernation == nil {
		return out
	}
	out.Record = rec
	return out
}

// wanted is the version the cluster should move to in its window: the
// newest supported patch of its minor (auto-patch) or the pending
// upgrade's, whichever is newer; "" for none.
func wanted(m *capnv1.MaintenanceSpec, cur string, cat *capnv1.KubernetesVersions) (version, change string) {
	if m.GetAutoPatch() && cat != nil {
		if v, ok := manifest.NewestPatch(cat, cur); ok {
			version, change = v, ChangeAutoPatch
		}
	}
	if p := m.GetPendingVersion(); p != "" && newer(p, cur) && (version == "" || newer(p, version)) {
		version, change = p, ChangeUpgrade
	}
	return version, change
}

// newer says a is a newer version than b (false when either does not
// parse).
func newer(a, b string) bool {
	av, err1 := manifest.ParseVersion(a)
	bv, err2 := manifest.ParseVersion(b)
	return err1 == nil && err2 == nil && av.Compare(bv) > 0
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "(never)"
	}
	return "at " + t.UTC().Format(time.RFC3339)
}
