package maintenance

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Window is a parsed MaintenanceWindow: it opens at start on each of its
// days (local wall clock of loc) and stays open for the wall-clock span to
// end, which is on the next day when end is at or before start.
type Window struct {
	days       [7]bool // by time.Weekday
	start, end int     // minutes after local midnight
	loc        *time.Location
}

// Interval is [Start, End): a window open.
type Interval struct{ Start, End time.Time }

var weekdays = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

// DayNames are the accepted day names, in order.
var DayNames = []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}

// FieldError is one bad field of a window or schedule: Field is the path
// below the message ("days[2]", "start", "timeZone").
type FieldError struct {
	Field, Problem string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// ParseWindow parses w, reporting every bad field.
func ParseWindow(w *capnv1.MaintenanceWindow) (*Window, []*FieldError) {
	var errs []*FieldError
	out := &Window{}
	if len(w.GetDays()) == 0 {
		out.days = [7]bool{true, true, true, true, true, true, true}
	}
	for i, d := range w.GetDays() {
		wd, ok := weekdays[strings.ToLower(d)]
		if !ok {
			errs = append(errs, &FieldError{fmt.Sprintf("days[%d]", i), fmt.Sprintf("%q is not a day: want one of %s", d, strings.Join(DayNames, ", "))})
			continue
		}
		out.days[wd] = true
	}
	var err error
	if out.start, err = clock(w.GetStart()); err != nil {
		errs = append(errs, &FieldError{"start", err.Error()})
	}
	if out.end, err = clock(w.GetEnd()); err != nil {
		errs = append(errs, &FieldError{"end", err.Error()})
	}
	if out.loc, err = Location(w.GetTimeZone()); err != nil {
		errs = append(errs, &FieldError{"timeZone", err.Error()})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// Location loads an IANA time zone; empty is UTC.
func Location(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if name == "Local" {
		return nil, fmt.Errorf("%q is the server's own zone: name an IANA time zone such as Europe/Berlin or UTC", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not an IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)", name)
	}
	return loc, nil
}

// clock parses "HH:MM" to minutes after midnight.
func clock(s string) (int, error) {
	hs, ms, ok := strings.Cut(s, ":")
	h, herr := strconv.Atoi(hs)
	m, merr := strconv.Atoi(ms)
	if !ok || herr != nil || merr != nil || len(hs) != 2 || len(ms) != 2 || h < 0 || h > 23 || m < 0 || m > 59 {
		return 0, fmt.Errorf("%q is not a time: want HH:MM, 00:00 to 23:59", s)
	}
	return h*60 + m, nil
}

// occurrence is the window opening on the local day (y, m, d).
func (w *Window) occurrence(y int, m time.Month, d int) Interval {
	start := WallTime(y, m, d, w.start/60, w.start%60, w.loc)
	ed := d
	if w.end <= w.start {
		ed++
	}
	end := WallTime(y, m, ed, w.end/60, w.end%60, w.loc)
	return Interval{start, end}
}

// Intervals are the window's openings that overlap [from, to), in order.
func (w *Window) Intervals(from, to time.Time) []Interval {
	var out []Interval
	lf := from.In(w.loc)
	y, m, d := lf.Date()
	for i := -1; ; i++ {
		day := time.Date(y, m, d+i, 12, 0, 0, 0, time.UTC)
		if !w.days[day.Weekday()] {
			if WallTime(day.Year(), day.Month(), day.Day(), 0, 0, w.loc).After(to) {
				break
			}
			continue
		}
		iv := w.occurrence(day.Year(), day.Month(), day.Day())
		if !iv.Start.Before(to) {
			break
		}
		if iv.End.After(from) && iv.End.After(iv.Start) {
			out = append(out, iv)
		}
	}
	return out
}

// Windows is a cluster's parsed windows: open when any one is.
type Windows []*Window

// ParseWindows parses spec's windows; errors name the field below
// maintenance ("windows[1].start").
func ParseWindows(spec *capnv1.MaintenanceSpec) (Windows, []*FieldError) {
	var out Windows
	var errs []*FieldError
	for i, w := range spec.GetWindows() {
		pw, werrs := ParseWindow(w)
		for _, e := range werrs {
			errs = append(errs, &FieldError{fmt.Sprintf("windows[%d].%s", i, e.Field), e.Problem})
		}
		out = append(out, pw)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// week bounds how far ahead a window is looked for: every window opens
// within a week (plus a day for its zone and a DST change).
const week = 8 * 24 * time.Hour

// merged are the openings of ws overlapping [from, from+2 weeks), merged
// where they overlap or touch.
func (ws Windows) merged(from time.Time) []Interval {
	var all []Interval
	for _, w := range ws {
		all = append(all, w.Intervals(from, from.Add(2*week))...)
	}
	slices.SortFunc(all, func(a, b Interval) int { return a.Start.Compare(b.Start) })
	var out []Interval
	for _, iv := range all {
		if n := len(out); n > 0 && !iv.Start.After(out[n-1].End) {
			if iv.End.After(out[n-1].End) {
				out[n-1].End = iv.End
			}
			continue
		}
		out = append(out, iv)
	}
	return out
}

// State answers for an instant: open says a window is open at now; next
// is when that changes — when the open window closes (windows that
// overlap or touch count as one), or when the next one opens. With no
// windows, or windows that never close (every day, 00:00 to 00:00), it is
// always open and next is zero.
func (ws Windows) State(now time.Time) (open bool, next time.Time) {
	if len(ws) == 0 {
		return true, time.Time{}
	}
	for _, iv := range ws.merged(now) {
		if !now.Before(iv.Start) && now.Before(iv.End) {
			if iv.End.Sub(now) > week {
				// Open for more than a week: the weekly pattern never
				// closes (every day, 00:00 to 00:00).
				return true, time.Time{}
			}
			return true, iv.End
		}
		if iv.Start.After(now) {
			return false, iv.Start
		}
	}
	return false, time.Time{}
}

// NextOpen is now when a window is open, else when the next one opens
// (zero with no windows: always open).
func (ws Windows) NextOpen(now time.Time) time.Time {
	open, next := ws.State(now)
	if open {
		return now
	}
	return next
}

// Open is the function rollouts and every other disruptive change ask:
// whether spec's windows are open at now and when that changes next (the
// open window's close, or the next opening). A spec with no windows (or
// nil), or windows that never close, is always open, next zero. A spec that does not parse is treated as
// closed with next zero: validation refuses it before it is stored.
func Open(spec *capnv1.MaintenanceSpec, now time.Time) (open bool, next time.Time) {
	ws, errs := ParseWindows(spec)
	if len(errs) > 0 {
		return false, time.Time{}
	}
	return ws.State(now)
}
