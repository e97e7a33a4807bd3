package cli

import (
	"fmt"
	"strings"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Maintenance windows and hibernation schedules in capn get and capn
// describe: the maintenance service's record, as the cluster's status
// carries it (ClusterStatus.maintenance, .hibernation).

// when is t as an instant and how far from now: "2026-10-25 00:30Z (in
// 5h)".
func when(t time.Time, now time.Time) string {
	s := t.UTC().Format("2006-01-02 15:04Z")
	if d := t.Sub(now); d >= 0 {
		return s + " (in " + humanDuration(d) + ")"
	}
	return s + " (" + humanDuration(now.Sub(t)) + " ago)"
}

// nextWindow is the get column: "open until …", "… " when it opens, with
// what waits for it; "<none>" for a cluster without maintenance settings.
func nextWindow(c *capnv1.Cluster, now time.Time) string {
	m := c.GetStatus().GetMaintenance()
	if m == nil {
		return orNone("")
	}
	var s string
	switch {
	case m.GetWindowOpen() && m.GetWindowCloses() != nil:
		s = "open until " + m.GetWindowCloses().AsTime().UTC().Format("2006-01-02 15:04Z")
	case m.GetWindowOpen():
		s = "always"
	case m.GetNextWindowOpen() != nil:
		s = m.GetNextWindowOpen().AsTime().UTC().Format("2006-01-02 15:04Z")
	default:
		return orNone("")
	}
	if n := len(m.GetWaiting()); n > 0 {
		w := m.GetWaiting()[0]
		if w.GetTo() == "" { // SpecRollout: a machine rollout
			s += fmt.Sprintf(" (%s waits)", w.GetChange())
		} else {
			s += fmt.Sprintf(" (%s %s waits)", w.GetChange(), w.GetTo())
		}
	}
	return s
}

// nextTransition is the get column: "hibernates 2026-10-24 17:00Z",
// "(override)" while a manual change holds.
func nextTransition(c *capnv1.Cluster) string {
	h := c.GetStatus().GetHibernation()
	if h.GetNextTransition() == nil {
		return orNone("")
	}
	verb := "wakes"
	if h.GetNextHibernates() {
		verb = "hibernates"
	}
	s := verb + " " + h.GetNextTransition().AsTime().UTC().Format("2006-01-02 15:04Z")
	if h.GetOverride() {
		s += " (override)"
	}
	return s
}

// describeMaintenance is capn describe's Maintenance and Hibernation
// sections; nothing for a cluster with neither.
func describeMaintenance(b *strings.Builder, c *capnv1.Cluster, now time.Time) {
	spec, st := c.GetSpec(), c.GetStatus()
	if m := spec.GetMaintenance(); m != nil {
		b.WriteString("Maintenance:\n")
		if len(m.GetWindows()) == 0 {
			b.WriteString("  Windows:      none (always open)\n")
		}
		for _, w := range m.GetWindows() {
			days := "every day"
			if len(w.GetDays()) > 0 {
				days = strings.Join(w.GetDays(), ",")
			}
			tz := w.GetTimeZone()
			if tz == "" {
				tz = "UTC"
			}
			fmt.Fprintf(b, "  Window:       %s %s-%s %s\n", days, w.GetStart(), w.GetEnd(), tz)
		}
		fmt.Fprintf(b, "  Auto-patch:   %v\n", m.GetAutoPatch())
		if p := m.GetPendingVersion(); p != "" {
			fmt.Fprintf(b, "  Pending:      upgrade to %s in the next window\n", p)
		}
		if m.GetConfineSpecRollouts() {
			b.WriteString("  Confined:     machine rollouts start only in a window (confineSpecRollouts)\n")
		}
		ms := st.GetMaintenance()
		switch {
		case ms == nil:
			b.WriteString("  Status:       <none> (the maintenance service has not recorded this cluster)\n")
		case ms.GetWindowOpen() && ms.GetWindowCloses() != nil:
			fmt.Fprintf(b, "  Window open:  until %s\n", when(ms.GetWindowCloses().AsTime(), now))
		case ms.GetWindowOpen():
			b.WriteString("  Window open:  always\n")
		case ms.GetNextWindowOpen() != nil:
			fmt.Fprintf(b, "  Next window:  %s\n", when(ms.GetNextWindowOpen().AsTime(), now))
		}
		for _, w := range ms.GetWaiting() {
			if w.GetFrom() == "" && w.GetTo() == "" { // SpecRollout: a machine rollout
				fmt.Fprintf(b, "  Waiting:      %s: %s\n", w.GetChange(), w.GetMessage())
				continue
			}
			fmt.Fprintf(b, "  Waiting:      %s %s → %s: %s\n", w.GetChange(), w.GetFrom(), w.GetTo(), w.GetMessage())
		}
		if la := ms.GetLastApplied(); la != "" {
			fmt.Fprintf(b, "  Last applied: %s at %s\n", la, ms.GetLastAppliedTime().AsTime().UTC().Format(time.RFC3339))
		}
	}
	if h := spec.GetHibernation(); len(h.GetSchedules()) > 0 {
		b.WriteString("Hibernation:\n")
		for _, s := range h.GetSchedules() {
			loc := s.GetLocation()
			if loc == "" {
				loc = "UTC"
			}
			fmt.Fprintf(b, "  Schedule:     hibernate %q, wake %q (%s)\n", s.GetStart(), s.GetEnd(), loc)
		}
		hs := st.GetHibernation()
		if hs.GetNextTransition() != nil {
			verb := "wake"
			if hs.GetNextHibernates() {
				verb = "hibernate"
			}
			fmt.Fprintf(b, "  Next:         %s at %s\n", verb, when(hs.GetNextTransition().AsTime(), now))
		}
		if hs.GetOverride() {
			fmt.Fprintf(b, "  Override:     %s\n", hs.GetMessage())
		}
	}
}
